// engine/model/moe.cpp: the routed MoE block (engine/model/moe.h): the dense dispatch with
// capacity and the dropless dispatch.
#include "engine/model/moe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include <fmt/format.h>

namespace eng {

namespace {

using Logical = std::vector<std::string>;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t mlp_width(const ModelConfig& m) {
  return m.moe.moe_mlp_dim > 0 ? m.moe.moe_mlp_dim : m.mlp_dim;
}

}  // namespace

Status validate_moe(const ModelConfig& m) {
  const MoeConfig& c = m.moe;
  if (c.num_experts < 1)
    return invalid_argument("model {}: num_experts must be >= 1, got {}", m.name, c.num_experts);
  if (c.shared_experts < 0)
    return invalid_argument("model {}: shared_experts must be >= 0, got {}", m.name,
                            c.shared_experts);
  if (c.first_num_dense_layers < 0 || c.first_num_dense_layers >= m.num_decoder_layers)
    return invalid_argument("model {}: first_num_dense_layers {} must be between 0 and "
                            "num_decoder_layers {} - 1 (the layers after the dense ones are MoE)",
                            m.name, c.first_num_dense_layers, m.num_decoder_layers);
  const bool deepseek = m.decoder_block == "deepseek";
  if (!deepseek && (c.shared_experts != 0 || c.first_num_dense_layers != 0 || c.routed_bias))
    return invalid_argument(
        "model {}: shared_experts={}, first_num_dense_layers={} and routed_bias={} are MaxText's "
        "deepseek decoder's (decoder_block=deepseek); decoder_block {} has none of them",
        m.name, c.shared_experts, c.first_num_dense_layers, c.routed_bias, m.decoder_block);
  if (c.routed_bias_update_rate < 0 || (c.routed_bias_update_rate > 0 && !c.routed_bias))
    return invalid_argument(
        "model {}: routed_bias_update_rate={:g} needs to be >= 0 and, when > 0, routed_bias=true "
        "(it updates the router's gate/bias after each step), got routed_bias={}",
        m.name, c.routed_bias_update_rate, c.routed_bias);
  if (deepseek && !c.enabled())
    return invalid_argument("model {}: decoder_block deepseek needs num_experts > 1 (its layers "
                            "after the first_num_dense_layers {} are MoE), got num_experts {}",
                            m.name, c.first_num_dense_layers, c.num_experts);
  if (!c.enabled()) return ok_status();
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_experts)
    return invalid_argument("model {}: num_experts_per_tok {} must be between 1 and num_experts {}",
                            m.name, c.num_experts_per_tok, c.num_experts);
  // sparse_matmul: the dropless dispatch (MaxText's default; capacity_factor not read, as
  // MaxText's sparse_matmul ignores it); with expert parallelism its rows move by ragged
  // all-to-all (moe_ep_dispatch / moe_ep_return, lowered by the partitioner).
  if (!c.sparse_matmul && !(c.capacity_factor > 0))
    return invalid_argument(
        "model {}: sparse_matmul=false needs capacity_factor > 0 (the dense dispatch's slots per "
        "expert are ceil(max_target_length x num_experts_per_tok / num_experts) x "
        "capacity_factor), got capacity_factor={:g} with num_experts={}",
        m.name, c.capacity_factor, c.num_experts);
  if (c.routed_score_func != "" && c.routed_score_func != "softmax" &&
      c.routed_score_func != "sigmoid")
    return invalid_argument("model {}: routed_score_func '{}' is not one of '', softmax, sigmoid",
                            m.name, c.routed_score_func);
  if (m.mlp_activations != std::vector<std::string>{"silu", "linear"})
    return unimplemented("model {}: experts support only mlp_activations [silu, linear]", m.name);
  return ok_status();
}

int64_t moe_capacity(const MoeConfig& c, int64_t S) {
  const double per_expert = std::ceil(static_cast<double>(S * c.num_experts_per_tok) /
                                      static_cast<double>(c.num_experts));
  return static_cast<int64_t>(std::max(per_expert * c.capacity_factor, c.capacity_factor));
}

