// tests/bf16/bf16_test.cpp: MaxText's dtype / weight_dtype / grad_dtype (docs/precision.md):
// config errors, the value types of the traced program, a bf16 train step against the
// float64 interpreter with bf16 rounding at the kernels' points, sharded bf16 against one
// device, weight_dtype=bfloat16 training and planning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/ir/autodiff.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer.h"
#include "tests/common/tiny_config.h"
#include "tests/runtime/runtime_harness.h"
#include "tests/spmd/spmd_run.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

Config with(Config c, std::initializer_list<std::pair<const char*, const char*>> keys) {
  for (const auto& [k, v] : keys) EXPECT_TRUE(c.set(k, std::string(v)).ok()) << k;
  return c;
}

// 2 layers, emb 64, 4 heads of 16, mlp 128, vocab 256, seq 16, batch 2 (one device).
Config small(std::initializer_list<std::pair<const char*, const char*>> keys = {}) {
  Config c = testing::tiny_llama_config({.model_name = "llama-tiny",
                                          .emb_dim = 64,
                                          .query_heads = 4,
                                          .kv_heads = 4,
                                          .head_dim = 16,
                                          .mlp_dim = 128,
                                          .layers = 2,
                                          .vocab_size = 256,
                                          .seq = 16,
                                          .per_device_batch = 2.0,
                                          .learning_rate = 1e-3,
                                          .steps = 10,
                                          .adam_eps = 1e-4});
  EXPECT_TRUE(c.set("scan_layers", false).ok());  // the paths below are the per-layer ones
  return with(c, keys);
}

ResolvedConfig resolved(const Config& c, int64_t devices = 1) {
  Result<ResolvedConfig> r = resolve_config(c, devices);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

TEST(Bf16Config, BadDtypesNameTheKeyAndValue) {
  struct Case {
    const char* key;
    const char* value;
    Code code;
  };
  for (const Case& k : {Case{"dtype", "float16", Code::kUnimplemented},
                        Case{"weight_dtype", "float16", Code::kUnimplemented},
                        Case{"grad_dtype", "float16", Code::kUnimplemented},
                        Case{"dtype", "bfloat17", Code::kInvalidArgument},
                        Case{"weight_dtype", "int32", Code::kInvalidArgument}}) {
    Result<ResolvedConfig> r = resolve_config(small({{k.key, k.value}}), 1);
    ASSERT_FALSE(r.ok()) << k.key << "=" << k.value;
    EXPECT_EQ(r.status().code(), k.code) << r.status().message();
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(fmt::format("{}={}", k.key, k.value)), std::string::npos) << m;
    EXPECT_NE(m.find("bfloat16"), std::string::npos) << m;  // says what runs
  }
  for (const char* v : {"bfloat16", "bf16", "float32", "f32"})
    EXPECT_TRUE(resolve_config(small({{"dtype", v}}), 1).ok()) << v;
}

// MaxText's base.yml defaults: dtype bfloat16, weight_dtype and grad_dtype float32; the
// default program is the explicit bfloat16 one.
TEST(Bf16Config, DefaultsAreMaxTexts) {
  const ResolvedConfig r = resolved(small());
  EXPECT_EQ(r.model.dtype, DType::kBF16);
  EXPECT_EQ(r.model.weight_dtype, DType::kF32);
  EXPECT_EQ(r.grad_dtype, DType::kF32);
  for (const ConfigKey& k : config_keys())
    if (k.name == "dtype") {
      EXPECT_EQ(config_value_string(k.default_value), "bfloat16");
      EXPECT_NE(k.doc.find("bfloat16 (MaxText's default)"), std::string::npos) << k.doc;
    }
  EXPECT_EQ(build_train_step(r, nullptr).to_text(),
            build_train_step(resolved(small({{"dtype", "bfloat16"}})), nullptr).to_text());
}

