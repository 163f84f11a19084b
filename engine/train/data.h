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
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/train/config.h"

namespace eng {

// One global batch, as MaxText's get_shaped_batch arrays: (B, T) int32 each.
struct HostBatch {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> inputs, inputs_position, inputs_segmentation;
  std::vector<int32_t> targets, targets_position, targets_segmentation;
  void resize(int64_t b, int64_t t);
  // The six arrays in declare_batch's argument order.
  std::vector<const std::vector<int32_t>*> arrays() const;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Fills `out` with batch number position() and advances; reuses out's storage.
  virtual void next(HostBatch& out) = 0;
  virtual std::string describe() const = 0;  // "text:/usr/share/games/fortunes (1.2 MB)"
  int64_t position() const { return position_; }
  void set_position(int64_t p) { position_ = p; }

 protected:
  int64_t position_ = 0;  // batches produced so far (checkpointed as the data position)
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