std::vector<LayerWeight> moe_layer_weights(const ModelConfig& m) {
  const int64_t E = m.moe.num_experts, D = m.emb_dim, H = mlp_width(m);
  // MaxText: ("exp", "embed_moe", "mlp_moe"); shard_exp_on_fsdp: ("embed_moe", None, "mlp_moe").
  const bool on_fsdp = m.moe.shard_exp_on_fsdp;
  const Logical wi = on_fsdp ? Logical{"embed_moe", "", "mlp_moe"}
                             : Logical{"exp", "embed_moe", "mlp_moe"};
  const Logical wo = on_fsdp ? Logical{"embed_moe", "mlp_moe", ""}
                             : Logical{"exp", "mlp_moe", "embed_moe"};
  // MaxText's mixtral.py names the block MoeBlock_0, qwen3.py's Qwen3MoeDecoderLayer moe_block.
  const bool qwen3 = m.decoder_block == "qwen3_moe";
  if (m.decoder_block == "deepseek") {
    // deepseek.py's DeepSeekMoELayer: RoutedAndSharedMoE DeepSeekMoeBlock_0 holding the
    // routed RoutedMoE MoeBlock_0 (its GateLogit's bias: the kernel's last axis, None) and
    // the shared experts' MlpBlock (wi_0/wi_1 (embed, mlp), wo (mlp, embed)).
    const int64_t S = m.moe.shared_experts * H;
    std::vector<LayerWeight> w = {
        {"DeepSeekMoeBlock_0/MoeBlock_0/wi_0", {E, D, H}, wi},
        {"DeepSeekMoeBlock_0/MoeBlock_0/wi_1", {E, D, H}, wi},
        {"DeepSeekMoeBlock_0/MoeBlock_0/wo", {E, H, D}, wo},
        {"DeepSeekMoeBlock_0/MoeBlock_0/gate/kernel", {D, E}, {"embed_moe", ""}}};
    if (m.moe.routed_bias) w.push_back({"DeepSeekMoeBlock_0/MoeBlock_0/gate/bias", {E}, {""}});
    if (S > 0) {
      w.push_back({"DeepSeekMoeBlock_0/shared_experts/wi_0/kernel", {D, S}, {"embed", "mlp"}});
      w.push_back({"DeepSeekMoeBlock_0/shared_experts/wi_1/kernel", {D, S}, {"embed", "mlp"}});
      w.push_back({"DeepSeekMoeBlock_0/shared_experts/wo/kernel", {S, D}, {"mlp", "embed"}});
    }
    return w;
  }
  return {{qwen3 ? "moe_block/wi_0" : "MoeBlock_0/wi_0", {E, D, H}, wi},
          {qwen3 ? "moe_block/wi_1" : "MoeBlock_0/wi_1", {E, D, H}, wi},
          {qwen3 ? "moe_block/wo" : "MoeBlock_0/wo", {E, H, D}, wo},
          {qwen3 ? "moe_block/gate/kernel" : "MoeBlock_0/gate/kernel", {D, E}, {"embed_moe", ""}}};
}

int64_t moe_kernel_fan_in(const ValueInfo& param) {
  const std::string& n = param.name;
  bool expert = false;
  for (const char* block : {"MoeBlock_0/", "moe_block/"})
    for (const char* w : {"wi_0", "wi_1", "wo"})
      expert = expert || ends_with(n, std::string(block) + w);
  if (!expert || param.shape.rank() != 3) return 0;
  return param.shape[0] * param.shape[2];
}