DType arg_dtype(const Program& p, const std::string& name) {
  const int i = p.find_arg(name);
  EXPECT_GE(i, 0) << name;
  return p.value(p.args()[i].value).dtype;
}

// MaxText: parameters and moments in weight_dtype; activations (each layer's input, the
// projections) in dtype; logits read in f32 by the loss (cast_logits_to_fp32, fused: no f32
// (B, T, V) copy, and dlogits come back in bf16); f32 gradients cast to grad_dtype.
TEST(Bf16Program, ValueTypesFollowMaxText) {
  Program p =
      build_train_step(resolved(small({{"dtype", "bfloat16"}, {"remat_policy", "none"}})), nullptr);
  EXPECT_EQ(arg_dtype(p, "params/decoder/layers_0/mlp/wi_0/kernel"), DType::kF32);
  EXPECT_EQ(arg_dtype(p, "opt_state/mu/decoder/layers_0/mlp/wi_0/kernel"), DType::kF32);
  int bf16_matmuls = 0, f32_matmuls = 0, layer_inputs = 0, fused_xent = 0, bf16_dlogits = 0;
  for (const Instr& in : p.instrs()) {
    const ValueInfo& out = p.value(in.outputs[0]);
    if (in.kind == OpKind::kMatmul) (out.dtype == DType::kBF16 ? bf16_matmuls : f32_matmuls)++;
    if (in.kind == OpKind::kSoftmaxCrossEntropy)
      fused_xent += p.value(in.inputs[0]).dtype == DType::kBF16 && out.dtype == DType::kF32 &&
                    p.value(in.outputs[1]).dtype == DType::kF32;
    if (in.kind == OpKind::kSoftmaxCrossEntropyGrad) bf16_dlogits += out.dtype == DType::kBF16;
    if (in.kind == OpKind::kConvert) {  // no f32 copy of the logits (B, T, V = 256)
      EXPECT_FALSE(out.dtype == DType::kF32 && out.shape.rank() == 3 && out.shape.dim(-1) == 256)
          << out.type_string();
    }
  }
  for (const ValueInfo& v : p.values())
    if (v.checkpoint_name == "decoder_layer_input") {
      EXPECT_EQ(v.dtype, DType::kBF16) << v.type_string();
      ++layer_inputs;
    }
  EXPECT_EQ(f32_matmuls, 0);  // every matmul takes bf16 inputs
  EXPECT_GT(bf16_matmuls, 0);
  EXPECT_EQ(layer_inputs, 2);
  EXPECT_EQ(fused_xent, 1);  // cast_logits_to_fp32
  EXPECT_EQ(bf16_dlogits, 1);
  // The program text shows the bf16 values, e.g. a layer's saved input (B, T, E).
  EXPECT_NE(p.to_text().find("bf16[2,16,64]"), std::string::npos);

  Program w = build_train_step(
      resolved(
          small({{"dtype", "bfloat16"}, {"weight_dtype", "bfloat16"}, {"grad_dtype", "float32"}})),
      nullptr);
  EXPECT_EQ(arg_dtype(w, "params/decoder/layers_0/mlp/wi_0/kernel"), DType::kBF16);
  EXPECT_EQ(arg_dtype(w, "opt_state/nu/decoder/layers_0/mlp/wi_0/kernel"), DType::kBF16);
  for (const Instr& in : w.instrs())  // bf16 gradients stay bf16 (MaxText casts only f32 ones)
    if (in.kind == OpKind::kAdamW) {
      EXPECT_EQ(w.value(in.inputs[1]).dtype, DType::kBF16);
    }
}

// The float32 program has no convert at all: dtype=float32 is today's program.
TEST(Bf16Program, Float32EmitsNoCast) {
  Program p = build_train_step(resolved(small({{"dtype", "float32"}})), nullptr);
  for (const Instr& in : p.instrs()) EXPECT_NE(in.kind, OpKind::kConvert);
  for (const ValueInfo& v : p.values()) EXPECT_NE(v.dtype, DType::kBF16) << v.type_string();
}

