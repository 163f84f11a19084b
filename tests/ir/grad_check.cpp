// tests/ir/grad_check.cpp: finite-difference gradient checks through the reference interpreter.
#include "grad_check.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace eng::irtest {

std::vector<HostTensor> make_args(const Program& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<HostTensor> args;
  for (const Argument& a : p.args()) {
    const ValueInfo& v = p.value(a.value);
    HostTensor t{v.shape, v.dtype, std::vector<double>(static_cast<size_t>(v.shape.numel()))};
    for (size_t k = 0; k < t.data.size(); ++k) {
      const int64_t i = static_cast<int64_t>(k);
      if (v.dtype != DType::kI32) {
        t.data[k] =
            v.name.find("norm") != std::string::npos ? 1.0 + 0.3 * uniform(rng) : uniform(rng);
      } else if (v.name == "positions") {
        const int64_t T = v.shape.dim(-1);
        t.data[k] = static_cast<double>(i % T + 3 * (i / T));
      } else if (v.name == "segmentation") {
        t.data[k] = i % 4 == 3 ? 0.0 : 1.0;
      } else {
        t.data[k] = static_cast<double>(rng() % kV);
      }
    }
    args.push_back(std::move(t));
  }
  return args;
}

ValueId cross_entropy_head(Builder& b, ValueId y) {
  const Shape s = b.info(y).shape;  // a copy: argument() may move the values
  ValueId head =
      b.argument("head", s.slice(2, s.rank()).concat(Shape{kV}), DType::kF32, {}, ArgRole::kBatch);
  ValueId targets = b.argument("targets", Shape{kB, kT}, DType::kI32, {}, ArgRole::kBatch);
  ValueId seg = b.argument("segmentation", Shape{kB, kT}, DType::kI32, {}, ArgRole::kBatch);
  ValueId logits = b.matmul(y, head, 2, s.rank() - 2);  // (B, T, V)
  auto [xent, lse] = b.softmax_cross_entropy(logits, targets);
  return b.masked_mean_loss(xent, seg).first;
}

ValueId tiny_llama_layer(Builder& b, std::vector<ValueId>& wrt, const TinyLayer& layer) {
  const int64_t H = layer.query_heads, Hkv = layer.kv_heads;
  auto param = [&](const char* name, Shape shape, std::vector<std::string> logical) {
    ValueId v =
        b.argument(name, std::move(shape), DType::kF32, std::move(logical), ArgRole::kParam);
    wrt.push_back(v);
    return v;
  };
  auto batch = [&](const char* name) {
    return b.argument(name, Shape{kB, kT}, DType::kI32, {"activation_batch", "activation_length"},
                      ArgRole::kBatch);
  };
  ValueId embedding = param("token_embedder/embedding", {kV, kE}, {"vocab", "embed"});
  ValueId attn_norm = param("pre_self_attention_layer_norm/scale", {kE}, {"norm"});
  ValueId wq = param("self_attention/query/kernel", {kE, H, kD}, {"embed", "q_heads", "kv"});
  ValueId wk =
      param("self_attention/key/kernel", {kE, Hkv, kD}, {"embed", "kv_heads", "kv_head_dim"});
  ValueId wv =
      param("self_attention/value/kernel", {kE, Hkv, kD}, {"embed", "kv_heads", "kv_head_dim"});
  ValueId wo = param("self_attention/out/kernel", {H, kD, kE}, {"heads", "kv", "embed"});
  ValueId mlp_norm = param("post_self_attention_layer_norm/scale", {kE}, {"norm"});
  ValueId wi0 = param("mlp/wi_0/kernel", {kE, kF}, {"embed", "mlp"});
  ValueId wi1 = param("mlp/wi_1/kernel", {kE, kF}, {"embed", "mlp"});
  ValueId wo_mlp = param("mlp/wo/kernel", {kF, kE}, {"mlp", "embed"});
  ValueId final_norm = param("decoder_norm/scale", {kE}, {"norm"});
  ValueId logits_w = param("logits_dense/kernel", {kE, kV}, {"embed", "vocab"});
  ValueId ids = batch("ids"), positions = batch("positions"), targets = batch("targets");
  ValueId seg = batch("segmentation");
  const std::vector<std::string> act{"activation_batch", "activation_length", "activation_embed"};
  auto residual = [&](ValueId v) {
    return layer.constrain_activations ? b.constraint(v, act) : v;
  };

  ValueId x = residual(b.embed_lookup(embedding, ids));  // (B, T, E)
  ValueId h = b.rmsnorm(x, attn_norm, 1e-5).first;
  ValueId q = b.rope(b.matmul(h, wq, 2, 1), positions, 1.0, 10000.0);  // (B, T, H, D)
  ValueId k = b.rope(b.matmul(h, wk, 2, 1), positions, 1.0, 10000.0);  // (B, T, Hkv, D)
  ValueId v = b.matmul(h, wv, 2, 1);
  if (Hkv < H) {
    k = b.repeat_kv(k, H / Hkv);  // (B, T, H, D)
    v = b.repeat_kv(v, H / Hkv);
  }
  ValueId o = b.attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(kD))).first;
  x = b.add(x, b.matmul(o, wo, 2, 2));  // (B, T, E)
  h = b.rmsnorm(x, mlp_norm, 1e-5).first;
  ValueId m = b.swiglu(b.matmul(h, wi0, 2, 1), b.matmul(h, wi1, 2, 1));  // (B, T, F)
  x = residual(b.add(x, b.matmul(m, wo_mlp, 2, 1)));
  h = b.rmsnorm(x, final_norm, 1e-5).first;
  ValueId logits = b.matmul(h, logits_w, 2, 1);  // (B, T, V)
  return b.masked_mean_loss(b.softmax_cross_entropy(logits, targets).first, seg).first;
}