namespace {

// The routing attributes shared by moe_route and moe_top_k (op.h), from MaxText's get_topk.
OpAttrs route_attrs(const ModelConfig& m, int64_t B, int64_t S) {
  const MoeConfig& c = m.moe;
  const int64_t E = c.num_experts;
  OpAttrs ra;
  ra.size = c.num_experts_per_tok;
  ra.dim = c.routed_score_func == "softmax" ? 1 : c.routed_score_func == "sigmoid" ? 2 : 0;
  // MaxText's get_topk: the deepseek decoder's weights are the scores themselves
  // (deepseek_scale_weights: divided by their sum for sigmoid, times routed_scaling_factor;
  // norm_topk_prob not read); every other decoder's a softmax over the top-k scores, then
  // norm_topk_prob (routed_scaling_factor not read).
  const bool deepseek = m.decoder_block == "deepseek";
  ra.dim2 = deepseek ? 1 : 0;
  ra.inverse = c.norm_topk_prob && !deepseek;
  ra.scale = deepseek ? c.routed_scaling_factor : 1.0;
  // mean_{b,e}(density * density_prob) * E^2 * weight with density = count / S and
  // density_prob = sum_s p / S: E * weight / (B * S^2) times sum_{b,e} count * sum_s p.
  ra.eps = c.load_balance_loss_weight * static_cast<double>(E) /
           (static_cast<double>(B) * static_cast<double>(S) * static_cast<double>(S));
  return ra;
}

// MaxText's sparse_matmul (layers/moe.py at e591f30: permute, gmm / jax.lax.ragged_dot over
// the experts' row groups, unpermute with the weighted sum over k). Each row b (a sequence)
// sorts its own S x k choices by expert: MaxText sorts each device's local tokens inside its
// shard_map; per token the result is the same, and rows split over data / fsdp need no
// traffic. Nothing is dropped (with expert parallelism: unless ragged_buffer_factor > 0 and a
// receive buffer overflows, as MaxText's).
//   weights, order, rank, groups, lb, load = moe_top_k(logits)   (B,S,k) (B,N) (B,N) (B,E)
//   x_s = moe_ep_dispatch(moe_permute(h, order, rank), groups)     (B,N,M)  N = S k
//   y_s = ragged_dot(silu(ragged_dot(x_s, wi_0)) * ragged_dot(x_s, wi_1), wo)   (B,N,M)
//   out = moe_permute(moe_ep_return(y_s, groups), order, rank, weights, inverse)  (B,S,M)
// moe_ep_dispatch / moe_ep_return are identities on values; with the experts split over
// `expert` (`exp`) the partitioner makes them MaxText's ragged all-to-alls (op.h), and the
// ragged_dots in between run on each device's own experts.
ValueId trace_dropless(Builder& b, const ModelConfig& m, const LlamaLayerParams& lp, ValueId x,
                       ValueId logits, const std::function<Logical(Logical)>& names,
                       const std::function<ValueId(ValueId)>& w,
                       const std::function<ValueId(ValueId)>& f32, MoeOutputs& out) {
  const Shape hs = b.info(x).shape;
  std::vector<ValueId> route_in = {logits};
  if (lp.gate_bias != kNoValue) route_in.push_back(f32(lp.gate_bias));  // routed_bias
  const std::vector<ValueId> r = b.emit(OpKind::kMoeTopK, route_in, route_attrs(m, hs[0], hs[1]));
  const ValueId weights = r[0], order = r[1], rank = r[2], groups = r[3];
  out.lb.push_back(r[4]);
  out.load.push_back(r[5]);
  OpAttrs pa;
  pa.size = m.moe.num_experts_per_tok;
  OpAttrs ep;  // MaxText's expert-parallel dispatch (op.h kMoeEpDispatch)
  ep.size = m.moe.num_experts_per_tok;
  ep.scale = m.moe.ragged_buffer_factor;
  ep.logical = {std::optional<std::string>("exp")};
  const ValueId sorted =
      b.emit(OpKind::kMoeEpDispatch, {b.emit(OpKind::kMoePermute, {x, order, rank}, pa)[0], groups},
             ep)[0];
  auto gmm = [&](ValueId a, ValueId wt, const char* name) {
    return b.checkpoint_name(b.emit(OpKind::kRaggedDot, {a, w(wt), groups})[0], name);
  };
  const ValueId act = b.swiglu(gmm(sorted, lp.wi_0, "mlpwi_0"), gmm(sorted, lp.wi_1, "mlpwi_1"));
  const ValueId y = b.emit(OpKind::kMoeEpReturn, {gmm(act, lp.wo, "mlpwo"), groups}, ep)[0];
  pa.inverse = true;
  const ValueId o = b.emit(OpKind::kMoePermute, {y, order, rank, weights}, pa)[0];
  return b.constraint(o, names({"activation_batch", "activation_norm_length", "activation_embed"}));
}

}  // namespace

