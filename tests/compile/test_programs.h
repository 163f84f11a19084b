// tests/compile/test_programs.h: programs the compile and runtime tests share: a llama-style
// train step (forward, autodiff backward, global-norm clipping, AdamW, step increment).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/ir/autodiff.h"
#include "engine/ir/builder.h"

namespace eng::testing {

struct TinyDims {
  int64_t B = 2, T = 8, V = 16, E = 8, H = 2, D = 4, M = 12, L = 1;
  bool use_iota_embed = false;  // one-hot . embedding instead of a gather
};

inline Program build_train_step(const TinyDims& d) {
  Builder b("train_step");
  const std::vector<std::string> act{"activation_batch", "activation_length", "activation_embed"};
  std::vector<ValueId> params;
  auto param = [&](std::string name, Shape s, std::vector<std::string> logical) {
    ValueId v = b.argument("params/" + name, std::move(s), DType::kF32, std::move(logical),
                           ArgRole::kParam);
    params.push_back(v);
    return v;
  };
  ValueId emb = param("token_embedder/embedding", Shape{d.V, d.E}, {"vocab", "embed"});
  struct Layer {
    ValueId pre, wq, wk, wv, wo, post, wi0, wi1, wmo;
  };
  std::vector<Layer> layers;
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string p = fmt::format("decoder/layers_{}/", l);
    Layer y;
    y.pre = param(p + "pre_self_attention_layer_norm/scale", Shape{d.E}, {"norm"});
    y.wq = param(p + "self_attention/query/kernel", Shape{d.E, d.H, d.D}, {"embed", "q_heads", "kv"});
    y.wk = param(p + "self_attention/key/kernel", Shape{d.E, d.H, d.D}, {"embed", "kv_heads", "kv"});
    y.wv = param(p + "self_attention/value/kernel", Shape{d.E, d.H, d.D}, {"embed", "kv_heads", "kv"});
    y.wo = param(p + "self_attention/out/kernel", Shape{d.H, d.D, d.E}, {"heads", "kv", "embed"});
    y.post = param(p + "post_self_attention_layer_norm/scale", Shape{d.E}, {"norm"});
    y.wi0 = param(p + "mlp/wi_0/kernel", Shape{d.E, d.M}, {"embed", "mlp"});
    y.wi1 = param(p + "mlp/wi_1/kernel", Shape{d.E, d.M}, {"embed", "mlp"});
    y.wmo = param(p + "mlp/wo/kernel", Shape{d.M, d.E}, {"mlp", "embed"});
    layers.push_back(y);
  }
  ValueId final_norm = param("decoder/decoder_norm/scale", Shape{d.E}, {"norm"});
  ValueId wlogits = param("decoder/logits_dense/kernel", Shape{d.E, d.V}, {"embed", "vocab"});

  std::vector<ValueId> mus, nus;
  for (ValueId p : params) {
    const ValueInfo info = b.info(p);
    mus.push_back(b.argument("opt_state/mu/" + info.name.substr(7), info.shape, DType::kF32,
                             info.logical, ArgRole::kOptMu));
  }
  for (ValueId p : params) {
    const ValueInfo info = b.info(p);
    nus.push_back(b.argument("opt_state/nu/" + info.name.substr(7), info.shape, DType::kF32,
                             info.logical, ArgRole::kOptNu));
  }
  ValueId step = b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep);
  const std::vector<std::string> bt{"activation_batch", "activation_length"};
  ValueId ids = b.argument("inputs", Shape{d.B, d.T}, DType::kI32, bt, ArgRole::kBatch);
  ValueId pos = b.argument("inputs_position", Shape{d.B, d.T}, DType::kI32, bt, ArgRole::kBatch);
  ValueId targets = b.argument("targets", Shape{d.B, d.T}, DType::kI32, bt, ArgRole::kBatch);
  ValueId seg = b.argument("targets_segmentation", Shape{d.B, d.T}, DType::kI32, bt, ArgRole::kBatch);

  // x (B, T, E)
  ValueId x = d.use_iota_embed ? b.matmul(b.one_hot(ids, d.V), emb, 2, 1) : b.embed_lookup(emb, ids);
  for (const Layer& y : layers) {
    ValueId h = b.rmsnorm(x, y.pre, 1e-5).first;
    ValueId q = b.rope(b.matmul(h, y.wq, 2, 1), pos, 1.0, 10000.0);  // (B, T, H, D)
    ValueId k = b.rope(b.matmul(h, y.wk, 2, 1), pos, 1.0, 10000.0);
    ValueId v = b.matmul(h, y.wv, 2, 1);
    ValueId o = b.attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(d.D))).first;
    x = b.add(x, b.matmul(o, y.wo, 2, 2));
    ValueId h2 = b.rmsnorm(x, y.post, 1e-5).first;
    ValueId s = b.swiglu(b.matmul(h2, y.wi0, 2, 1), b.matmul(h2, y.wi1, 2, 1));  // (B, T, M)
    x = b.constraint(b.add(x, b.matmul(s, y.wmo, 2, 1)), act);
  }
  ValueId logits = b.matmul(b.rmsnorm(x, final_norm, 1e-5).first, wlogits, 2, 1);  // (B, T, V)
  ValueId xent = b.softmax_cross_entropy(logits, targets).first;
  auto [loss, total_weights] = b.masked_mean_loss(xent, seg);

  std::vector<ValueId> grads = append_gradients(b, loss, params);
  std::vector<ValueId> sums;
  for (ValueId g : grads) sums.push_back(b.sum_squares(g));
  ValueId norm = b.global_norm(sums);
  ValueId clip = b.clip_factor(norm, 1.0);
  ValueId lr = b.learning_rate(step, 1e-2, 2, 10, 0.1);
  const int n = static_cast<int>(params.size());
  for (int i = 0; i < n; ++i) {
    auto upd = b.adamw(params[i], grads[i], mus[i], nus[i], lr, clip, step, 0.9, 0.95, 1e-8, 0.1);
    b.output(upd[0], b.info(params[i]).name, i);
    b.output(upd[1], b.info(mus[i]).name, n + i);
    b.output(upd[2], b.info(nus[i]).name, 2 * n + i);
  }
  b.output(b.increment(step), "step", 3 * n);
  b.output(loss, "learning/loss");
  b.output(total_weights, "learning/total_weights");
  b.output(norm, "learning/grad_norm");
  b.output(lr, "learning/current_learning_rate");
  return std::move(b).finish();
}

}  // namespace eng::testing