// JAX's rule: a cotangent has its primal's dtype. x (f32) is cast to bf16 and multiplied by a
// bf16 w: d(w) comes back bf16, d(x) f32 through convert's VJP, and the bf16 product's
// cotangent is bf16 all the way.
TEST(Bf16Autodiff, CotangentsKeepTheirPrimalsDtype) {
  Builder b("mixed");
  ValueId x = b.argument("x", Shape{2, 3, 4}, DType::kF32, {}, ArgRole::kParam);
  ValueId w = b.argument("w", Shape{4, 5}, DType::kBF16, {}, ArgRole::kParam);
  ValueId targets = b.argument("targets", Shape{2, 3}, DType::kI32, {}, ArgRole::kBatch);
  ValueId y = b.matmul(b.convert(x, DType::kBF16), w, 2, 1, false, false);  // (2, 3, 5) bf16
  EXPECT_EQ(b.info(y).dtype, DType::kBF16);
  auto [xent, lse] = b.softmax_cross_entropy(b.convert(y, DType::kF32), targets);
  ValueId loss = b.masked_mean_loss(xent, targets).first;
  const std::vector<ValueId> g = append_gradients(b, loss, {x, w});
  EXPECT_EQ(b.info(g[0]).dtype, DType::kF32);
  EXPECT_EQ(b.info(g[1]).dtype, DType::kBF16);
  for (const Instr& in : b.program().instrs())
    if (in.kind == OpKind::kMatmul) {
      EXPECT_EQ(b.info(in.outputs[0]).dtype, DType::kBF16);
    }
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d += (got[i] - want[i]) * (got[i] - want[i]);
    n += want[i] * want[i];
  }
  return n == 0 ? std::sqrt(d) : std::sqrt(d / n);
}