ValueId trace_moe_block(Builder& b, const ModelConfig& m, const LlamaLayerParams& lp, ValueId h,
                        bool stage_as_data, MoeOutputs& out) {
  auto names = [&](Logical l) {
    if (stage_as_data)
      for (std::string& n : l) n = pp_act_as_dp_name(n);
    return l;
  };
  const MoeConfig& c = m.moe;
  const Shape hs = b.info(h).shape;  // (B, S, emb), global
  const int64_t B = hs[0], S = hs[1], C = moe_capacity(c, S);
  // In the model's dtype, as MaxText's RoutedMoE (layers/moe.py at e591f30: GateLogit and the
  // expert kernels cast to dtype, float32_gate_logits false; the routing's softmaxes in f32):
  // bf16 activations, gate logits, combine weights and expert GEMMs (f32 accumulation), each
  // weight cast to dtype where it is used; the router bias, the load-balance loss and the load
  // in f32. The dense dispatch has bf16 kernels (engine/ir/program.cpp kBf16Kernels): no f32
  // copy of the dispatched tokens or the expert weights. The dropless dispatch's ops
  // (moe_top_k, moe_permute, ragged_dot and their VJPs) have none: in bf16 the executor runs
  // them widened (executor.cpp run_widened), through f32 copies of the permuted tokens, the
  // whole (E, K, P) expert weight and the output, in the per-device widening scratch, which is
  // not in the compiler's temps (docs/sharding.md "Dropless dispatch", docs/precision.md).
  const DType dtype = b.info(h).dtype;
  auto w = [&](ValueId v) { return b.info(v).dtype == dtype ? v : b.convert(v, dtype); };
  auto f32 = [&](ValueId v) { return b.info(v).dtype == DType::kF32 ? v : b.convert(v, DType::kF32); };
  const ValueId x = h;

  // Gate: (B, S, emb) . (emb, E) -> (B, S, E), MaxText's constraint on the logits.
  const Logical kLogits = names({"activation_batch", "activation_norm_length", ""});
  ValueId logits = b.constraint(b.matmul(x, w(lp.gate), 2, 1, false, false, kLogits), kLogits);

  if (c.sparse_matmul) return trace_dropless(b, m, lp, x, logits, names, w, f32, out);
  OpAttrs ra = route_attrs(m, B, S);
  ra.start = C;
  std::vector<ValueId> route_in = {logits};
  if (lp.gate_bias != kNoValue) route_in.push_back(f32(lp.gate_bias));  // routed_bias
  std::vector<ValueId> routed = b.emit(OpKind::kMoeRoute, route_in, ra);
  const ValueId combine = b.constraint(
      routed[0], names({"activation_batch", "activation_norm_length", "", ""}));  // (B,S,E,C)
  out.lb.push_back(routed[1]);
  out.load.push_back(routed[2]);

  // MaxText's dense_matmul einsums; the expert-major tensors on activation_exp.
  const std::string batch = c.moe_dispatch_no_expert_sharding ? "activation_batch_no_exp"
                                                              : "activation_batch_moe";
  const Logical kDispatch = names({"activation_exp", batch, "", "activation_embed"});
  const Logical kMlp = names({"activation_exp", batch, "", "activation_mlp"});
  OpAttrs mask;
  mask.raw = true;
  ValueId dispatch = b.constraint(b.emit(OpKind::kMoeDispatch, {combine, x}, mask)[0], kDispatch);
  auto expert = [&](ValueId a, ValueId wt, const Logical& l, const char* name) {
    return b.checkpoint_name(b.constraint(b.emit(OpKind::kExpertMatmul, {a, w(wt)})[0], l), name);
  };
  ValueId w0 = expert(dispatch, lp.wi_0, kMlp, "mlpwi_0");  // (E, B, C, H)
  ValueId w1 = expert(dispatch, lp.wi_1, kMlp, "mlpwi_1");
  ValueId act = b.constraint(b.swiglu(w0, w1), kMlp);
  ValueId y = expert(act, lp.wo, kDispatch, "mlpwo");  // (E, B, C, emb)
  ValueId o = b.emit(OpKind::kMoeCombine, {combine, y})[0];  // (B, S, emb)
  return b.constraint(o, names({"activation_batch", "activation_norm_length", "activation_embed"}));
}

