// engine/model/pipeline.cpp: the pipeline schedule traced as global ops (see pipeline.h).
#include "engine/model/pipeline.h"

#include <algorithm>
#include <map>
#include <optional>

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

LogicalAxisRules pipeline_logical_axis_rules(const LogicalAxisRules& rules) {
  std::vector<LogicalAxisRule> out = rules.rules();
  for (LogicalAxisRule& r : out) {
    if (r.logical != "activation_embed_and_logits_batch") continue;
    std::erase(r.mesh_axes, std::string("stage"));
    r.mesh_axes.push_back("stage");
    r.bare = false;
    break;  // MaxText rewrites the first such rule only
  }
  return LogicalAxisRules(std::move(out));
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

namespace {

// Stage weights for layer j of every stage: (S, lps, ...) -> (S, ...), sliced once (a local
// copy of each device's shard), then constrained to the stacked weight's own sharding in
// every use. The constraint is a no-op forward; its VJP reshards the layer's gradient
// (partial over the batch axes) to the weight's sharding right there, so the pad back to
// (S, lps, ...) and the sum over j run on sharded gradients, not on whole (S, lps, ...)
// partial sums (1.4 GiB per llama2-7b MLP weight on stage=4 x fsdp=64).
//
// A fresh constraint in every iteration, as MaxText's scan body selects each stage's weights
// per iteration: one value per (iteration, layer), so the fsdp all_gather of a layer's weights
// lives within its iteration (one shared value kept every gathered layer alive across the
// whole loop: 6 GiB on llama2-7b stage=4 x fsdp=64; slicing afresh each iteration instead
// kept M + S - 1 local copies of the stage's weights: 0.7 GiB).
class StageWeights {
 public:
  StageWeights(Builder& b, const LlamaLayerParams& stacked) : b_(b), stacked_(stacked) {}

  LlamaLayerParams layer(int64_t j) {
    const LlamaLayerParams& s = stacked_;
    return {weight(s.pre_norm, j), weight(s.query, j), weight(s.key, j),
            weight(s.value, j),    weight(s.out, j),   weight(s.post_norm, j),
            weight(s.wi_0, j),     weight(s.wi_1, j),  weight(s.wo, j)};
  }

 private:
  ValueId weight(ValueId w, int64_t j) {
    const ValueInfo& wi = b_.info(w);
    std::vector<int64_t> d(wi.shape.dims().begin(), wi.shape.dims().end());
    std::vector<std::string> logical = wi.logical;
    d.erase(d.begin() + 1);
    logical.erase(logical.begin() + 1);
    auto it = sliced_.find({w, j});
    if (it == sliced_.end()) {
      const ValueId layer = b_.reshape(b_.slice(w, 1, j, 1), Shape(std::move(d)));
      it = sliced_.emplace(std::pair{w, j}, layer).first;
    }
    return b_.constraint(it->second, std::move(logical));
  }

  Builder& b_;
  const LlamaLayerParams& stacked_;
  std::map<std::pair<ValueId, int64_t>, ValueId> sliced_;  // (stacked weight, j) -> slice
};

// A per-row i32 batch array (positions, segment ids) as the stages see it: at iteration t,
// stage s runs microbatch t - s, so the stage body gets (S, micro, T) of those microbatches
// (bubble slots: any valid microbatch; their input is zeros and their output unused).
class StageRows {
 public:
  StageRows(Builder& b, ValueId rows, int64_t S, int64_t M) : b_(b), S_(S), M_(M) {
    const Shape& s = b.info(rows).shape;
    mb_ = s[0] / M;
    T_ = s[1];
    // The input batch's sharding has `stage` minor-most, which the reshape cannot keep on
    // `micro`; dropping `stage` first (an all_gather over it) keeps the rows split over
    // data/fsdp. (MaxText all-gathers positions and segment ids to replicated here.)
    view_ = b.reshape(b.constraint(rows, {"activation_batch", "activation_norm_length"}),
                      Shape{mb_, M, T_});
  }

  ValueId at_iteration(int64_t t) {
    std::vector<ValueId> per_stage;
    for (int64_t s = 0; s < S_; ++s)
      per_stage.push_back(micro(std::clamp<int64_t>(t - s, 0, M_ - 1)));
    return b_.concat(per_stage, 0);  // (S, micro, T)
  }

 private:
  ValueId micro(int64_t i) {
    auto it = cache_.find(i);
    if (it != cache_.end()) return it->second;
    return cache_[i] = b_.reshape(b_.slice(view_, 1, i, 1), Shape{1, mb_, T_});
  }

  Builder& b_;
  int64_t S_, M_, mb_ = 0, T_ = 0;
  ValueId view_ = kNoValue;           // (micro, M, T)
  std::map<int64_t, ValueId> cache_;  // microbatch -> (1, micro, T)
};

// Leaving the pipeline: (B, T, E) sharded over the batch axes without `stage`
// (activation_batch, MaxText's output_sharding), then constrained to the loss head's batch
// sharding, which adds `stage` minor-most (pipeline_logical_axis_rules): a local slice, so the
// final norm and the logits run on 1/S of those rows instead of computing S times the logits
// and slicing after. Backward, the first constraint's VJP all_gathers the cotangent over
// `stage` only (back to activation_batch) before the reshape's VJP, which cannot keep
// (data, fsdp, stage) on `micro` and would otherwise gather the whole batch.
ValueId pipeline_output(Builder& b, const std::vector<ValueId>& outputs, const Shape& xs) {
  const ValueId out =
      b.constraint(b.reshape(b.concat(outputs, 1), xs),
                   {"activation_batch", "activation_norm_length", "activation_embed"});
  return b.constraint(out, {"activation_embed_and_logits_batch", "activation_norm_length",
                            "activation_embed"});
}

}  // namespace

ValueId trace_pipeline_decoder(Builder& b, const ModelConfig& m, const LlamaParams& p, ValueId x,
                               ValueId positions, ValueId segment_ids) {
  const Shape xs = b.info(x).shape;
  const int64_t B = xs[0], T = xs[1], E = xs[2];
  const int64_t S = m.pipeline_stages, M = m.pipeline_microbatches;
  const int64_t lps = m.num_decoder_layers / S, mb = B / M;
  ENG_CHECK(validate_pipeline(m.num_decoder_layers, S, M, B).ok(),
            "pipeline: unvalidated shape (layers {}, stages {}, microbatches {}, batch {})",
            m.num_decoder_layers, S, M, B);
  StageWeights weights(b, p.stacked);
  // Microbatch i = rows {r * M + i}: (B, ...) viewed as (micro, M, ...), so a batch sharded
  // on dim 0 stays sharded on micro (a local reshape).
  const ValueId xm = b.reshape(x, Shape{mb, M, T, E});
  StageRows pos(b, positions, S, M);
  std::optional<StageRows> seg;
  if (segment_ids != kNoValue) seg.emplace(b, segment_ids, S, M);

  std::vector<ValueId> outputs;  // the last stage's output per microbatch, (micro, 1, T, E)
  ValueId shifted = kNoValue;
  const int64_t iterations = pipeline_iterations(S, M);
  for (int64_t t = 0; t < iterations; ++t) {
    b.set_pipeline_iteration(static_cast<int32_t>(t));  // a profile's unit (program.h)
    ValueId state = shifted;
    if (t < M) {  // stage 0's input: microbatch t, zeros for the other stages
      ValueId in = b.pad(b.reshape(b.slice(xm, 1, t, 1), Shape{1, mb, T, E}), 0, 0, S);
      state = state == kNoValue ? in : b.add(state, in);
    }
    b.checkpoint_name(state, "iteration_input");
    const ValueId stage_pos = pos.at_iteration(t);                   // (S, micro, T)
    const ValueId stage_seg = seg ? seg->at_iteration(t) : kNoValue;  // (S, micro, T)
    ValueId y = state;
    for (int64_t j = 0; j < lps; ++j) {
      const LlamaLayerParams lw = weights.layer(j);
      b.set_vmap_logical("activation_stage");
      b.set_vmap(S);  // jax.vmap over stages, spmd_axis_name="stage"
      y = trace_decoder_layer(b, m, lw, y, stage_pos, static_cast<int32_t>(t * lps + j),
                              stage_seg);
      b.set_vmap(0);
    }
    if (t >= S - 1)  // the last stage finished microbatch t - (S - 1)
      outputs.push_back(b.reshape(b.slice(y, 0, S - 1, 1), Shape{mb, 1, T, E}));
    if (t + 1 < iterations) shifted = b.shift(y, 0, 1);  // _shift_right over `stage`
  }
  b.set_pipeline_iteration(-1);
  return pipeline_output(b, outputs, xs);
}

}  // namespace eng