Program build_with_gradients(const BuildLoss& build) {
  Builder b("grad_check");
  std::vector<ValueId> wrt;
  ValueId loss = build(b, wrt);
  std::vector<ValueId> grads = append_gradients(b, loss, wrt);
  b.output(loss, "loss");
  for (size_t k = 0; k < wrt.size(); ++k) {
    EXPECT_NE(grads[k], kNoValue) << b.info(wrt[k]).name;
    if (grads[k] != kNoValue) b.output(grads[k], "grad/" + b.info(wrt[k]).name);
  }
  return std::move(b).finish();
}

namespace {
double loss_of(const Program& p, const std::vector<HostTensor>& args) {
  Result<std::vector<HostTensor>> r = interpret(p, args);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? (*r)[0].data[0] : NAN;
}
}  // namespace

std::vector<GradError> check_gradients(const Program& p, const std::vector<HostTensor>& args,
                                       int max_samples) {
  Result<std::vector<HostTensor>> base = interpret(p, args);
  EXPECT_TRUE(base.ok()) << base.status().message();
  if (!base.ok()) return {};
  std::vector<HostTensor> work = args;
  std::mt19937_64 rng(7);
  std::vector<GradError> errors;
  const double h = 1e-5;
  for (size_t o = 1; o < p.outputs().size(); ++o) {
    const std::string name = p.outputs()[o].name.substr(5);  // after "grad/"
    const int ai = p.find_arg(name);
    EXPECT_GE(ai, 0) << "gradient of a non-argument: " << name;
    if (ai < 0) continue;
    const std::vector<double>& grad = (*base)[o].data;
    std::vector<size_t> idx(grad.size());
    std::iota(idx.begin(), idx.end(), 0);
    if (max_samples > 0 && idx.size() > static_cast<size_t>(max_samples)) {
      std::shuffle(idx.begin(), idx.end(), rng);
      idx.resize(static_cast<size_t>(max_samples));
    }
    double diff2 = 0, fd2 = 0;
    for (size_t i : idx) {
      double& x = work[ai].data[i];
      const double x0 = x;
      x = x0 + h;
      const double lp = loss_of(p, work);
      x = x0 - h;
      const double lm = loss_of(p, work);
      x = x0;
      const double fd = (lp - lm) / (2 * h);
      diff2 += (grad[i] - fd) * (grad[i] - fd);
      fd2 += fd * fd;
    }
    errors.push_back({name, std::sqrt(diff2) / std::max(std::sqrt(fd2), 1e-300), std::sqrt(fd2),
                      static_cast<int>(idx.size())});
    if (std::getenv("SHARDLAB_GRAD_VERBOSE"))  // the measured errors, to see the margin
      fmt::print("  {:<40} rel_err {:.2e}  |fd| {:.3e}  ({} entries)\n", name,
                 errors.back().rel_err, errors.back().fd_norm, errors.back().checked);
  }
  return errors;
}

void expect_gradients_match(const BuildLoss& build, int max_samples, double tol) {
  Program p = build_with_gradients(build);
  std::vector<GradError> errors = check_gradients(p, make_args(p), max_samples);
  EXPECT_EQ(errors.size() + 1, p.outputs().size());
  for (const GradError& e : errors) {
    EXPECT_LT(e.rel_err, tol) << e.name << " (" << e.checked << " entries)";
    EXPECT_GT(e.fd_norm, 1e-6) << e.name << ": the check is vacuous, the gradient is zero";
  }
}

}  // namespace eng::irtest
