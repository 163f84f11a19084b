// tests/fuzz/executable_fuzz.cpp: the compile-cache payload decoder over arbitrary bytes. A
// forged entry (its digest recomputed) reaches exactly this: it must be a Status, never an
// ENG_CHECK abort, an exception or an overflow.
#include <cstdlib>

#include "engine/compile/serialize.h"
#include "engine/ir/builder.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto exe = eng::deserialize_executable(bytes);
  if (exe.ok() && eng::serialize_executable(**exe).size() != size) std::abort();  // round trip
  (void)eng::deserialize_program(bytes);
  return 0;
}

namespace eng::fuzz {

std::vector<std::string> seed_inputs() {
  std::vector<std::string> out;
  {  // x (4, 8) . w (8, 16) -> scaled output; step += 1 in place; one device
    Builder b("small");
    ValueId x = b.argument("x", Shape{4, 8}, DType::kF32, {}, ArgRole::kBatch);
    ValueId w = b.argument("w", Shape{8, 16}, DType::kF32, {}, ArgRole::kParam);
    ValueId step = b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep);
    b.output(b.scale(b.matmul(x, w, 1, 1), 2.0), "z");
    b.output(b.increment(step), "step", 2);
    auto exe = compile(std::move(b).finish(), Mesh(), CompileOptions{});
    if (!exe.ok()) std::abort();
    out.push_back(serialize_executable(**exe));
  }
  {  // the llama train step on data=2 x fsdp=2, shape-only (every op kind the trainer uses)
    Config c;
    for (auto [k, v] : {std::pair<const char*, int64_t>{"base_emb_dim", 16},
                        {"base_num_query_heads", 2}, {"base_num_kv_heads", 2}, {"head_dim", 8},
                        {"base_mlp_dim", 32}, {"base_num_decoder_layers", 1},
                        {"vocab_size", 64}, {"max_target_length", 8},
                        {"ici_data_parallelism", 2}, {"ici_fsdp_parallelism", 2}})
      if (!c.set(k, v).ok()) std::abort();
    if (!c.set("per_device_batch_size", 1.0).ok()) std::abort();
    auto mesh = mesh_from_config(c, 4);
    if (!mesh.ok()) std::abort();
    auto t = Trainer::create(c, *mesh, {.shape_only = true});
    if (!t.ok()) std::abort();
    auto exe = (*t)->compile();
    if (!exe.ok()) std::abort();
    out.push_back(serialize_executable(**exe));
  }
  return out;
}

}  // namespace eng::fuzz
