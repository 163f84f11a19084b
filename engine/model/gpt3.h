// engine/model/gpt3.h: MaxText's gpt3 decoder (src/maxtext/models/gpt3.py and layers/decoders.py
// at commit e591f30, 2026-08) traced into a Program with its parameter paths and logical axes.
//
// Parameter tree (unscanned; scanned: params/decoder/layers/<sub> with the layer dim at
// param_scan_axis and the logical name "layers" there, as the llama decoder):
//   params/token_embedder/embedding                          (V, E)       (vocab, embed_vocab)
//   params/position_embedder/embedding                       (P, E)       (vocab, embed_vocab)
//   params/decoder/layers_{l}/pre_self_attention_norm/scale  (E)          (norm,)
//   params/decoder/layers_{l}/pre_self_attention_norm/bias   (E)          (norm,)
//   params/decoder/layers_{l}/self_attention/qkv_proj/kernel (E, 3, H, D) (embed, qkv, heads, kv)
//   params/decoder/layers_{l}/self_attention/qkv_proj/bias   (3, H, D)    (qkv, heads, kv)
//   params/decoder/layers_{l}/self_attention/out/kernel      (H, D, E)    (heads, kv, embed)
//   params/decoder/layers_{l}/self_attention/out/bias        (E)          (embed,)
//   params/decoder/layers_{l}/mlp/mlp_layer_norm/scale       (E)          (norm,)
//   params/decoder/layers_{l}/mlp/mlp_layer_norm/bias        (E)          (norm,)
//   params/decoder/layers_{l}/mlp/wi/kernel                  (E, M)       (embed, mlp)
//   params/decoder/layers_{l}/mlp/wi/bias                    (M)          (mlp,)
//   params/decoder/layers_{l}/mlp/wo/kernel                  (M, E)       (mlp, embed)
//   params/decoder/layers_{l}/mlp/wo/bias                    (E)          (embed,)
//   params/decoder/decoder_norm/scale, .../bias              (E)          (norm,)
// No logits kernel: logits = y . embedding^T (logits_via_embedding). Norms are Gpt3LayerNorm
// (op.h kLayerNorm: y = norm(x) (1 + scale) + bias, scale initialised to 0); dense layers carry
// DenseGeneral's bias with the kernel's output dims and names.
//
// Layer (per token, x (B, T, E)):
//   h = layernorm(x); qkv = h . qkv_proj + b (B, T, 3, H, D); q, k, v = qkv[:, :, i]
//   q /= sqrt(D); o = causal attention(q, k, v); x = x + (o . out + b)
//   h2 = layernorm(x) (mlp_layer_norm, MlpBlock's use_pre_norm); x = x + wo(gelu(wi h2 + b)) + b
// Decoder: x = embed(inputs) + position_embed(positions); layers; layernorm (decoder_norm);
// logits = x . embedding^T, cast to f32; the masked mean cross-entropy as the llama decoder.
#pragma once

#include <vector>

#include "engine/ir/builder.h"
#include "engine/model/llama.h"

namespace eng {

// One layer's twelve weights, in declaration order.
struct Gpt3LayerParams {
  std::vector<ValueId> w;  // Gpt3LayerWeight order (gpt3.cpp's table)
};

struct Gpt3Params {
  ValueId embedding = kNoValue, position = kNoValue;
  std::vector<Gpt3LayerParams> layers;  // unscanned
  Gpt3LayerParams stacked;              // scan_layers: one (.., L, ..) weight per kind
  ValueId norm_scale = kNoValue, norm_bias = kNoValue;
  std::vector<ValueId> all;             // every parameter, in argument order
};

Gpt3Params declare_gpt3_params(Builder& b, const ModelConfig& m);
// The per-layer weight list (sub-path, per-layer shape, logical names), declaration order.
std::vector<LayerWeight> gpt3_layer_weights(const ModelConfig& m);
LossValues trace_gpt3_loss(Builder& b, const ModelConfig& m, const Gpt3Params& p,
                           const BatchArgs& batch);
// Total parameter count (every weight above).
int64_t gpt3_num_params(const ModelConfig& m);

}  // namespace eng