void apply_routed_bias_updates(Builder& b, const ModelConfig& m, const LlamaParams& p,
                               const std::vector<ValueId>& loads, int64_t choices,
                               std::vector<ValueId>& new_params) {
  const MoeConfig& c = m.moe;
  if (!c.routed_bias || !(c.routed_bias_update_rate > 0)) return;
  const int64_t E = c.num_experts;
  // calculate_load_balance_updates: sign(total / E - bincount(top_k_indices)) x rate, the
  // counts over the whole batch (load row 0: choices before dropping).
  auto update = [&](ValueId load) {
    const ValueId count = b.index_in_dim(load, 0, 0);                      // (E)
    const ValueId ones = b.compare(count, count, CompareDirection::kEq);   // (E) of 1
    const ValueId mean = b.scale(ones, static_cast<double>(choices) / static_cast<double>(E));
    const ValueId above = b.compare(mean, count, CompareDirection::kGt);
    const ValueId below = b.compare(mean, count, CompareDirection::kLt);
    return b.scale(b.add(above, b.scale(below, -1.0)), c.routed_bias_update_rate);
  };
  auto at = [&](ValueId param) {
    const auto it = std::find(p.all.begin(), p.all.end(), param);
    ENG_CHECK(it != p.all.end(), "routed_bias: gate/bias is not a parameter");
    return static_cast<size_t>(it - p.all.begin());
  };
  if (m.scan_layers) {  // one (E, L) / (L, E) bias: the layers' updates stacked at the scan axis
    ENG_CHECK(p.stacked.gate_bias != kNoValue, "routed_bias: no stacked gate/bias");
    const int axis = static_cast<int>(m.param_scan_axis);
    std::vector<ValueId> parts;
    for (ValueId load : loads)
      parts.push_back(b.reshape(update(load), axis == 0 ? Shape{1, E} : Shape{E, 1}));
    const size_t i = at(p.stacked.gate_bias);
    new_params[i] = b.add(new_params[i], parts.size() == 1 ? parts[0] : b.concat(parts, axis));
    return;
  }
  size_t layer = 0;  // the MoE layers in order, as their loads
  for (const LlamaLayerParams& lp : p.layers) {
    if (lp.gate_bias == kNoValue) continue;
    ENG_CHECK(layer < loads.size(), "routed_bias: more biases than MoE layers");
    const size_t i = at(lp.gate_bias);
    new_params[i] = b.add(new_params[i], update(loads[layer++]));
  }
}

ValueId mean_lb_loss(Builder& b, const MoeOutputs& out) {
  ValueId sum = out.lb[0];
  for (size_t l = 1; l < out.lb.size(); ++l) sum = b.add(sum, out.lb[l]);
  return out.lb.size() == 1 ? sum : b.scale(sum, 1.0 / static_cast<double>(out.lb.size()));
}