// The kernels (kernels.h's bf16 section and oneDNN matmuls where program.h's uses_bf16_kernel
// says so, f32 math rounded once per bf16 output elsewhere) against the float64 interpreter
// with bf16 rounding at the same points (engine/ir/interpret.cpp, reference.h's ref::*_bf16),
// one train step from zero moments (so mu' and nu' are the gradient's alone). Tolerance,
// relative L2 per output: 5e-5. Both round the same real numbers, computed to ~1e-7 (f32 sums
// in the kernels' order) vs ~1e-16; the roundings agree except within that distance of a
// bf16 rounding boundary, where one element differs by a bf16 ulp (2^-8 = 3.9e-3 relative).
// k such elements of n give ~3.9e-3 sqrt(k/n): 5e-5 allows 1.6e-4 of the elements to flip.
// Measured: 6e-6 on the logits kernel's moment (a few of its 16384 elements), under 1e-6
// elsewhere. The same comparison between the bf16 and the f32 programs is 5e-3 to 1.5e-2:
// the test sees bf16 rounding 100 times smaller than what bf16 changes.
// That holds for THIS draw (seed 11), whose flips are all in the outputs themselves. A flip
// upstream (one element of a layer's activation, a row's rmsnorm) moves every gradient
// downstream of it: seeds 1..7 measure (sorted) 4e-7, 2e-4, 2e-4, 3e-4, 5e-4, 2e-3 and 4e-3, with
// scan_layers true or false alike, and the interpreter against itself with the f32
// parameters moved by one f32 ulp measures 9e-8 to 7e-3 (7e-3 on seed 11). The per-op
// checks (tests/ops/every_op_test.cpp) hold for any draw; this one pins a draw.
TEST(Bf16TrainStep, KernelsMatchTheInterpreterWithBf16Rounding) {
  const Config base = small({{"remat_policy", "full"}});
  TrainStepLayout layout;
  Program bf = build_train_step(resolved(with(base, {{"dtype", "bfloat16"}})), &layout);
  Program f32 = build_train_step(resolved(with(base, {{"dtype", "float32"}})), nullptr);
  std::vector<HostTensor> args = testing::random_args(bf, 11, 256, 0.1);
  for (size_t k = 0; k < args.size(); ++k) {  // a first step: the moments start at zero, so
    const ArgRole role = bf.args()[k].role;   // mu' and nu' are the gradient's alone
    if (role == ArgRole::kOptMu || role == ArgRole::kOptNu)
      std::fill(args[k].data.begin(), args[k].data.end(), 0.0);
  }
  auto want = interpret(bf, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto want_f32 = interpret(f32, args);
  ASSERT_TRUE(want_f32.ok()) << want_f32.status().message();
  const std::vector<std::vector<double>> got = testing::run_on_runtime(bf, args);
  double worst = 0, bf16_effect = 0;
  for (size_t j = 0; j < bf.outputs().size(); ++j) {
    const double e = rel_l2(got[j], (*want)[j].data);
    EXPECT_LT(e, 5e-5) << bf.outputs()[j].name;
    worst = std::max(worst, e);
    bf16_effect = std::max(bf16_effect, rel_l2((*want_f32)[j].data, (*want)[j].data));
  }
  const int loss = layout.first_metric_output;
  EXPECT_LT(std::fabs(got[loss][0] - (*want)[loss].data[0]),
            1e-5 * std::fabs((*want)[loss].data[0]));
  EXPECT_GT(bf16_effect, 100 * 5e-5);
  fmt::print("[bf16] kernels vs interpreter: worst rel L2 {:.2e}; bf16 vs f32 programs {:.2e}\n",
             worst, bf16_effect);
}

// The scanned layout of tensors named like the unscanned ones: params/decoder/layers/<sub>
// (stacked, layer dim L at `axis`) gathers slice l from layers_{l}/<sub> (engine/model/llama.h);
// any other name is its own. `data(name)` gives an unscanned tensor's values.
template <class Data>
std::vector<double> scanned_values(const std::string& name, const Shape& shape, int axis,
                                   const Data& data) {
  const size_t at = name.find("/layers/");
  if (at == std::string::npos) return data(name);
  const int64_t L = shape[axis], outer = shape.prod(0, axis);
  const int64_t inner = shape.prod(axis + 1, shape.rank());
  std::vector<double> y(static_cast<size_t>(shape.numel()));
  for (int64_t l = 0; l < L; ++l) {
    const std::vector<double> x =
        data(std::string(name).replace(at, 8, fmt::format("/layers_{}/", l)));
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(x.begin() + o * inner, inner, y.begin() + (o * L + l) * inner);
  }
  return y;
}

// The values of the unscanned program's argument or output called `name`.
std::vector<double> named(const Program& p, const std::vector<std::vector<double>>& outs,
                          const std::vector<HostTensor>& args, const std::string& name) {
  for (size_t j = 0; j < p.outputs().size(); ++j)
    if (p.outputs()[j].name == name && !outs.empty()) return outs[j];
  const int i = p.find_arg(name);
  if (i >= 0 && outs.empty()) return args[i].data;
  ADD_FAILURE() << "no " << (outs.empty() ? "argument " : "output ") << name;
  return {};
}

// scan_layers=true (index_in_dim / add_index_in_dim in a bf16 program, each layer's weight
// slice taken inside its remat region), param_scan_axis 1 and 0, on the values of the test
// above stacked: within its tolerance of the interpreter, and every output bitwise equal to
// the unscanned step's, on the kernels and in the interpreter. Not a random_args draw of the
// scanned program: its arguments come in another order with other shapes, so the same seed
// gives other values, and the distance between kernels and interpreter depends on the values
// (see the test above). Given the same values both layouts compute the same numbers.
TEST(Bf16TrainStep, ScannedLayersMatchTheInterpreterAndTheUnscannedStep) {
  const Config base = small({{"remat_policy", "full"}, {"dtype", "bfloat16"}});
  const Program u = build_train_step(resolved(base), nullptr);
  std::vector<HostTensor> ua = testing::random_args(u, 11, 256, 0.1);
  for (size_t k = 0; k < ua.size(); ++k)  // a first step, as above
    if (u.args()[k].role == ArgRole::kOptMu || u.args()[k].role == ArgRole::kOptNu)
      std::fill(ua[k].data.begin(), ua[k].data.end(), 0.0);
  const std::vector<std::vector<double>> u_got = testing::run_on_runtime(u, ua);
  auto u_want = interpret(u, ua);
  ASSERT_TRUE(u_want.ok()) << u_want.status().message();
  std::vector<std::vector<double>> u_want_data;
  for (const HostTensor& t : *u_want) u_want_data.push_back(t.data);
  for (int64_t axis : {1, 0}) {
    Config c = base;
    ASSERT_TRUE(c.set("scan_layers", true).ok());
    ASSERT_TRUE(c.set("param_scan_axis", axis).ok());
    const Program s = build_train_step(resolved(c), nullptr);
    const int a = static_cast<int>(axis);
    std::vector<HostTensor> sa;
    for (const Argument& arg : s.args()) {
      const ValueInfo& v = s.value(arg.value);
      sa.push_back({v.shape, v.dtype, scanned_values(v.name, v.shape, a, [&](const std::string& n) {
                      return named(u, {}, ua, n);
                    })});
    }
    auto want = interpret(s, sa);
    ASSERT_TRUE(want.ok()) << want.status().message();
    const std::vector<std::vector<double>> got = testing::run_on_runtime(s, sa);
    double worst = 0;
    for (size_t j = 0; j < s.outputs().size(); ++j) {
      const std::string& name = s.outputs()[j].name;
      const Shape& shape = s.value(s.outputs()[j].value).shape;
      const double e = rel_l2(got[j], (*want)[j].data);
      EXPECT_LT(e, 5e-5) << name << " param_scan_axis=" << axis;
      worst = std::max(worst, e);
      EXPECT_TRUE(got[j] == scanned_values(name, shape, a, [&](const std::string& n) {
                    return named(u, u_got, {}, n);
                  })) << name << ": kernels, param_scan_axis=" << axis;
      EXPECT_TRUE((*want)[j].data == scanned_values(name, shape, a, [&](const std::string& n) {
                    return named(u, u_want_data, {}, n);
                  })) << name << ": interpreter, param_scan_axis=" << axis;
    }
    fmt::print("[bf16] scanned (param_scan_axis={}) kernels vs interpreter: worst rel L2 {:.2e}\n",
               axis, worst);
  }
}

// Runs instruction `in` of p alone on the kernels, from the interpreter's values `vals` of its
// inputs (a one-instruction program, as the interpreter's vmap does); returns its outputs.
std::vector<std::vector<double>> run_alone(const Program& p, const Instr& in,
                                           const std::vector<HostTensor>& vals) {
  Builder b("one_instruction");
  std::vector<ValueId> ins;
  std::vector<HostTensor> args;
  for (size_t k = 0; k < in.inputs.size(); ++k) {
    const ValueInfo& v = p.value(in.inputs[k]);
    ins.push_back(b.argument(fmt::format("in{}", k), v.shape, v.dtype, {}, ArgRole::kBatch));
    args.push_back(vals[in.inputs[k]]);
  }
  OpAttrs a = in.attrs;
  a.out_like = -1;
  a.out_logical.clear();
  const std::vector<ValueId> outs = b.emit(in.kind, ins, a);
  for (size_t o = 0; o < outs.size(); ++o) b.output(outs[o], fmt::format("out{}", o));
  return testing::run_on_runtime(std::move(b).finish(), args);
}

// Every instruction of the scanned bf16 step (index_in_dim, add_index_in_dim, the converts
// around each weight slice, the remat recomputation), run alone on the kernels from the
// interpreter's values of its inputs, against the interpreter's outputs. Unlike the
// whole-step checks above this does not depend on the draw: a flip stays in the op where it
// happens. f32 sums flip an element only within ~1e-7 of a bf16 boundary; a rounding point
// placed differently rounds a third or more of the elements differently (the interpreter's
// rmsnorm without its inner roundings: 34% of its output). Per bf16 output: at most 1% of the
// elements differ by more than a bf16 ulp of 1e-4 * the output's largest magnitude (that
// ignores e.g. attention_grad's dq of a query row with one key: exactly 0 in the interpreter,
// ~1e-13 on the kernels), by at most 4 bf16 ulps of max(|x|, 1e-4 * that magnitude)
// (cancelling f32 sums); integer outputs equal; f32 outputs within relative L2 1e-3
// (f32 against double). Measured below (printed).
TEST(Bf16TrainStep, ScannedStepRoundsWhereTheInterpreterDoesOpByOp) {
  Config c = small({{"remat_policy", "full"}, {"dtype", "bfloat16"}});
  ASSERT_TRUE(c.set("scan_layers", true).ok());
  const Program p = build_train_step(resolved(c), nullptr);
  for (uint64_t seed : {11, 2}) {
    const std::vector<HostTensor> args = testing::random_args(p, seed, 256, 0.1);
    auto vals = interpret_all(p, args);
    ASSERT_TRUE(vals.ok()) << vals.status().message();
    double worst_fraction = 0, worst_ulps = 0, worst_f32 = 0;
    for (const Instr& in : p.instrs()) {
      const std::vector<std::vector<double>> got = run_alone(p, in, *vals);
      for (size_t o = 0; o < in.outputs.size(); ++o) {
        const HostTensor& want = (*vals)[in.outputs[o]];
        const std::string what = fmt::format("{} output {} (seed {})", op_name(in.kind), o, seed);
        if (want.dtype == DType::kF32) {
          const double e = rel_l2(got[o], want.data);
          EXPECT_LT(e, 1e-3) << what;
          worst_f32 = std::max(worst_f32, e);
          continue;
        }
        if (want.dtype != DType::kBF16) {
          EXPECT_TRUE(got[o] == want.data) << what;
          continue;
        }
        double big = 0;
        for (double x : want.data) big = std::max(big, std::fabs(x));
        int64_t differ = 0;
        for (size_t e = 0; e < want.data.size(); ++e) {
          const double d = std::fabs(got[o][e] - want.data[e]);
          if (d <= 1e-4 * big / 256) continue;  // below a bf16 ulp of 1e-4 * the largest
          ++differ;
          const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(want.data[e]), 1e-4 * big)) - 7);
          worst_ulps = std::max(worst_ulps, d / ulp);
        }
        const double fraction = static_cast<double>(differ) / static_cast<double>(want.data.size());
        EXPECT_LE(fraction, 0.01) << what;
        worst_fraction = std::max(worst_fraction, fraction);
      }
    }
    EXPECT_LE(worst_ulps, 4.0) << "seed " << seed;
    fmt::print("[bf16] scanned step op by op (seed {}): bf16 outputs: at most {:.2e} of the "
               "elements differ, by at most {:.2f} ulps; f32 outputs: rel L2 at most {:.2e}\n",
               seed, worst_fraction, worst_ulps, worst_f32);
  }
}

