// engine/train/checkpoint.h: checkpoints as safetensors files, written atomically and
// verified on load, plus the directory layout MaxText's checkpoint manager uses.
//
//   <base_output_directory>/<run_name>/checkpoints/<step>/state.safetensors
//
// File format (https://huggingface.co/docs/safetensors): 8-byte little-endian header length
// N, N bytes of JSON (padded with spaces to a multiple of 8), then the tensor data,
// row-major, little-endian, in header order. Each tensor entry is
//   "params/decoder/layers_0/mlp/wi_0/kernel": {"dtype": "F32", "shape": [64, 128],
//                                                "data_offsets": [begin, end]}
// (offsets relative to the data section) and "__metadata__" maps strings to strings:
// format ("shardlab-checkpoint"), format_version ("1"), step (the checkpoint's label: the
// state after that step), data_position, init_weights_seed, data_shuffle_seed, data_bytes,
// crc32 (8 hex digits, zlib.crc32's polynomial, over the header JSON with this value written
// as "00000000" followed by the data section) and a few descriptive keys. See docs/checkpoints.md for numpy/PyTorch loading.
//
// Atomicity: the file is written as state.safetensors.tmp.<random> beside its final name
// (created with O_EXCL | O_NOFOLLOW: never an existing file or a planted symlink), fsynced,
// renamed, and the directory fsynced; a crash leaves either the old state or the new one, and
// a leftover .tmp.* is never read. Loading checks the header, the file size and the checksum
// before any tensor is handed out: a truncated or corrupted file is refused, never loaded.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/function_ref.h"
#include "engine/base/status.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/shape.h"

namespace eng {

inline constexpr const char* kCheckpointFileName = "state.safetensors";
inline constexpr const char* kCheckpointFormatVersion = "1";

// CRC-32 (IEEE, zlib's): crc32(data, crc32(prefix)) == crc32(prefix + data).
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

struct CheckpointTensorSpec {
  std::string name;  // program argument name
  DType dtype = DType::kF32;
  Shape shape;
};

struct CheckpointWriteOptions {
  // Debug (timing and crash tests): sleep this long halfway through writing the data.
  double debug_delay_s = 0;
};

// Writes `path` atomically. fill(i, dst) writes tensor i's global host data (numel * dtype
// size bytes) into dst. metadata must not contain crc32/data_bytes/format keys (added here).
// Returns the file size in bytes.
Result<int64_t> write_checkpoint(const std::string& path,
                                 std::span<const CheckpointTensorSpec> tensors,
                                 FunctionRef<Status(int, void*)> fill,
                                 const std::map<std::string, std::string>& metadata,
                                 const CheckpointWriteOptions& options = {});

// A verified checkpoint in memory.
struct CheckpointFile {
  struct Entry {
    CheckpointTensorSpec spec;
    int64_t begin = 0, end = 0;  // byte range in data
  };
  std::string path;
  std::map<std::string, std::string> metadata;
  std::vector<Entry> tensors;
  std::vector<char> data;  // the data section

  const Entry* find(const std::string& name) const;
  const void* bytes(const Entry& e) const { return data.data() + e.begin; }
  // Metadata value as an integer; error naming the file when missing or malformed.
  Result<int64_t> metadata_int(const std::string& key) const;
};

// Reads and verifies `path` (a file, or a directory holding state.safetensors). Errors name
// the file and what is wrong: missing, not a regular file (a FIFO is refused without
// blocking), truncated, bad header JSON, a shape over kMaxTensorElements, offsets out of range
// or overlapping, a tensor named twice, data bytes the tensors do not cover, unknown dtype,
// checksum mismatch, unsupported format_version, a step or data_position outside
// [0, kMaxStep]. The header is read and checked before the data section is read.
Result<CheckpointFile> read_checkpoint(const std::string& path);
// The same checks over a checkpoint's bytes in memory (path names it in errors); the fuzz
// target tests/fuzz/safetensors_fuzz.cpp drives it.
Result<CheckpointFile> parse_checkpoint(const std::string& path, std::string_view bytes);

// The bytes of state tensor `name` (dtype, shape) from a checkpoint of either decoder-layer
// layout (engine/model/llama.h): the tensor itself when the file holds it with that dtype
// and shape; else, for a scanned name ".../decoder/layers/<sub>" with the layer dim at
// param_scan_axis, the file's ".../decoder/layers_<l>/<sub>" tensors stacked (or a stacked
// tensor with its layer dim elsewhere, restacked); for an unscanned ".../layers_<l>/<sub>",
// slice l of the file's stacked tensor. The stacked tensor's layer dim in the file is its
// "param_scan_axis" metadata (written by scanned runs), else the one dim whose removal gives
// the layer's shape. param_scan_axis < 0: the model is not scanned (pipelines:
// checkpoint_pipeline_tensor below). Converted bytes go to `scratch`. Errors name the file, the
// tensor and both shapes (or the layer tensor that is missing).
Result<const void*> checkpoint_tensor(const CheckpointFile& f, const std::string& name,
                                      DType dtype, const Shape& shape, int64_t param_scan_axis,
                                      std::vector<char>& scratch);
// A pipeline's stacked weight ".../decoder/layers/<sub>" of shape ([R,] S, lps, <layer>)
// (`lead` = 2 or 3 leading dims, layer-major: engine/model/pipeline.h) from a checkpoint of
// any layout: the sequential model's layers_<l> tensors, a scanned stack, or another
// pipeline's stack (another S or R: the same bytes). Unscanned models read a pipeline's
// stack through checkpoint_tensor (slot l of the layer-major stack).
Result<const void*> checkpoint_pipeline_tensor(const CheckpointFile& f, const std::string& name,
                                               DType dtype, const Shape& shape, int lead,
                                               std::vector<char>& scratch);
// A pipeline's ".../decoder/layers_outside_pipeline/<sub>" stack (pipeline_parallel_layers
// P < L: layers P.. L-1, slot k = layer first_layer + k, the layer dim at param_scan_axis) from
// a checkpoint of any layout: the same stack, or layer by layer from the sequential model's
// layers_<l>, a scanned stack, or another pipeline's decoder/layers and outside stacks. Any
// layout's reads of layer l past a file's decoder/layers stack find it in the file's
// layers_outside_pipeline stack, so a P < L checkpoint restores into every layout too.
Result<const void*> checkpoint_outside_tensor(const CheckpointFile& f, const std::string& name,
                                              DType dtype, const Shape& shape,
                                              int64_t param_scan_axis, int64_t first_layer,
                                              std::vector<char>& scratch);

// <base>/<run>/checkpoints
std::string checkpoint_root(const std::string& base_output_directory, const std::string& run_name);
// <root>/<step>/state.safetensors
std::string checkpoint_path(const std::string& root, int64_t step);
// Steps with a committed file under root, ascending (a missing root is an empty list; names
// that are not a step in [0, kMaxStep], and step directories that are symbolic links, are
// skipped).
std::vector<int64_t> list_checkpoints(const std::string& root);
// Deletes the oldest committed checkpoints so that `keep` remain (keep <= 0: keep all).
Status prune_checkpoints(const std::string& root, int64_t keep);

}  // namespace eng