namespace {
struct MoePreset {
  const char* name;
  int64_t vocab, emb, heads, kv_heads, head_dim, mlp, layers, experts, per_tok;
  double rope_max_timescale;
  // qwen3_moe (MaxText's configs/models/qwen3-*.yml): decoder_block qwen3_moe, use_qk_norm,
  // norm_topk_prob, its own base_moe_mlp_dim, eps and load-balance weight.
  bool qwen3 = false;
  int64_t moe_mlp = 0;  // 0: mlp
  double eps = 1e-5, load_balance_loss_weight = 0.0;
};
// mixtral-tiny: llama-tiny's shapes with 4 experts, top-2, each expert llama-tiny's MLP.
// mixtral-8x7b / -8x22b: MaxText's configs/models/mixtral-*.yml.
// qwen3-235b-a22b: MaxText's configs/models/qwen3-235b-a22b.yml key for key (commit e591f30).
// qwen3-tiny: this project's trainable qwen3_moe: byte vocabulary, 2 layers, GQA 4/2 with
// head_dim 48 != emb / heads, qk norm, 4 experts top-2 with norm_topk_prob.
constexpr MoePreset kMoePresets[] = {
    {"mixtral-tiny", 256, 256, 4, 4, 64, 704, 4, 4, 2, 10000.0},
    {"mixtral-8x7b", 32000, 4096, 32, 8, 128, 14336, 32, 8, 2, 1e6},
    {"mixtral-8x22b", 32768, 6144, 48, 8, 128, 16384, 56, 8, 2, 1e6},
    {"qwen3-235b-a22b", 151936, 4096, 64, 4, 128, 1536, 94, 128, 8, 5e6, true, 1536, 1e-6, 0.001},
    {"qwen3-tiny", 256, 128, 4, 2, 48, 256, 2, 4, 2, 1e6, true, 256, 1e-6, 0.001},
};
}  // namespace

std::vector<std::string> moe_preset_names() {
  std::vector<std::string> names;
  for (const MoePreset& p : kMoePresets) names.push_back(p.name);
  return names;
}

std::optional<ModelConfig> moe_model_preset(const std::string& name) {
  for (const MoePreset& p : kMoePresets) {
    if (name != p.name) continue;
    ModelConfig m;
    m.name = p.name;
    m.vocab_size = p.vocab;
    m.emb_dim = p.emb;
    m.num_query_heads = p.heads;
    m.num_kv_heads = p.kv_heads;
    m.head_dim = p.head_dim;
    m.mlp_dim = p.mlp;
    m.num_decoder_layers = p.layers;
    m.rope_max_timescale = p.rope_max_timescale;
    m.moe.num_experts = p.experts;
    m.moe.num_experts_per_tok = p.per_tok;
    m.moe.moe_mlp_dim = p.moe_mlp > 0 ? p.moe_mlp : p.mlp;
    m.normalization_layer_epsilon = p.eps;
    m.moe.load_balance_loss_weight = p.load_balance_loss_weight;
    if (p.qwen3) {
      m.decoder_block = "qwen3_moe";
      m.use_qk_norm = true;
      m.moe.norm_topk_prob = true;
    }
    return m;
  }
  return std::nullopt;
}

double moe_ffn_flops(const ModelConfig& m, double B, double S) {
  const double E = static_cast<double>(m.emb_dim), H = static_cast<double>(mlp_width(m));
  const double n_act = static_cast<double>(m.mlp_activations.size());
  const double ffn = 2 * B * S * H * E * n_act + 2 * B * S * H * E;
  const double gate = 2 * B * S * E * static_cast<double>(m.moe.num_experts);
  const double routed = gate + ffn * static_cast<double>(m.moe.num_experts_per_tok);
  if (m.decoder_block != "deepseek") return routed;
  // calculate_routed_and_shared_ffn_tflops_per_device: dense layers' ffn(mlp_dim), MoE layers'
  // gate + shared_experts x ffn(moe_mlp) + k x ffn(moe_mlp); here per layer (the caller
  // multiplies by num_decoder_layers).
  const double Md = static_cast<double>(m.mlp_dim);
  const double dense = 2 * B * S * Md * E * n_act + 2 * B * S * Md * E;
  const double L = static_cast<double>(m.num_decoder_layers);
  const double d = static_cast<double>(m.moe.first_num_dense_layers);
  const double moe_layer = routed + ffn * static_cast<double>(m.moe.shared_experts);
  return (dense * d + moe_layer * (L - d)) / L;
}

}  // namespace eng