std::vector<double> train_losses(const Config& c, const Mesh& mesh, int steps,
                                 std::vector<float>* param = nullptr) {
  auto t = Trainer::create(c, mesh);
  EXPECT_TRUE(t.ok()) << t.status().message();
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    Result<StepMetrics> m = (*t)->step_and_wait();
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (m.ok()) losses.push_back(m->loss);
  }
  if (param) *param = (*t)->fetch_argument("params/decoder/layers_1/mlp/wo/kernel").value();
  return losses;
}

Config text_config(std::initializer_list<std::pair<const char*, const char*>> keys) {
  Config c = with(testing::tiny_config(20), keys);
  EXPECT_TRUE(c.set("per_device_batch_size", 1.0).ok());
  return c;
}

// Sharded bf16 against one-device bf16 (global batch 4 both). Not bitwise, unlike f32: a
// sharded matmul rounds each device's partial sum to bf16 before the f32 reduction, where one
// device rounds the full sum once, so weight gradients differ by up to a bf16 ulp (2^-8)
// per element. Over 5 steps the losses agree to 2e-3 relative and the parameters to 1e-2
// of the largest (measured: 3e-4 and 4e-3); the f32 runs agree to 1e-5 (tests/spmd).
TEST(Bf16Sharded, MatchesOneDevice) {
  const Config c = text_config({{"dtype", "bfloat16"}});
  std::vector<float> want_p, got_p;
  const std::vector<double> want = train_losses(c, *Mesh::create({"data"}, {4}), 5, &want_p);
  Config one = c;
  ASSERT_TRUE(one.set("per_device_batch_size", 4.0).ok());
  const std::vector<double> ref = train_losses(one, Mesh(), 5, &got_p);
  ASSERT_EQ(want.size(), 5u);
  ASSERT_EQ(ref.size(), 5u);
  for (const auto& [axes, sizes] :
       std::vector<std::pair<std::vector<std::string>, std::vector<int64_t>>>{
           {{"fsdp"}, {4}}, {{"data", "fsdp"}, {2, 2}}, {{"fsdp", "tensor"}, {2, 2}}}) {
    std::vector<float> p;
    const std::vector<double> got = train_losses(c, *Mesh::create(axes, sizes), 5, &p);
    ASSERT_EQ(got.size(), 5u);
    double diff = 0, norm = 0;
    for (size_t k = 0; k < p.size(); ++k) {
      diff = std::max(diff, static_cast<double>(std::fabs(p[k] - got_p[k])));
      norm = std::max(norm, static_cast<double>(std::fabs(got_p[k])));
    }
    for (int s = 0; s < 5; ++s) EXPECT_NEAR(got[s], ref[s], 2e-3 * ref[s]) << s;
    EXPECT_LT(diff, 1e-2 * norm);
    fmt::print(
        "[bf16] {} vs one device: losses {:.5f}..{:.5f} vs {:.5f}..{:.5f}, param rel {:.2e}\n",
        Mesh::create(axes, sizes)->to_string(), got[0], got[4], ref[0], ref[4], diff / norm);
  }
  for (int s = 0; s < 5; ++s) EXPECT_NEAR(want[s], ref[s], 2e-3 * ref[s]) << s;  // data=4
}

