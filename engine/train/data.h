// engine/train/data.h: the input pipeline: synthetic (MaxText semantics), byte-level text
// from any file, and pre-tokenized .npy token files. Deterministic and seekable: batch i
// depends only on (seed, i), so a resumed run sees the same data as an uninterrupted one.
//
// Text with `packing` (MaxText's key, default true): a file with document separators, lines
// holding only '%' (fortune files), is packed as MaxText packs examples: each row holds whole
// documents (a document longer than a row is truncated to it), segment ids 1, 2, ... per
// document and 0 for the padding after the last one, positions restarting at 0 in each
// document; the model's attention then masks keys of other segments (ModelConfig::
// attention_segment_ids) and the loss ignores segment 0. A text file without '%' lines (or
// packing=false) is one stream: rows are windows at random offsets, segment 1 throughout.
// .npy token files have no document boundaries: always one stream; packing=true set
// explicitly with one is a config error.
//
// Under mpirun a source produces only the rows of the global batch this process's devices
// hold (set_rows, from Runtime::local_rows): every row is a function of (seed, batch, global
// row), so they are bitwise the rows the one-process run produces (docs/distributed.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/train/config.h"

namespace eng {

// The rows `rows` of one global batch, as MaxText's get_shaped_batch arrays: (R, T) int32
// each, R = rows.size() (all B rows in one process; this process's rows under mpirun).
struct HostBatch {
  int64_t batch = 0, seq = 0;  // rows held (R), tokens per row (T)
  std::vector<int64_t> rows;   // the global batch row of each held row, ascending
  std::vector<int32_t> inputs, inputs_position, inputs_segmentation;
  std::vector<int32_t> targets, targets_position, targets_segmentation;
  void resize(int64_t b, int64_t t);
  // The six arrays in declare_batch's argument order.
  std::vector<const std::vector<int32_t>*> arrays() const;
};

class DataSource {
 public:
  explicit DataSource(int64_t global_batch, int64_t seq);
  virtual ~DataSource() = default;
  // Fills `out` with the selected rows of batch number position() and advances; reuses out's
  // storage (allocates only the first time).
  void next(HostBatch& out);
  virtual std::string describe() const = 0;  // "text:/usr/share/games/fortunes (1.2 MB)"
  int64_t position() const { return position_; }
  void set_position(int64_t p) { position_ = p; }
  // Produce only these global rows of every batch (ascending, distinct, each in [0, B)); by
  // default all B. Errors name the first bad row.
  Status set_rows(std::vector<int64_t> rows);
  const std::vector<int64_t>& rows() const { return rows_; }
  int64_t rows_produced() const { return rows_produced_; }  // by next(), since creation

 protected:
  // Fills out's rows (out.rows[k] is the global row of held row k) of batch position_; out is
  // sized and zeroed.
  virtual void fill(HostBatch& out) = 0;
  int64_t global_batch_, seq_;

 private:
  int64_t position_ = 0;         // batches produced so far (checkpointed as the data position)
  std::vector<int64_t> rows_;    // the global rows next() fills
  int64_t rows_produced_ = 0;
};

// Opens the dataset the config names. Errors: missing or unreadable file, empty text,
// text shorter than one sequence, token ids outside [0, vocab), a malformed .npy header.
// text and .npy files must be regular files of at most 1 GiB (a FIFO, /dev/zero or
// /dev/urandom is refused at once).
Result<std::unique_ptr<DataSource>> make_data_source(const ResolvedConfig& config);

// The tokens of a 1-D .npy integer array (uint8, uint16, int32, int64; format 1-3) held in
// raw, each checked to be in [0, vocab); path names the file in errors. The fuzz target
// tests/fuzz/npy_fuzz.cpp drives it.
Result<std::vector<int32_t>> parse_npy_tokens(const std::string& path, const std::string& raw,
                                              int64_t vocab);

}  // namespace eng
