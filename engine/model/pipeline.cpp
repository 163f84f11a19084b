// engine/model/pipeline.cpp: the pipeline schedule traced as global ops (see pipeline.h).
#include "engine/model/pipeline.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "engine/model/llama.h"

namespace eng {

namespace {
constexpr const char* kPrefix = "params/decoder/layers/";
}  // namespace

std::optional<std::string> pipeline_param_subpath(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  return name.substr(prefix.size());
}

Status validate_pipeline(int64_t num_layers, int64_t stages, int64_t microbatches,
                         int64_t global_batch) {
  if (stages <= 1) return ok_status();
  if (num_layers % stages != 0)
    return invalid_argument("pipeline: num_decoder_layers {} is not divisible by the {} pipeline "
                            "stages (ici_pipeline_parallelism)",
                            num_layers, stages);
  if (microbatches < 1 || global_batch % microbatches != 0)
    return invalid_argument("pipeline: num_pipeline_microbatches {} does not divide the global "
                            "batch {}",
                            microbatches, global_batch);
  if (microbatches % stages != 0)
    return invalid_argument("pipeline: num_pipeline_microbatches {} is not divisible by the {} "
                            "pipeline stages",
                            microbatches, stages);
  return ok_status();
}

LlamaLayerParams declare_pipeline_layer_params(Builder& b, const ModelConfig& m,
                                               std::vector<ValueId>& all) {
  const int64_t E = m.emb_dim, H = m.num_query_heads, Hkv = m.num_kv_heads, D = m.head_dim,
                M = m.mlp_dim;
  const int64_t S = m.pipeline_stages, lps = m.num_decoder_layers / S;
  auto param = [&](const std::string& sub, std::vector<int64_t> dims,
                   std::vector<std::string> logical) {
    dims.insert(dims.begin(), {S, lps});
    logical.insert(logical.begin(), {"layers", ""});
    ValueId v = b.argument(kPrefix + sub, Shape(std::move(dims)), m.weight_dtype, std::move(logical),
                           ArgRole::kParam);
    all.push_back(v);
    return v;
  };
  LlamaLayerParams lp;
  lp.pre_norm = param("pre_self_attention_layer_norm/scale", {E}, {"norm"});
  lp.query = param("self_attention/query/kernel", {E, H, D}, {"embed", "q_heads", "kv"});
  lp.key = param("self_attention/key/kernel", {E, Hkv, D}, {"embed", "kv_heads", "kv_head_dim"});
  lp.value =
      param("self_attention/value/kernel", {E, Hkv, D}, {"embed", "kv_heads", "kv_head_dim"});
  lp.out = param("self_attention/out/kernel", {H, D, E}, {"heads", "kv", "embed"});
  lp.post_norm = param("post_self_attention_layer_norm/scale", {E}, {"norm"});
  lp.wi_0 = param("mlp/wi_0/kernel", {E, M}, {"embed", "mlp"});
  lp.wi_1 = param("mlp/wi_1/kernel", {E, M}, {"embed", "mlp"});
  lp.wo = param("mlp/wo/kernel", {M, E}, {"mlp", "embed"});
  return lp;
}

ValueId trace_pipeline_decoder(Builder& b, const ModelConfig& m, const LlamaParams& p, ValueId x,
                               ValueId positions) {
  const Shape xs = b.info(x).shape;
  const int64_t B = xs[0], T = xs[1], E = xs[2];
  const int64_t S = m.pipeline_stages, M = m.pipeline_microbatches;
  const int64_t lps = m.num_decoder_layers / S, mb = B / M;
  ENG_CHECK(validate_pipeline(m.num_decoder_layers, S, M, B).ok(),
            "pipeline: unvalidated shape (layers {}, stages {}, microbatches {}, batch {})",
            m.num_decoder_layers, S, M, B);

  // Stage weights for layer j of every stage: (S, lps, ...) -> (S, ...).
  auto layer_weight = [&](ValueId w, int64_t j) {
    const Shape ws = b.info(w).shape;
    std::vector<int64_t> d(ws.dims().begin(), ws.dims().end());
    d.erase(d.begin() + 1);
    return b.reshape(b.slice(w, 1, j, 1), Shape(std::move(d)));
  };
  std::vector<LlamaLayerParams> layers;
  for (int64_t j = 0; j < lps; ++j) {
    const LlamaLayerParams& s = p.stacked;
    layers.push_back({layer_weight(s.pre_norm, j), layer_weight(s.query, j),
                      layer_weight(s.key, j), layer_weight(s.value, j), layer_weight(s.out, j),
                      layer_weight(s.post_norm, j), layer_weight(s.wi_0, j),
                      layer_weight(s.wi_1, j), layer_weight(s.wo, j)});
  }

  // Microbatch i = rows {r * M + i}: (B, ...) viewed as (micro, M, ...), so a batch sharded
  // on dim 0 stays sharded on micro (a local reshape).
  const ValueId xm = b.reshape(x, Shape{mb, M, T, E});
  const ValueId pm = b.reshape(positions, Shape{mb, M, T});
  std::map<int64_t, ValueId> pos_cache;
  auto micro_positions = [&](int64_t i) {
    auto it = pos_cache.find(i);
    if (it != pos_cache.end()) return it->second;
    ValueId v = b.reshape(b.slice(pm, 1, i, 1), Shape{1, mb, T});
    pos_cache[i] = v;
    return v;
  };

  std::vector<ValueId> outputs;  // the last stage's output per microbatch, (micro, 1, T, E)
  ValueId shifted = kNoValue;
  const int64_t iterations = pipeline_iterations(S, M);
  for (int64_t t = 0; t < iterations; ++t) {
    ValueId state = shifted;
    if (t < M) {  // stage 0's input: microbatch t, zeros for the other stages
      ValueId in = b.pad(b.reshape(b.slice(xm, 1, t, 1), Shape{1, mb, T, E}), 0, 0, S);
      state = state == kNoValue ? in : b.add(state, in);
    }
    b.checkpoint_name(state, "iteration_input");
    std::vector<ValueId> pos;  // stage s runs microbatch t - s (bubble: any valid positions)
    for (int64_t s = 0; s < S; ++s) pos.push_back(micro_positions(std::clamp<int64_t>(t - s, 0, M - 1)));
    const ValueId stage_pos = b.concat(pos, 0);  // (S, micro, T)

    b.set_vmap_logical("activation_stage");
    b.set_vmap(S);  // jax.vmap over stages, spmd_axis_name="stage"
    ValueId y = state;
    for (int64_t j = 0; j < lps; ++j)
      y = trace_decoder_layer(b, m, layers[j], y, stage_pos, static_cast<int32_t>(t * lps + j));
    b.set_vmap(0);

    if (t >= S - 1)  // the last stage finished microbatch t - (S - 1)
      outputs.push_back(b.reshape(b.slice(y, 0, S - 1, 1), Shape{mb, 1, T, E}));
    if (t + 1 < iterations) shifted = b.shift(y, 0, 1);  // _shift_right over `stage`
  }
  return b.reshape(b.concat(outputs, 1), Shape{B, T, E});
}

}  // namespace eng