// grad_dtype=bfloat16: the f32 gradients are cast to bf16 before the cross-device reduction
// (partial sums pass through convert), so the reduce-scatters move and sum bf16 (f32 math,
// rounded per member, collectives.cpp); it trains like one device within 2e-3 over 5 steps.
TEST(Bf16GradDtype, ReducesInBf16) {
  const Config c = text_config({{"dtype", "bfloat16"}, {"grad_dtype", "bfloat16"}});
  const Mesh mesh = *Mesh::create({"data", "fsdp"}, {2, 2});
  auto t = Trainer::create(c, mesh, {.shape_only = true});
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto exe = (*t)->compile();
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  int bf16_reductions = 0, f32_reductions = 0;
  const Program& local = (*exe)->program();
  for (const Instr& in : local.instrs())
    if (in.kind == OpKind::kReduceScatter || in.kind == OpKind::kAllReduce)
      ++(local.value(in.inputs[0]).dtype == DType::kBF16 ? bf16_reductions : f32_reductions);
  EXPECT_GT(bf16_reductions, 0);
  Config one = c;
  ASSERT_TRUE(one.set("per_device_batch_size", 4.0).ok());
  const std::vector<double> ref = train_losses(one, Mesh(), 5);
  const std::vector<double> got = train_losses(c, mesh, 5);
  ASSERT_EQ(got.size(), 5u);
  for (int s = 0; s < 5; ++s) EXPECT_NEAR(got[s], ref[s], 2e-3 * ref[s]) << s;
  fmt::print(
      "[bf16] grad_dtype=bfloat16 on {}: {} bf16 and {} f32 reductions; losses {:.5f} vs {:.5f}\n",
      mesh.to_string(), bf16_reductions, f32_reductions, got[4], ref[4]);
}

