// tests/fuzz/safetensors_fuzz.cpp: the checkpoint (safetensors) reader over arbitrary bytes.
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "engine/base/file.h"
#include "engine/train/checkpoint.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  eng::Result<eng::CheckpointFile> r = eng::parse_checkpoint("fuzz.safetensors", bytes);
  if (r.ok())  // whatever it accepts is consistent: every tensor's bytes inside the data
    for (const auto& e : r->tensors)
      if (e.begin < 0 || e.end > static_cast<int64_t>(r->data.size())) std::abort();
  return 0;
}

namespace eng::fuzz {

// Two small checkpoints written by write_checkpoint (the real writer).
std::vector<std::string> seed_inputs() {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("shardlab_fuzz_seed_" + std::to_string(::getpid()));
  std::vector<std::string> out;
  for (int variant = 0; variant < 2; ++variant) {
    const std::string path = (dir / std::to_string(variant) / kCheckpointFileName).string();
    std::vector<CheckpointTensorSpec> specs = {{"params/w", DType::kF32, Shape{2, 3}},
                                               {"step", DType::kI32, Shape{}}};
    if (variant == 1) specs.push_back({"opt_state/mu/w", DType::kBF16, Shape{3}});
    Result<int64_t> w = write_checkpoint(
        path, specs,
        [&](int i, void* dst) {
          const int64_t n = specs[i].shape.numel() * dtype_size(specs[i].dtype);
          std::memset(dst, 0x3c + i, static_cast<size_t>(n));
          return ok_status();
        },
        {{"step", "7"}, {"data_position", "8"}});
    if (!w.ok()) std::abort();
    Result<std::string> bytes = read_regular_file(path, "seed", 1 << 20);
    if (!bytes.ok()) std::abort();
    out.push_back(*std::move(bytes));
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return out;
}

}  // namespace eng::fuzz
