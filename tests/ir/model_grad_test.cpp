// tests/ir/model_grad_test.cpp: a whole tiny llama-like decoder layer, every parameter's
// gradient against central differences in double precision.
#include <gtest/gtest.h>

#include "grad_check.h"

namespace eng::irtest {
namespace {

// grad_check's tiny layer with as many kv heads as query heads (no repeat_kv) and sharding
// constraints on the residual stream.
ValueId tiny_llama(Builder& b, std::vector<ValueId>& wrt) {
  return tiny_llama_layer(b, wrt, {.constrain_activations = true});
}

TEST(ModelGradCheck, TinyLlamaEveryParameter) {
  Program p = build_with_gradients(tiny_llama);
  ASSERT_EQ(p.outputs().size(), 13u);
  std::vector<GradError> errors = check_gradients(p, make_args(p), /*max_samples=*/16);
  ASSERT_EQ(errors.size(), 12u);
  for (const GradError& e : errors) {
    EXPECT_LT(e.rel_err, 1e-6) << e.name;
    EXPECT_GT(e.fd_norm, 1e-6) << e.name;
  }
}

TEST(ModelGradCheck, GradientsHaveTheParameterTypes) {
  Program p = build_with_gradients(tiny_llama);
  for (size_t o = 1; o < p.outputs().size(); ++o) {
    const ValueInfo& g = p.value(p.outputs()[o].value);
    const ValueInfo& w = p.value(p.args()[o - 1].value);
    EXPECT_EQ(g.shape, w.shape) << w.name;
    EXPECT_EQ(g.dtype, w.dtype) << w.name;
    EXPECT_EQ(g.logical, w.logical) << w.name;
  }
}

}  // namespace
}  // namespace eng::irtest