// The compiler's collective bytes (bf16 values at 2 bytes) equal the bytes the devices
// receive, on a mesh with all-gathers of bf16 weights and bf16 activation reductions.
TEST(Bf16Sharded, CollectiveBytesAreTheBytesMoved) {
  const ResolvedConfig cfg = resolved(small({{"dtype", "bfloat16"}}), 4);
  auto run =
      testing::run_train_steps(cfg, *Mesh::create({"fsdp", "tensor"}, {2, 2}), CompileOptions{}, 2);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->max_collective_mismatch, 0);
  EXPECT_TRUE(std::isfinite(run->losses.back()));
}

// weight_dtype=bfloat16 (MaxText allows it): parameters and both moments in bf16; it trains,
// and its plan holds them at 2 bytes.
TEST(Bf16WeightDtype, TrainsAndPlansAtTwoBytes) {
  const Config c = text_config({{"dtype", "bfloat16"}, {"weight_dtype", "bfloat16"}});
  const std::vector<double> losses = train_losses(c, Mesh(), 20);
  ASSERT_EQ(losses.size(), 20u);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), losses.front() - 0.5);
  auto t32 = Trainer::create(text_config({{"dtype", "bfloat16"}}), Mesh(), {.shape_only = true});
  auto t16 = Trainer::create(c, Mesh(), {.shape_only = true});
  ASSERT_TRUE(t32.ok() && t16.ok());
  auto e32 = (*t32)->compile();
  auto e16 = (*t16)->compile();
  ASSERT_TRUE(e32.ok() && e16.ok());
  const int64_t state = 3 * 4 * resolved(c).model.num_params();  // params + mu + nu, f32
  const int64_t batch = (*e32)->memory().argument_bytes - state;
  EXPECT_EQ((*e16)->memory().argument_bytes, state / 2 + batch);
}

