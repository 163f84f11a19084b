// tests/bf16/plan_test.cpp: llama2-7b, fsdp=256, dtype=bfloat16, full remat, batch 1 x 2048,
// unscanned, shape-only: argument, temp and peak bytes per device against docs/memory.md's
// hand calculation (within 5%).
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/compile/executable.h"
#include "engine/train/train_step.h"

namespace eng {
namespace {

Result<std::shared_ptr<const Executable>> plan_7b(const char* dtype) {
  Config c;
  for (auto [k, v] : std::initializer_list<std::pair<const char*, const char*>>{
           {"model_name", "llama2-7b"}, {"dtype", dtype}, {"remat_policy", "full"}})
    ENG_RETURN_IF_ERROR(c.set(k, std::string(v)));
  ENG_RETURN_IF_ERROR(c.set("per_device_batch_size", 1.0));
  ENG_RETURN_IF_ERROR(c.set("max_target_length", int64_t{2048}));
  ENG_ASSIGN_OR_RETURN(ResolvedConfig r, resolve_config(c, 256));
  ENG_ASSIGN_OR_RETURN(Mesh mesh, Mesh::create({"fsdp"}, {256}));
  return compile(build_train_step(r, nullptr), mesh, CompileOptions{});
}

// The most temporary bytes live at once (a lower bound of any placement's arena).
int64_t max_live_temp_bytes(const Executable& exe) {
  std::vector<int64_t> live(exe.program().instrs().size(), 0);
  for (const TempInfo& t : exe.largest_temps(1 << 30))
    for (int i = t.first_instr; i <= t.last_instr; ++i) live[i] += t.bytes;
  return *std::max_element(live.begin(), live.end());
}

TEST(Bf16Plan, Llama7bFsdp256MatchesTheHandCalculation) {
  auto exe = plan_7b("bfloat16");
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  const MemoryAnalysis& m = (*exe)->memory();
  // docs/memory.md "llama2-7b in bf16 on fsdp=256, by hand".
  const double E = 4096, V = 32000, T = 2048, L = 32, P = 6738415616.0;
  const double norms = (2 * L + 1) * E;  // RMSNorm scales: 'norm' maps to no mesh axis
  const double one_copy = 4 * ((P - norms) / 256 + norms);
  const double args = 3 * one_copy + 6 * T * 4 + 4;  // params, mu, nu (f32); batch; step
  const double saved = (L + 1) * T * E * 2;          // each layer's input + the last output, bf16
  const double logits_grad = E * V * 2 + E * V * 4;  // d(logits kernel) bf16, then f32
  const double temp = saved + logits_grad + T * E * 2;  // + d(final norm output), bf16
  const double peak = args + temp + 6 * 4;              // + the six f32 metrics (outputs)
  fmt::print(
      "[bf16 plan] args {} (hand {:.0f}); temp {} (hand {:.0f}, live {}); peak {} (hand {:.0f})\n",
      m.argument_bytes, args, m.temp_bytes, temp, max_live_temp_bytes(**exe), m.peak_bytes(), peak);
  EXPECT_NEAR(m.argument_bytes, args, 0.05 * args);
  EXPECT_NEAR(m.temp_bytes, temp, 0.05 * temp);
  EXPECT_NEAR(m.peak_bytes(), peak, 0.05 * peak);
  EXPECT_NEAR(max_live_temp_bytes(**exe), temp, 0.001 * temp);  // the hand count is the peak's
  // The largest temporary: the logits kernel's gradient in grad_dtype before its reduce-scatter.
  const TempInfo big = (*exe)->largest_temps(1)[0];
  EXPECT_EQ((*exe)->program().value(big.value).type_string(), "f32[4096,32000]");
  int bf16_temps = 0;  // c:temps() types: the gathered weights and activations are bf16
  for (const TempInfo& t : (*exe)->largest_temps(8))
    bf16_temps += (*exe)->program().value(t.value).dtype == DType::kBF16;
  EXPECT_GE(bf16_temps, 3);

  auto f32 = plan_7b("float32");
  ASSERT_TRUE(f32.ok()) << f32.status().message();
  EXPECT_EQ((*f32)->memory().argument_bytes, m.argument_bytes);  // weight_dtype is float32 in both
  EXPECT_LT(m.peak_bytes(), 0.75 * (*f32)->memory().peak_bytes());
}

}  // namespace
}  // namespace eng
