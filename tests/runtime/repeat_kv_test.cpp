// tests/runtime/repeat_kv_test.cpp: grouped-query attention's repeat_kv and its transpose run
// by the runtime (kernels.h) against the reference interpreter, alone and in a GQA llama's
// loss and gradients (4 query heads over 2 kv heads).
#include <gtest/gtest.h>

#include "engine/compile/executable.h"
#include "engine/model/llama.h"
#include "engine/ir/autodiff.h"
#include "tests/runtime/runtime_harness.h"

namespace eng {
namespace {

using testing::expect_matches_interpreter;
using testing::random_args;

TEST(Executor, RepeatKvAndItsGrad) {
  for (int64_t repeats : {1, 2, 4}) {
    Builder b("repeat_kv");
    ValueId x = b.argument("x", Shape{2, 3, 2, 5}, DType::kF32, {}, ArgRole::kBatch);
    ValueId dy = b.argument("dy", Shape{2, 3, 2 * repeats, 5}, DType::kF32, {}, ArgRole::kBatch);
    b.output(b.repeat_kv(x, repeats), "y");
    OpAttrs a;
    a.size = repeats;
    b.output(b.emit(OpKind::kRepeatKvGrad, {dy}, a)[0], "dx");
    Program p = std::move(b).finish();
    expect_matches_interpreter(p, random_args(p, 42, 7), 1e-6, 1e-6);
  }
}

TEST(Executor, GqaLlamaLossAndGradientsMatchTheInterpreter) {
  ModelConfig m = model_preset("llama-tiny").value();  // shrunk, grouped-query
  m.emb_dim = 32;
  m.num_query_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 8;
  m.mlp_dim = 48;
  m.num_decoder_layers = 1;
  m.vocab_size = 16;
  ASSERT_TRUE(m.validate().ok());
  Builder b("gqa_forward");
  LlamaParams p = declare_llama_params(b, m);
  EXPECT_EQ(b.info(p.layers[0].key).shape, (Shape{32, 2, 8}));
  BatchArgs batch = declare_batch(b, m, 2, 6);
  LossValues loss = trace_llama_loss(b, m, p, batch);
  std::vector<ValueId> grads = append_gradients(b, loss.loss, p.all);
  b.output(loss.loss, "loss");
  for (size_t i = 0; i < grads.size(); ++i) b.output(grads[i], b.info(p.all[i]).name + "/grad");
  Program prog = std::move(b).finish();
  EXPECT_NE(prog.to_text().find("repeat_kv[repeats=2]"), std::string::npos);
  EXPECT_NE(prog.to_text().find("repeat_kv_grad[repeats=2]"), std::string::npos);
  expect_matches_interpreter(prog, random_args(prog, 7, m.vocab_size), 1e-4, 1e-5);
}

}  // namespace
}  // namespace eng
