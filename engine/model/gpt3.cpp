// engine/model/gpt3.cpp: MaxText's gpt3 decoder: parameters and the traced forward pass.
#include "engine/model/gpt3.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

namespace eng {

namespace {

using Logical = std::vector<std::string>;

// Indices into Gpt3LayerParams::w (gpt3_layer_weights' order).
enum Gpt3Weight : int {
  kPreNormScale, kPreNormBias, kQkvKernel, kQkvBias, kOutKernel, kOutBias,
  kMlpNormScale, kMlpNormBias, kWiKernel, kWiBias, kWoKernel, kWoBias, kNumGpt3Weights
};

ValueId as_dtype(Builder& b, ValueId x, DType dtype) {
  return b.info(x).dtype == dtype ? x : b.convert(x, dtype);
}

// x (B, T, V-or-P ids) -> (B, T, E): MaxText's Embed, the one-hot matmul when use_iota_embed
// (and the one-hot stays within iota_embed_max_bytes), else the gather.
ValueId embed(Builder& b, const ModelConfig& m, ValueId table, ValueId ids, const Logical& out) {
  const int64_t rows = b.info(table).shape[0];
  const int64_t one_hot_bytes = b.info(ids).shape.numel() * rows * dtype_size(DType::kF32);
  if (m.use_iota_embed && one_hot_bytes <= m.iota_embed_max_bytes) {
    ValueId onehot = as_dtype(b, b.one_hot(ids, rows, "vocab"), m.dtype);  // (B, T, rows)
    return b.matmul(onehot, as_dtype(b, table, m.dtype), 2, 1, false, false, out);
  }
  return b.embed_lookup(as_dtype(b, table, m.dtype), ids);
}

// x + bias (DenseGeneral's use_bias: the bias as dtype).
ValueId with_bias(Builder& b, const ModelConfig& m, ValueId x, ValueId bias) {
  return b.bias_add(x, as_dtype(b, bias, m.dtype));
}

ValueId layer_norm(Builder& b, const ModelConfig& m, ValueId x, ValueId scale, ValueId bias) {
  return b.layernorm(x, as_dtype(b, scale, m.dtype), as_dtype(b, bias, m.dtype),
                     m.normalization_layer_epsilon);
}

ValueId trace_gpt3_layer(Builder& b, const ModelConfig& m, const std::vector<ValueId>& lw,
                         ValueId x, ValueId segment_ids, int32_t scope) {
  const Logical kActivation = {"activation_batch", "activation_norm_length", "activation_embed"};
  const Logical kQkv = {"activation_batch", "activation_length", "", "activation_heads",
                        "activation_kv"};
  const Logical kHeads = {"activation_batch", "activation_length", "activation_heads",
                          "activation_kv"};
  const Logical kMlp = {"activation_batch", "activation_length", "activation_mlp"};
  auto w = [&](int k) { return as_dtype(b, lw[k], m.dtype); };
  b.checkpoint_name(x, "decoder_layer_input");
  b.set_remat_scope(scope);
  ValueId h = b.constraint(layer_norm(b, m, x, lw[kPreNormScale], lw[kPreNormBias]), kActivation);
  ValueId qkv = b.checkpoint_name(  // (B, T, 3, H, D)
      with_bias(b, m, b.matmul(h, w(kQkvKernel), 2, 1, false, false, kQkv), lw[kQkvBias]),
      "qkv_proj");
  auto part = [&](int64_t i) { return b.index_in_dim(qkv, 2, i); };  // (B, T, H, D)
  // MaxText: query /= sqrt(head_dim) before the attention, which then scales by nothing.
  ValueId q = b.checkpoint_name(
      b.constraint(b.scale(part(0), 1.0 / std::sqrt(static_cast<double>(m.head_dim))), kHeads),
      "query_proj");
  ValueId k = b.checkpoint_name(b.constraint(part(1), kHeads), "key_proj");
  ValueId v = b.checkpoint_name(b.constraint(part(2), kHeads), "value_proj");
  ValueId o = b.checkpoint_name(b.attention(q, k, v, 1.0, segment_ids).first, "context");
  ValueId attn = b.checkpoint_name(
      with_bias(b, m, b.matmul(o, w(kOutKernel), 2, 2, false, false, kActivation), lw[kOutBias]),
      "out_proj");  // (B, T, E)
  x = b.constraint(b.add(b.constraint(attn, kActivation), x), kActivation);

  // MlpBlock(use_pre_norm=True, use_bias=True, activations [gelu]).
  ValueId h2 = layer_norm(b, m, x, lw[kMlpNormScale], lw[kMlpNormBias]);
  ValueId wi = b.checkpoint_name(
      with_bias(b, m, b.matmul(h2, w(kWiKernel), 2, 1, false, false, kMlp), lw[kWiBias]),
      "mlpwi");  // (B, T, M)
  ValueId act = b.constraint(b.emit(OpKind::kGelu, {wi})[0], kMlp);
  ValueId mlp = b.checkpoint_name(
      with_bias(b, m, b.matmul(act, w(kWoKernel), 2, 1, false, false, kActivation), lw[kWoBias]),
      "mlpwo");  // (B, T, E)
  ValueId out = b.add(x, b.constraint(mlp, kActivation));
  b.set_remat_scope(-1);
  return b.constraint(out, kActivation);
}

}  // namespace

std::vector<LayerWeight> gpt3_layer_weights(const ModelConfig& m) {
  const int64_t E = m.emb_dim, H = m.num_query_heads, D = m.head_dim, M = m.mlp_dim;
  return {{"pre_self_attention_norm/scale", {E}, {"norm"}},
          {"pre_self_attention_norm/bias", {E}, {"norm"}},
          {"self_attention/qkv_proj/kernel", {E, 3, H, D}, {"embed", "qkv", "heads", "kv"}},
          {"self_attention/qkv_proj/bias", {3, H, D}, {"qkv", "heads", "kv"}},
          {"self_attention/out/kernel", {H, D, E}, {"heads", "kv", "embed"}},
          {"self_attention/out/bias", {E}, {"embed"}},
          {"mlp/mlp_layer_norm/scale", {E}, {"norm"}},
          {"mlp/mlp_layer_norm/bias", {E}, {"norm"}},
          {"mlp/wi/kernel", {E, M}, {"embed", "mlp"}},
          {"mlp/wi/bias", {M}, {"mlp"}},
          {"mlp/wo/kernel", {M, E}, {"mlp", "embed"}},
          {"mlp/wo/bias", {E}, {"embed"}}};
}

int64_t gpt3_num_params(const ModelConfig& m) {
  int64_t per_layer = 0;
  for (const LayerWeight& w : gpt3_layer_weights(m)) {
    int64_t n = 1;
    for (int64_t d : w.dims) n *= d;
    per_layer += n;
  }
  return m.vocab_size * m.emb_dim + std::max<int64_t>(m.trainable_position_size, 0) * m.emb_dim +
         m.num_decoder_layers * per_layer + 2 * m.emb_dim;
}

Gpt3Params declare_gpt3_params(Builder& b, const ModelConfig& m) {
  const int64_t V = m.vocab_size, E = m.emb_dim, L = m.num_decoder_layers;
  Gpt3Params p;
  auto param = [&](std::string path, Shape shape, Logical logical) {
    ValueId v = b.argument("params/" + path, std::move(shape), m.weight_dtype, std::move(logical),
                           ArgRole::kParam);
    p.all.push_back(v);
    return v;
  };
  p.embedding = param("token_embedder/embedding", Shape{V, E}, {"vocab", "embed_vocab"});
  if (m.trainable_position_size > 0)
    p.position = param("position_embedder/embedding", Shape{m.trainable_position_size, E},
                       {"vocab", "embed_vocab"});
  if (m.scan_layers) {
    for (LayerWeight& w : gpt3_layer_weights(m)) {
      w.dims.insert(w.dims.begin() + m.param_scan_axis, L);  // (E) -> (E, L) at axis 1
      w.logical.insert(w.logical.begin() + m.param_scan_axis, "layers");
      p.stacked.w.push_back(param(std::string("decoder/layers/") + w.sub, Shape(w.dims), w.logical));
    }
  } else {
    for (int64_t l = 0; l < L; ++l) {
      Gpt3LayerParams layer;
      for (const LayerWeight& w : gpt3_layer_weights(m))
        layer.w.push_back(
            param(fmt::format("decoder/layers_{}/{}", l, w.sub), Shape(w.dims), w.logical));
      p.layers.push_back(std::move(layer));
    }
  }
  p.norm_scale = param("decoder/decoder_norm/scale", Shape{E}, {"norm"});
  p.norm_bias = param("decoder/decoder_norm/bias", Shape{E}, {"norm"});
  return p;
}

LossValues trace_gpt3_loss(Builder& b, const ModelConfig& m, const Gpt3Params& p,
                           const BatchArgs& batch) {
  const Logical kActivation = {"activation_batch", "activation_norm_length", "activation_embed"};
  const Logical kLogits = {"activation_embed_and_logits_batch", "activation_length",
                           "activation_vocab"};
  ValueId x = embed(b, m, p.embedding, batch.inputs, kActivation);  // (B, T, E)
  if (p.position != kNoValue)  // decoders.py: y += position_embedder(decoder_positions)
    x = b.add(x, embed(b, m, p.position, batch.inputs_position, kActivation));
  x = b.constraint(x, kActivation);
  const ValueId seg = m.attention_segment_ids ? batch.inputs_segmentation : kNoValue;
  if (m.scan_layers) {
    const int axis = static_cast<int>(m.param_scan_axis);
    for (int64_t l = 0; l < m.num_decoder_layers; ++l) {
      const int32_t scope = static_cast<int32_t>(l);
      b.set_remat_scope(scope);
      std::vector<ValueId> lw;
      for (ValueId s : p.stacked.w) lw.push_back(b.index_in_dim(s, axis, l));
      x = trace_gpt3_layer(b, m, lw, x, seg, scope);
    }
  } else {
    for (size_t l = 0; l < p.layers.size(); ++l)
      x = trace_gpt3_layer(b, m, p.layers[l].w, x, seg, static_cast<int32_t>(l));
  }
  ValueId y = b.constraint(layer_norm(b, m, x, p.norm_scale, p.norm_bias), kActivation);
  // logits_via_embedding: y . embedding^T (B, T, V), normalize_embedding_logits false.
  ValueId logits = b.constraint(
      b.matmul(y, as_dtype(b, p.embedding, m.dtype), 2, 1, false, true, kLogits), kLogits);
  // cast_logits_to_fp32: inside softmax_cross_entropy (llama.cpp's loss head says why).
  ValueId xent = b.softmax_cross_entropy(logits, batch.targets).first;  // (B, T)
  LossValues out;
  std::tie(out.loss, out.total_weights) = b.masked_mean_loss(xent, batch.targets_segmentation);
  return out;
}

}  // namespace eng
