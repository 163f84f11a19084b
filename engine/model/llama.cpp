// engine/model/llama.cpp: presets, parameter declaration, the traced forward pass and init.
#include "engine/model/llama.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "engine/base/hash.h"
#include "engine/ir/remat.h"
#include "engine/model/gpt3.h"
#include "engine/model/mla.h"
#include "engine/model/moe.h"

namespace eng {

namespace {

using Logical = std::vector<std::string>;

}  // namespace

Status ModelConfig::validate() const {
  auto positive = [&](const char* key, int64_t v) -> Status {
    if (v <= 0) return invalid_argument("model {}: {} must be positive, got {}", name, key, v);
    return ok_status();
  };
  ENG_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  ENG_RETURN_IF_ERROR(positive("emb_dim", emb_dim));
  ENG_RETURN_IF_ERROR(positive("num_query_heads", num_query_heads));
  ENG_RETURN_IF_ERROR(positive("num_kv_heads", num_kv_heads));
  ENG_RETURN_IF_ERROR(positive("head_dim", head_dim));
  ENG_RETURN_IF_ERROR(positive("mlp_dim", mlp_dim));
  ENG_RETURN_IF_ERROR(positive("num_decoder_layers", num_decoder_layers));
  if (num_query_heads % num_kv_heads != 0)  // grouped-query attention: whole groups
    return invalid_argument(
        "model {}: num_query_heads {} is not divisible by num_kv_heads {} (grouped-query "
        "attention shares each kv head among num_query_heads / num_kv_heads query heads)",
        name, num_query_heads, num_kv_heads);
  if (head_dim % 2 != 0)
    return invalid_argument("model {}: head_dim {} must be even for rotary embeddings", name,
                            head_dim);
  if (!(normalization_layer_epsilon > 0))
    return invalid_argument("model {}: normalization_layer_epsilon must be positive, got {}", name,
                            normalization_layer_epsilon);
  if (param_scan_axis < 0 || param_scan_axis > 1)  // the norm scales are rank 1: (E, L) at most
    return invalid_argument("model {}: param_scan_axis must be 0 or 1 (the layer dim's place in "
                            "every stacked weight; the norm scales have one dim), got {}",
                            name, param_scan_axis);
  ENG_RETURN_IF_ERROR(validate_mla(*this));  // attention_type and the MLA keys (mla.h)
  if (rope_type != "default" && !rope_type.starts_with("llama3.1") && rope_type != "yarn")
    return unimplemented("model {}: rope_type '{}' is not supported; default, llama3.1 or yarn "
                         "(yarn: MLA's rope part)",
                         name, rope_type);
  if (!(rope_min_timescale > 0) || !(rope_max_timescale > 0))
    return invalid_argument("model {}: rope_min_timescale {} and rope_max_timescale {} must be "
                            "positive",
                            name, rope_min_timescale, rope_max_timescale);
  if (decoder_block == "gpt3" && use_qk_norm)  // MaxText's gpt3 attention has no qk norm
    return invalid_argument("model {}: use_qk_norm=true on decoder_block gpt3: MaxText's gpt3 "
                            "attention (fused qkv_proj) has no query/key norm; use_qk_norm is for "
                            "the llama2-style decoders (qwen3_moe)",
                            name);
  if (decoder_block == "gpt3") {  // engine/model/gpt3.h: MaxText's gpt3.py, fused qkv only
    if (num_kv_heads != num_query_heads)
      return invalid_argument("model {}: gpt3 needs num_kv_heads == num_query_heads (MaxText's "
                              "assert), got {} and {}",
                              name, num_kv_heads, num_query_heads);
    if (mlp_activations != std::vector<std::string>{"gelu"} || !fused_qkv || !logits_via_embedding)
      return unimplemented("model {}: the gpt3 decoder runs mlp_activations [gelu], fused_qkv and "
                           "logits_via_embedding (MaxText's gpt3 ymls); got [{}], {}, {}",
                           name, fmt::join(mlp_activations, ", "), fused_qkv,
                           logits_via_embedding);
    if (llama31_rope() || rope_type != "default")
      return invalid_argument("model {}: rope_type {} has no effect on gpt3 (learned positions, no "
                              "rotary embedding)",
                              name, rope_type);
    return ok_status();
  }
  if (decoder_block != "llama2" && decoder_block != "mistral" && decoder_block != "qwen3_moe" &&
      decoder_block != "deepseek")
    return unimplemented("model {}: decoder_block '{}' not supported (llama2, mistral, qwen3_moe, "
                         "deepseek, gpt3)",
                         name, decoder_block);
  if (fused_qkv || logits_via_embedding || trainable_position_size > 0)
    return unimplemented("model {}: fused_qkv, logits_via_embedding and trainable_position_size "
                         "are gpt3's; the llama2 decoder has separate query/key/value, a "
                         "logits_dense kernel and rotary positions",
                         name);
  if (mlp_activations != std::vector<std::string>{"silu", "linear"})
    return unimplemented("model {}: mlp_activations [{}] not supported; only [silu, linear]", name,
                         fmt::join(mlp_activations, ", "));
  return validate_moe(*this);
}

int64_t ModelConfig::num_params() const {
  if (gpt3()) return gpt3_num_params(*this);
  const int64_t E = emb_dim, H = num_query_heads, Hkv = num_kv_heads, D = head_dim, M = mlp_dim;
  // norms; query and out (E*H*D each); key and value (E*Hkv*D each); the MLP.
  int64_t per_layer = 2 * E + (is_mla() ? mla_attention_params(*this)
                                         : 2 * E * H * D + 2 * E * Hkv * D) + 3 * E * M;
  if (use_qk_norm) per_layer += 2 * D;  // query_norm and key_norm scales
  const int64_t dense_layers = moe.enabled() ? moe.first_num_dense_layers : num_decoder_layers;
  int64_t moe_layer = per_layer;
  if (moe.enabled()) {  // the experts' wi_0, wi_1, wo and the router instead of the MLP
    const int64_t width = moe.moe_mlp_dim > 0 ? moe.moe_mlp_dim : M;
    moe_layer += moe.num_experts * 3 * E * width + E * moe.num_experts - 3 * E * M;
    if (moe.routed_bias) moe_layer += moe.num_experts;           // gate/bias
    moe_layer += 3 * E * moe.shared_experts * width;             // the shared experts' MLP
  }
  return vocab_size * E * 2 + E + dense_layers * per_layer +
         (num_decoder_layers - dense_layers) * moe_layer;
}

int64_t ModelConfig::num_active_params() const {
  if (!moe.enabled()) return num_params();
  // A token reads num_experts_per_tok experts' wi_0, wi_1 and wo in every layer.
  const int64_t width = moe.moe_mlp_dim > 0 ? moe.moe_mlp_dim : mlp_dim;
  const int64_t skipped = (moe.num_experts - moe.num_experts_per_tok) * 3 * emb_dim * width;
  return num_params() - (num_decoder_layers - moe.first_num_dense_layers) * skipped;
}

const std::vector<std::string>& input_data_logical_axes(bool pipelined) {
  static const std::vector<std::string> axes = {"activation_embed_and_logits_batch",
                                                "activation_norm_length"};
  static const std::vector<std::string> pipeline_axes = {"activation_batch",
                                                         "activation_norm_length"};
  return pipelined ? pipeline_axes : axes;
}

static std::vector<LayerWeight> dense_layer_weights(const ModelConfig& m) {
  const int64_t E = m.emb_dim, H = m.num_query_heads, Hkv = m.num_kv_heads, D = m.head_dim,
                M = m.mlp_dim;
  if (m.is_mla()) {  // MLA's attention weights in the place of query, key, value, out
    std::vector<LayerWeight> w = {{"pre_self_attention_layer_norm/scale", {E}, {"norm"}}};
    for (LayerWeight& a : mla_attention_weights(m)) w.push_back(std::move(a));
    w.push_back({"post_self_attention_layer_norm/scale", {E}, {"norm"}});
    w.push_back({"mlp/wi_0/kernel", {E, M}, {"embed", "mlp"}});
    w.push_back({"mlp/wi_1/kernel", {E, M}, {"embed", "mlp"}});
    w.push_back({"mlp/wo/kernel", {M, E}, {"mlp", "embed"}});
    return w;
  }
  return {{"pre_self_attention_layer_norm/scale", {E}, {"norm"}},
          {"self_attention/query/kernel", {E, H, D}, {"embed", "q_heads", "kv"}},
          {"self_attention/key/kernel", {E, Hkv, D}, {"embed", "kv_heads", "kv_head_dim"}},
          {"self_attention/value/kernel", {E, Hkv, D}, {"embed", "kv_heads", "kv_head_dim"}},
          {"self_attention/out/kernel", {H, D, E}, {"heads", "kv", "embed"}},
          {"post_self_attention_layer_norm/scale", {E}, {"norm"}},
          {"mlp/wi_0/kernel", {E, M}, {"embed", "mlp"}},
          {"mlp/wi_1/kernel", {E, M}, {"embed", "mlp"}},
          {"mlp/wo/kernel", {M, E}, {"mlp", "embed"}}};
}

std::vector<LayerWeight> layer_weights(const ModelConfig& m) { return layer_weights(m, true); }

std::vector<LayerWeight> layer_weights(const ModelConfig& m, bool moe_layer) {
  std::vector<LayerWeight> w = dense_layer_weights(m);
  if (moe_layer && m.moe.enabled()) {  // the experts in the MLP's place, the router's last
    std::vector<LayerWeight> experts = moe_layer_weights(m);
    std::copy(experts.begin(), experts.begin() + 3, w.end() - 3);
    w.insert(w.end(), experts.begin() + 3, experts.end());  // gate[, bias][, shared experts]
  }
  if (m.use_qk_norm) {  // last, so the other weights keep their argument order
    w.push_back({"self_attention/query_norm/scale", {m.head_dim}, {"norm"}});
    w.push_back({"self_attention/key_norm/scale", {m.head_dim}, {"norm"}});
  }
  return w;
}

LlamaLayerParams layer_from_list(const std::vector<ValueId>& v) {
  ENG_CHECK(v.size() >= 9 && v.size() <= 12, "llama: {} layer weights, expected 9 (10 with "
            "experts, 2 more with qk norm)", v.size());
  LlamaLayerParams lp{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
  if (v.size() == 10 || v.size() == 12) lp.gate = v[9];
  if (v.size() >= 11) {
    lp.query_norm = v[v.size() - 2];
    lp.key_norm = v[v.size() - 1];
  }
  return lp;
}

LlamaLayerParams layer_from_weights(const std::vector<LayerWeight>& ws,
                                    const std::vector<ValueId>& v) {
  ENG_CHECK(ws.size() == v.size(), "llama: {} layer values for {} weights", v.size(), ws.size());
  LlamaLayerParams lp{kNoValue, kNoValue, kNoValue, kNoValue, kNoValue,
                      kNoValue, kNoValue, kNoValue, kNoValue};
  for (size_t i = 0; i < ws.size(); ++i) {
    const std::string_view sub = ws[i].sub;
    auto ends = [&](std::string_view t) { return sub.ends_with(t); };
    const bool shared = sub.find("shared_experts/") != std::string_view::npos;
    ValueId* slot = ends("pre_self_attention_layer_norm/scale")    ? &lp.pre_norm
                    : ends("post_self_attention_layer_norm/scale") ? &lp.post_norm
                    : ends("self_attention/query/kernel")          ? &lp.query
                    : ends("self_attention/key/kernel")            ? &lp.key
                    : ends("self_attention/value/kernel")          ? &lp.value
                    : ends("self_attention/out/kernel")            ? &lp.out
                    : ends("self_attention/query_norm/scale")      ? &lp.query_norm
                    : ends("self_attention/key_norm/scale")        ? &lp.key_norm
                    : ends("self_attention/wq_a/kernel")           ? &lp.wq_a
                    : ends("self_attention/q_norm/scale")          ? &lp.q_norm
                    : ends("self_attention/wq_b/kernel")           ? &lp.query
                    : ends("self_attention/wkv_a/kernel")          ? &lp.wkv_a
                    : ends("self_attention/kv_norm/scale")         ? &lp.kv_norm
                    : ends("self_attention/wkv_b/kernel")          ? &lp.wkv_b
                    : ends("gate/kernel")                          ? &lp.gate
                    : ends("gate/bias")                            ? &lp.gate_bias
                    : shared && ends("wi_0/kernel")                ? &lp.shared_wi_0
                    : shared && ends("wi_1/kernel")                ? &lp.shared_wi_1
                    : shared && ends("wo/kernel")                  ? &lp.shared_wo
                    : ends("wi_0") || ends("wi_0/kernel")          ? &lp.wi_0
                    : ends("wi_1") || ends("wi_1/kernel")          ? &lp.wi_1
                    : ends("wo") || ends("wo/kernel")              ? &lp.wo
                                                                   : nullptr;
    ENG_CHECK(slot != nullptr && *slot == kNoValue, "llama: layer weight {} unknown or repeated",
              ws[i].sub);
    *slot = v[i];
  }
  const bool mla = lp.wkv_a != kNoValue;  // MLA: no key, value (wkv_a, kv_norm, wkv_b instead)
  for (ValueId x : {lp.pre_norm, lp.query, mla ? lp.wkv_b : lp.key, mla ? lp.kv_norm : lp.value,
                    lp.out, lp.post_norm, lp.wi_0, lp.wi_1, lp.wo})
    ENG_CHECK(x != kNoValue, "llama: a layer without one of its nine weights");
  return lp;
}

std::vector<LayerGroup> layer_groups(const ModelConfig& m) {
  const int64_t L = m.num_decoder_layers;
  if (m.decoder_block != "deepseek") return {{"decoder/layers/", "layers", L, m.moe.enabled()}};
  // MaxText's decoders.py: deepseek scans its dense and MoE layers separately
  // (scan_decoder_layers(..., "dense_layers") and (..., "moe_layers"), metadata_axis_name the
  // logical name of the stacked dim); unscanned, dense_layers_{i} and moe_layers_{j}.
  const int64_t d = m.moe.first_num_dense_layers;
  std::vector<LayerGroup> g;
  if (d > 0) g.push_back({"decoder/dense_layers/", "dense_layers", d, false});
  g.push_back({"decoder/moe_layers/", "moe_layers", L - d, true});
  return g;
}

namespace {

// Every decoder's scanned path part and its unscanned form (layer_groups).
constexpr std::pair<const char*, const char*> kGroupParts[] = {
    {"decoder/layers/", "decoder/layers_"},
    {"decoder/dense_layers/", "decoder/dense_layers_"},
    {"decoder/moe_layers/", "decoder/moe_layers_"}};

// "decoder/dense_layers/" -> "decoder/dense_layers_".
std::string unscanned_part(const char* scanned) {
  std::string s = scanned;
  s.back() = '_';
  return s;
}

}  // namespace

std::vector<ValueId> layer_param_list(const LlamaLayerParams& lp) {
  std::vector<ValueId> v = {lp.pre_norm,  lp.query, lp.key, lp.value, lp.out,
                            lp.post_norm, lp.wi_0,  lp.wi_1, lp.wo};
  if (lp.wkv_a != kNoValue) {  // MLA: layer_weights' order (mla_attention_weights)
    v = {lp.pre_norm};
    if (lp.wq_a != kNoValue) v.insert(v.end(), {lp.wq_a, lp.q_norm});
    v.insert(v.end(), {lp.query, lp.wkv_a, lp.kv_norm, lp.wkv_b, lp.out, lp.post_norm, lp.wi_0,
                       lp.wi_1, lp.wo});
  }
  if (lp.gate != kNoValue) v.push_back(lp.gate);
  if (lp.gate_bias != kNoValue) v.push_back(lp.gate_bias);
  if (lp.shared_wi_0 != kNoValue) {
    v.push_back(lp.shared_wi_0);
    v.push_back(lp.shared_wi_1);
    v.push_back(lp.shared_wo);
  }
  if (lp.query_norm != kNoValue) {
    v.push_back(lp.query_norm);
    v.push_back(lp.key_norm);
  }
  return v;
}

LlamaParams declare_llama_params(Builder& b, const ModelConfig& m) {
  const int64_t V = m.vocab_size, E = m.emb_dim, L = m.num_decoder_layers;
  LlamaParams p;
  auto param = [&](std::string path, Shape shape, Logical logical) {
    ValueId v = b.argument("params/" + path, std::move(shape), m.weight_dtype, std::move(logical),
                           ArgRole::kParam);
    p.all.push_back(v);
    return v;
  };
  p.embedding = param("token_embedder/embedding", Shape{V, E}, {"vocab", "embed_vocab"});
  if (m.pipeline_stages > 1) {
    p.stacked = declare_pipeline_layer_params(b, m, p.all);
    if (m.pipelined_layers() < L) p.outside = declare_outside_pipeline_params(b, m, p.all);
  } else if (m.scan_layers) {  // (..., n at param_scan_axis, ...), the group's logical there
    for (const LayerGroup& g : layer_groups(m)) {
      const std::vector<LayerWeight> ws = layer_weights(m, g.moe);
      std::vector<ValueId> stacked;
      for (LayerWeight w : ws) {
        w.dims.insert(w.dims.begin() + m.param_scan_axis, g.n);
        w.logical.insert(w.logical.begin() + m.param_scan_axis, g.logical);
        stacked.push_back(param(std::string(g.scanned_part) + w.sub, Shape(w.dims), w.logical));
      }
      (g.moe || m.decoder_block != "deepseek" ? p.stacked : p.stacked_dense) =
          layer_from_weights(ws, stacked);
    }
  } else {
    for (const LayerGroup& g : layer_groups(m)) {
      const std::vector<LayerWeight> ws = layer_weights(m, g.moe);
      for (int64_t l = 0; l < g.n; ++l) {
        std::vector<ValueId> layer;
        for (const LayerWeight& w : ws)
          layer.push_back(param(fmt::format("{}{}/{}", unscanned_part(g.scanned_part), l, w.sub),
                                Shape(w.dims), w.logical));
        p.layers.push_back(layer_from_weights(ws, layer));
      }
    }
  }
  p.decoder_norm = param("decoder/decoder_norm/scale", Shape{E}, {"norm"});
  p.logits_dense = param("decoder/logits_dense/kernel", Shape{E, V}, {"embed_vocab", "vocab"});
  return p;
}

std::vector<ValueId> per_layer_sum_squares(Builder& b, const ModelConfig& m, const LlamaParams& p,
                                           const std::vector<ValueId>& values) {
  ENG_CHECK(values.size() == p.all.size(), "per_layer_sum_squares: {} values for {} params",
            values.size(), p.all.size());
  std::vector<ValueId> out;
  if (!m.scan_layers || m.pipeline_stages > 1) {
    for (ValueId v : values) out.push_back(b.sum_squares(v));
    return out;
  }
  // p.all holds each group's stacked layer weights together, the groups one after the other
  // (declare_llama_params): the terms before them, each group's layers' slices (layer-major:
  // the unscanned order), then the terms after them.
  std::vector<std::pair<std::vector<ValueId>, int64_t>> groups;
  for (const LayerGroup& g : layer_groups(m))
    groups.push_back({layer_param_list(g.moe || m.decoder_block != "deepseek" ? p.stacked
                                                                              : p.stacked_dense),
                      g.n});
  const auto at = std::find(p.all.begin(), p.all.end(), groups.front().first.front());
  const size_t first = static_cast<size_t>(at - p.all.begin());
  size_t end = first;
  for (const auto& [stacked, n] : groups) {
    ENG_CHECK(end + stacked.size() <= p.all.size() &&
                  std::equal(stacked.begin(), stacked.end(), p.all.begin() + end),
              "per_layer_sum_squares: the stacked weights are not together in the parameters");
    end += stacked.size();
  }
  for (size_t k = 0; k < first; ++k) out.push_back(b.sum_squares(values[k]));
  const int axis = static_cast<int>(m.param_scan_axis);
  size_t begin = first;
  for (const auto& [stacked, n] : groups) {
    for (int64_t l = 0; l < n; ++l)
      for (size_t k = begin; k < begin + stacked.size(); ++k)
        out.push_back(b.sum_squares(b.index_in_dim(values[k], axis, l)));
    begin += stacked.size();
  }
  for (size_t k = end; k < values.size(); ++k) out.push_back(b.sum_squares(values[k]));
  return out;
}

std::optional<std::string> unscanned_name(const std::string& scanned, int64_t layer) {
  for (const auto& [scanned_part, layer_part] : kGroupParts) {
    const size_t at = scanned.find(scanned_part);
    if (at == std::string::npos) continue;
    return scanned.substr(0, at) + fmt::format("{}{}/", layer_part, layer) +
           scanned.substr(at + std::string_view(scanned_part).size());
  }
  return std::nullopt;
}

std::optional<ScannedName> scanned_name(const std::string& unscanned) {
  for (const auto& [scanned_part, layer_part] : kGroupParts) {
    const size_t at = unscanned.find(layer_part);
    if (at == std::string::npos) continue;
    size_t i = at + std::string_view(layer_part).size(), digits = 0;
    int64_t layer = 0;
    while (i < unscanned.size() && std::isdigit(static_cast<unsigned char>(unscanned[i])) &&
           digits < 9) {
      layer = layer * 10 + (unscanned[i++] - '0');
      ++digits;
    }
    if (digits == 0 || i >= unscanned.size() || unscanned[i] != '/') continue;
    return ScannedName{unscanned.substr(0, at) + scanned_part + unscanned.substr(i + 1), layer};
  }
  return std::nullopt;
}

BatchArgs declare_batch(Builder& b, const ModelConfig& m, int64_t global_batch, int64_t seq_len) {
  auto arg = [&](const char* name) {
    return b.argument(name, Shape{global_batch, seq_len}, DType::kI32,
                      input_data_logical_axes(m.pipeline_stages > 1), ArgRole::kBatch);
  };
  BatchArgs a;
  a.inputs = arg("inputs");
  a.inputs_position = arg("inputs_position");
  a.inputs_segmentation = arg("inputs_segmentation");
  a.targets = arg("targets");
  a.targets_position = arg("targets_position");
  a.targets_segmentation = arg("targets_segmentation");
  return a;
}

// x as `dtype`: the value itself when it already is (so float32 models emit no cast). MaxText
// casts every weight to dtype where it is used (DenseGeneral, RMSNorm, Embed: jnp.asarray(w,
// dtype)); docs/precision.md.
static ValueId as_dtype(Builder& b, ValueId x, DType dtype) {
  return b.info(x).dtype == dtype ? x : b.convert(x, dtype);
}

ValueId trace_decoder_layer(Builder& b, const ModelConfig& m, const LlamaLayerParams& lp, ValueId x,
                            ValueId positions, int32_t remat_scope, ValueId segment_ids,
                            bool stage_as_data, MoeOutputs* moe) {
  auto names = [&](Logical l) {  // a layer after the pipeline: the pp_act_as_dp names
    if (stage_as_data)
      for (std::string& n : l) n = pp_act_as_dp_name(n);
    return l;
  };
  const Logical kActivation =
      names({"activation_batch", "activation_norm_length", "activation_embed"});
  const Logical kHeads =
      names({"activation_batch", "activation_length", "activation_heads", "activation_kv"});
  const Logical kMlp = names({"activation_batch", "activation_length", "activation_mlp"});
  // Grouped-query attention (Hkv < H): key/value carry MaxText's kv-heads logical axes and
  // are repeated onto the query heads (repeat_kv, op.h) after rope; with Hkv == H nothing
  // changes (no repeat op: the multi-head program is the same as before GQA).
  const int64_t repeats = m.num_query_heads / m.num_kv_heads;
  const Logical kKvHeads = repeats > 1 ? names({"activation_batch", "activation_length",
                                                "activation_kv_heads", "activation_kv"})
                                       : kHeads;
  const double eps = m.normalization_layer_epsilon;
  const double attn_scale = 1.0 / std::sqrt(static_cast<double>(m.head_dim));
  // The dot outputs carry MaxText's checkpoint_name names.
  b.checkpoint_name(x, "decoder_layer_input");
  b.set_remat_scope(remat_scope);
  // Attention block: x + out(attention(rope(q), rope(k), v)) over rmsnorm(x).
  auto w = [&](ValueId p) { return as_dtype(b, p, m.dtype); };          // weights as dtype
  // RMSNorm scales go in as f32: the op casts them to x's dtype itself (its bf16 kernel's
  // rb(scale), MaxText's jnp.asarray(scale, dtype)), and their gradient comes back in f32.
  auto s = [&](ValueId p) { return as_dtype(b, p, DType::kF32); };
  ValueId h = b.rmsnorm(x, s(lp.pre_norm), eps).first;                // (B, T, E)
  ValueId attn;
  if (lp.wkv_a != kNoValue) {  // multi-head latent attention (engine/model/mla.h)
    attn = trace_mla_attention(b, m, lp, h, positions, segment_ids, stage_as_data);
  } else {
    ValueId q = b.checkpoint_name(
        b.constraint(b.matmul(h, w(lp.query), 2, 1, false, false, kHeads), kHeads), "query_proj");  // (B, T, H, D)
    ValueId k = b.checkpoint_name(  // (B, T, Hkv, D)
        b.constraint(b.matmul(h, w(lp.key), 2, 1, false, false, kKvHeads), kKvHeads), "key_proj");
    ValueId v = b.checkpoint_name(  // (B, T, Hkv, D)
        b.constraint(b.matmul(h, w(lp.value), 2, 1, false, false, kKvHeads), kKvHeads), "value_proj");
    if (lp.query_norm != kNoValue) {  // use_qk_norm: RMSNorm over D per head, before rope
      q = b.constraint(b.rmsnorm(q, s(lp.query_norm), eps).first, kHeads);    // (B, T, H, D)
      k = b.constraint(b.rmsnorm(k, s(lp.key_norm), eps).first, kKvHeads);    // (B, T, Hkv, D)
    }
    // MaxText's attentions.py: LLaMARotaryEmbedding for llama3.1 (adjacent pairs, scaled when
    // rope_use_scale), RotaryEmbedding otherwise.
    const kern::RopeForm form{m.llama31_rope(), m.llama31_rope() && m.rope_use_scale};
    q = b.rope(q, positions, m.rope_min_timescale, m.rope_max_timescale, false, form);
    k = b.rope(k, positions, m.rope_min_timescale, m.rope_max_timescale, false, form);
    if (repeats > 1) {  // (B, T, Hkv, D) -> (B, T, H, D): query head h reads kv head h / repeats
      k = b.constraint(b.repeat_kv(k, repeats, kHeads[2]), kHeads);
      v = b.constraint(b.repeat_kv(v, repeats, kHeads[2]), kHeads);
    }
    ValueId o = b.checkpoint_name(b.attention(q, k, v, attn_scale, segment_ids).first,
                                  "context");  // (B, T, H, D)
    attn = b.checkpoint_name(
        b.matmul(o, w(lp.out), 2, 2, false, false, kActivation), "out_proj");                   // (B, T, E)
  }
  x = b.constraint(b.add(x, attn), kActivation);

  // MLP block: x + wo(silu(wi_0 h) * wi_1 h) over rmsnorm(x).
  ValueId h2 = b.rmsnorm(x, s(lp.post_norm), eps).first;              // (B, T, E)
  // MaxText's MlpBlock: wo(silu(wi_0 h) * wi_1 h), (B, T, M) intermediates on kMlp.
  auto dense_mlp = [&](ValueId wi_0, ValueId wi_1, ValueId wo) {
    ValueId gate = b.checkpoint_name(  // (B, T, M)
        b.matmul(h2, w(wi_0), 2, 1, false, false, kMlp), "mlpwi_0");
    ValueId up = b.checkpoint_name(  // (B, T, M)
        b.matmul(h2, w(wi_1), 2, 1, false, false, kMlp), "mlpwi_1");
    ValueId act = b.constraint(b.swiglu(gate, up), kMlp);  // (B, T, M)
    return b.checkpoint_name(  // (B, T, E)
        b.matmul(act, w(wo), 2, 1, false, false, kActivation), "mlpwo");
  };
  if (lp.gate != kNoValue) {  // a routed MoE block in the MLP's place (engine/model/moe.h)
    ENG_CHECK(moe != nullptr, "llama: a MoE layer needs somewhere to put its load-balance loss");
    ValueId y = trace_moe_block(b, m, lp, h2, stage_as_data, *moe);
    // deepseek's RoutedAndSharedMoE: routed + shared_experts(h), the shared experts an
    // MlpBlock of width shared_experts x moe_mlp_dim on the same normed input.
    if (lp.shared_wi_0 != kNoValue)
      y = b.constraint(b.add(y, dense_mlp(lp.shared_wi_0, lp.shared_wi_1, lp.shared_wo)),
                       kActivation);
    ValueId out = b.add(x, y);
    b.set_remat_scope(-1);
    return b.constraint(out, kActivation);
  }
  ValueId out = b.add(x, dense_mlp(lp.wi_0, lp.wi_1, lp.wo));
  b.set_remat_scope(-1);
  return b.constraint(out, kActivation);
}

// nn.scan over the layers: layer k's weights are slice k of the stacked parameters, taken
// inside its remat region (recomputed in the backward, never kept across layers).
ValueId trace_scanned_layers(Builder& b, const ModelConfig& m, const LlamaLayerParams& stacked,
                             int64_t n, ValueId x, ValueId positions, ValueId segment_ids,
                             int32_t first_scope, bool stage_as_data, MoeOutputs* moe) {
  const int axis = static_cast<int>(m.param_scan_axis);
  for (int64_t k = 0; k < n; ++k) {
    const int32_t scope = first_scope + static_cast<int32_t>(k);
    b.set_remat_scope(scope);
    LlamaLayerParams lp = stacked;  // the same kinds, each its slice k
    for (ValueId* v : {&lp.pre_norm, &lp.query, &lp.key, &lp.value, &lp.out, &lp.post_norm,
                       &lp.wi_0, &lp.wi_1, &lp.wo, &lp.gate, &lp.query_norm, &lp.key_norm,
                       &lp.gate_bias, &lp.shared_wi_0, &lp.shared_wi_1, &lp.shared_wo, &lp.wq_a,
                       &lp.q_norm, &lp.wkv_a, &lp.kv_norm, &lp.wkv_b})
      if (*v != kNoValue) *v = b.index_in_dim(*v, axis, k);
    x = trace_decoder_layer(b, m, lp, x, positions, scope, segment_ids, stage_as_data, moe);
  }
  return x;
}

// MaxText's vocabulary tiling (num_vocab_tiling = K > 1; MaxText's vocabulary_tiling.py, read
// at commit e591f30): the loss head in K tiles of the tokens, so that one tile's (B, T/K, V)
// logits are live at a time in the forward and the backward. Each tile's kernel cast, logits
// and cross-entropy form a custom-VJP region (kAlwaysRecomputeScope) that the backward computes
// again, whatever the remat policy, and the kernel's gradient is summed over the tiles in its
// weight_dtype (MaxText's zeros_like(gathered_params) accumulator). MaxText all-gathers the lm
// head over fsdp once before the tiles; here the partitioner gathers the kernel for each tile's
// matmul (more all-gathers, none kept across the tiles) and reduce-scatters the summed gradient
// once. MaxText tiles the flattened batch x sequence; tile k here is the tokens t = j K + k of
// every row: the same per-device work for any batch sharding, no relayout when the sequence is
// sharded, and the same summed loss. Returns xent (B, T).
ValueId tiled_cross_entropy(Builder& b, const ModelConfig& m, ValueId y, ValueId kernel,
                            ValueId targets, const Logical& logits_axes) {
  const int64_t K = m.num_vocab_tiling;
  const Shape ys = b.info(y).shape;  // (B, T, E)
  const int64_t B = ys[0], T = ys[1], E = ys[2];
  ENG_CHECK(T % K == 0, "num_vocab_tiling {} does not divide the sequence {}", K, T);
  const ValueId w = kernel;  // (E, V) in weight_dtype, as the parameter is sharded
  const ValueId y4 = b.reshape(y, Shape{B, T / K, K, E});
  const ValueId t4 = b.reshape(targets, Shape{B, T / K, K});
  const Logical tile_axes = {"activation_embed_and_logits_batch", "activation_length",
                             "activation_embed"};
  std::vector<ValueId> parts;
  b.set_remat_scope(kAlwaysRecomputeScope);
  for (int64_t k = 0; k < K; ++k) {
    const ValueId yk = b.constraint(b.index_in_dim(y4, 2, k), tile_axes);  // (B, T/K, E)
    const ValueId logits = b.constraint(
        b.matmul(yk, as_dtype(b, w, m.dtype), 2, 1, false, false, logits_axes), logits_axes);
    const ValueId xent = b.softmax_cross_entropy(logits, b.index_in_dim(t4, 2, k)).first;
    parts.push_back(b.reshape(xent, Shape{B, T / K, 1}));
  }
  b.set_remat_scope(-1);
  return b.reshape(b.concat(std::move(parts), 2), Shape{B, T});  // token t = j K + k
}

LossValues trace_llama_loss(Builder& b, const ModelConfig& m, const LlamaParams& p,
                            const BatchArgs& batch) {
  const Logical kActivation = {"activation_batch", "activation_norm_length", "activation_embed"};
  const Logical kLogits = {"activation_embed_and_logits_batch", "activation_length",
                           "activation_vocab"};
  const double eps = m.normalization_layer_epsilon;

  // Projections carry MaxText's explicit-mode out_sharding (logical names; used by the
  // partitioner to settle otherwise ambiguous matmuls); constraints are MaxText's
  // maybe_shard_with_logical (Builder::constraint: size-1 axes dropped, a reshard).

  // Token embedding: (B, T) ids -> (B, T, E).
  // use_iota_embed: MaxText PR #3922 item 4: the one-hot (B, T, V) f32 temporary is only
  // worth it while small; above iota_embed_max_bytes the model falls back to the gather.
  ValueId x;
  const Shape& ids = b.info(batch.inputs).shape;
  const int64_t one_hot_bytes = ids.numel() * m.vocab_size * dtype_size(DType::kF32);
  if (m.use_iota_embed && one_hot_bytes <= m.iota_embed_max_bytes) {
    ValueId onehot = as_dtype(b, b.one_hot(batch.inputs, m.vocab_size, "vocab"), m.dtype);  // (B, T, V)
    x = b.matmul(onehot, as_dtype(b, p.embedding, m.dtype), 2, 1, false, false, kActivation);  // (B,T,V).(V,E)
  } else {
    x = b.embed_lookup(as_dtype(b, p.embedding, m.dtype), batch.inputs);  // MaxText Embed: table as dtype
  }
  x = b.constraint(x, kActivation);

  // Remat tags (engine/ir/remat.h): each layer is a remat region (MaxText's nn.remat around
  // the decoder layer); its input is tagged decoder_layer_input and its output, the next
  // layer's input, is emitted outside the region (always saved, like a scan carry).
  const ValueId seg = m.attention_segment_ids ? batch.inputs_segmentation : kNoValue;
  MoeOutputs moe;
  if (m.pipeline_stages > 1) {
    x = trace_pipeline_decoder(b, m, p, x, batch.inputs_position, seg);
  } else if (m.scan_layers) {  // each group scanned on its own (deepseek: dense, then MoE)
    int32_t scope = 0;
    for (const LayerGroup& g : layer_groups(m)) {
      const LlamaLayerParams& stacked =
          g.moe || m.decoder_block != "deepseek" ? p.stacked : p.stacked_dense;
      x = trace_scanned_layers(b, m, stacked, g.n, x, batch.inputs_position, seg, scope, false,
                               &moe);
      scope += static_cast<int32_t>(g.n);
    }
  } else {
    for (size_t l = 0; l < p.layers.size(); ++l)
      x = trace_decoder_layer(b, m, p.layers[l], x, batch.inputs_position, static_cast<int32_t>(l),
                              seg, false, &moe);
  }
  ValueId y = b.rmsnorm(x, as_dtype(b, p.decoder_norm, DType::kF32), eps).first;  // (B, T, E)
  ValueId logits = kNoValue;  // (B, T, V); tiled below instead with num_vocab_tiling
  if (m.num_vocab_tiling <= 1)
    logits = b.constraint(
        b.matmul(y, as_dtype(b, p.logits_dense, m.dtype), 2, 1, false, false, kLogits), kLogits);
  // MaxText's cast_logits_to_fp32 (default true) is the loss's own: softmax_cross_entropy reads
  // bf16 logits in f32 and returns bf16 dlogits (op.h), as XLA fuses the convert into its
  // consumers; a separate convert would keep an f32 (B, T, V) copy alive until the backward.
  ValueId targets = batch.targets, targets_segmentation = batch.targets_segmentation;
  if (m.pipeline_stages > 1) {  // the rows in the order the pipeline hands them over
    targets = pipeline_output_rows(b, m, targets);
    targets_segmentation = pipeline_output_rows(b, m, targets_segmentation);
  }
  const ValueId xent =  // (B, T)
      logits != kNoValue
          ? b.softmax_cross_entropy(logits, targets).first
          : tiled_cross_entropy(b, m, y, p.logits_dense, targets, kLogits);
  auto [loss, total_weights] = b.masked_mean_loss(xent, targets_segmentation);
  LossValues out;
  out.loss = loss;
  out.total_weights = total_weights;
  if (!moe.lb.empty()) {  // MaxText train.py: loss += mean over layers of moe_lb_loss
    out.moe_lb_loss = mean_lb_loss(b, moe);
    out.loss = b.add(loss, out.moe_lb_loss);
    out.moe_load = moe.load;
  }
  return out;
}

int64_t kernel_fan_in(const ValueInfo& param) {
  const std::string& n = param.name;
  auto ends_with = [&](const char* s) {
    std::string_view suffix(s);
    return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  // out (H, D, E) contracts H and D; every other kernel contracts its first dim.
  if (ends_with("self_attention/out/kernel")) return param.shape.prod(0, 2);
  if (const int64_t f = moe_kernel_fan_in(param); f > 0) return f;
  return param.shape[0];
}

namespace {
// Counter-based generator: the value at (seed, path, index) never depends on order or threads.
inline uint64_t counter_hash(uint64_t key, uint64_t i) { return hash_mix(key, i); }
inline double uniform01(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }
// Standard normal by Box-Muller from two counter draws.
inline double normal_at(uint64_t key, uint64_t i) {
  double u1 = uniform01(counter_hash(key, 2 * i)), u2 = uniform01(counter_hash(key, 2 * i + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
}  // namespace

namespace {
// The layer dim of a scanned parameter (logical "layers", not the pipeline's (S, lps, ...)
// form whose second dim has no name), or -1.
int scanned_axis(const ValueInfo& param) {
  const auto& lg = param.logical;
  // deepseek's groups: params/decoder/dense_layers/..., moe_layers/... (never pipelined here).
  for (const char* group : {"dense_layers", "moe_layers"}) {
    if (!param.name.starts_with(fmt::format("params/decoder/{}/", group))) continue;
    const auto it = std::find(lg.begin(), lg.end(), std::string(group));
    return it == lg.end() ? -1 : static_cast<int>(it - lg.begin());
  }
  if (!pipeline_param_subpath(param.name)) return -1;
  if (pipeline_layer_dims(param) == 3) return -1;  // a circular pipeline's (R, S, lps, ...)
  for (size_t i = 0; i < lg.size(); ++i) {
    if (lg[i] != "layers") continue;
    return i == 0 && lg.size() > 1 && lg[1].empty() ? -1 : static_cast<int>(i);
  }
  return -1;
}

// The layer dim of a layers_outside_pipeline weight (its logical name), or -1.
int outside_axis(const ValueInfo& param) {
  const auto& lg = param.logical;
  const auto it = std::find(lg.begin(), lg.end(), std::string(kLayersOutsidePipeline));
  return it == lg.end() ? -1 : static_cast<int>(it - lg.begin());
}
}  // namespace

void init_param(const ValueInfo& param, uint64_t seed, float* out, int64_t pipelined_layers,
                bool zero_centered_norms) {
  // Scanned weights (..., L, ...): slice l is layer l's own (unscanned) values, so both
  // layouts start from the same weights. layers_outside_pipeline: slice k is layer P + k.
  const std::optional<std::string> outside = outside_pipeline_subpath(param.name);
  ENG_CHECK(!outside || pipelined_layers > 0,
            "init_param: {} needs the number of pipelined layers", param.name);
  if (const int a = outside ? outside_axis(param) : scanned_axis(param); a >= 0) {
    int64_t outer = param.shape.prod(0, a), L = param.shape[a];
    int64_t inner = param.shape.prod(a + 1, param.shape.rank());
    ValueInfo layer = param;
    std::vector<int64_t> dims(param.shape.dims().begin(), param.shape.dims().end());
    dims.erase(dims.begin() + a);
    layer.shape = Shape(dims);
    std::vector<float> buf(static_cast<size_t>(outer * inner));
    for (int64_t l = 0; l < L; ++l) {
      layer.name = outside
                       ? fmt::format("params/decoder/layers_{}/{}", pipelined_layers + l, *outside)
                       : *unscanned_name(param.name, l);
      init_param(layer, seed, buf.data(), 0, zero_centered_norms);
      for (int64_t o = 0; o < outer; ++o)
        std::copy_n(buf.data() + o * inner, inner, out + (o * L + l) * inner);
    }
    return;
  }
  // Pipeline weights ([R,] S, layers_per_stage, ...): slice [r, s, j] is layer
  // r * S * lps + s * lps + j (the leading dims' row-major index), with that layer's own
  // (unstacked) values, so a pipeline run starts where the sequential does.
  if (std::optional<std::string> sub = pipeline_param_subpath(param.name)) {
    const int lead = pipeline_layer_dims(param);
    ValueInfo layer = param;
    layer.shape = param.shape.slice(lead, param.shape.rank());
    const int64_t n = layer.shape.numel(), L = param.shape.prod(0, lead);
    for (int64_t l = 0; l < L; ++l) {
      layer.name = fmt::format("params/decoder/layers_{}/{}", l, *sub);
      init_param(layer, seed, out + l * n, 0, zero_centered_norms);
    }
    return;
  }
  const int64_t n = param.shape.numel();
  const uint64_t key = hash_mix(hash_bytes(param.name), seed);
  const std::string& name = param.name;
  auto ends_with = [&](std::string_view s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("/scale") || ends_with("/bias")) {  // flax's ones / zeros; Gpt3LayerNorm: zeros
    const float v = ends_with("/scale") && !zero_centered_norms ? 1.0f : 0.0f;
    for (int64_t i = 0; i < n; ++i) out[i] = v;
    return;
  }
  if (name.find("token_embedder/embedding") != std::string::npos ||
      name.find("position_embedder/embedding") != std::string::npos) {  // normal(1.0)
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(normal_at(key, i));
    return;
  }
  // jax.nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal"): a normal
  // truncated to [-2, 2], rescaled so the variance is 1 / fan_in.
  const double stddev = std::sqrt(1.0 / static_cast<double>(kernel_fan_in(param))) / 0.87962566103423978;
  for (int64_t i = 0; i < n; ++i) {
    double z;
    uint64_t j = static_cast<uint64_t>(i) << 8;  // redraw (bounded) until |z| <= 2
    do {
      z = normal_at(key, j++);
    } while (std::fabs(z) > 2.0);
    out[i] = static_cast<float>(z * stddev);
  }
}

}  // namespace eng