std::vector<double> train_n(Trainer& t, int64_t steps) {
  std::vector<double> out;
  Status s = t.train(steps, [&](const StepMetrics& m) {
    out.push_back(m.loss);
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

// bf16 parameters and moments go to the checkpoint as safetensors BF16 and come back
// bitwise: a run resumed from step 3 continues with the uninterrupted run's losses.
TEST(Bf16Checkpoint, WeightDtypeBf16ResumesBitwise) {
  const Config base = text_config({{"dtype", "bfloat16"}, {"weight_dtype", "bfloat16"}});
  std::vector<double> full;
  {
    auto t = Trainer::create(base, Mesh()).value();
    full = train_n(*t, 6);
  }
  testing::TempDir dir("bf16ckpt");
  Config c = base;
  ASSERT_TRUE(c.set("enable_checkpointing", true).ok());
  ASSERT_TRUE(c.set("base_output_directory", dir.str()).ok());
  ASSERT_TRUE(c.set("run_name", std::string("bf16")).ok());
  ASSERT_TRUE(c.set("checkpoint_period", int64_t{3}).ok());
  ASSERT_TRUE(c.set("save_checkpoint_on_completion", false).ok());
  {
    auto t = Trainer::create(c, Mesh()).value();
    EXPECT_EQ(train_n(*t, 4), std::vector<double>(full.begin(), full.begin() + 4));
  }
  auto t = Trainer::create(c, Mesh()).value();
  EXPECT_NE(t->restored_from(), "");
  EXPECT_EQ(t->current_step(), 4);
  EXPECT_EQ(train_n(*t, 2), std::vector<double>(full.begin() + 4, full.end()));
}

}  // namespace
}  // namespace eng
