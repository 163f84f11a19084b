// engine/model/pipeline.cpp: the pipeline schedule traced as global ops (see pipeline.h).
#include "engine/model/pipeline.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "engine/model/llama.h"
#include "engine/sharding/logical_axes.h"

namespace eng {

namespace {
constexpr const char* kPrefix = "params/decoder/layers/";
constexpr const char* kOutsidePrefix = "params/decoder/layers_outside_pipeline/";
constexpr const char* kPpAsDpSuffix = "@pp_act_as_dp";
}  // namespace

ValueId pipeline_output_rows(Builder& b, const ModelConfig& m, ValueId rows) {
  const Shape s = b.info(rows).shape;  // (B, T)
  const int64_t S = m.pipeline_stages, M = m.pipeline_microbatches;
  // Row r*M + i, microbatch i = o*M/S + k: (micro, S, M/S, T) -> (S, micro, M/S, T); rows
  // split over data/fsdp on micro stay so, and each stage keeps its own block (a local slice).
  const ValueId v = b.transpose(b.reshape(rows, Shape{s[0] / M, S, M / S, s[1]}), {1, 0, 2, 3});
  const ValueId owned =
      b.constraint(v, {"activation_stage", "activation_batch", "", "activation_norm_length"});
  return b.constraint(b.reshape(owned, s),
                      {"activation_embed_and_logits_batch", "activation_norm_length"});
}

PipelineSchedule pipeline_schedule(const ModelConfig& m) {
  const int64_t S = m.pipeline_stages, R = m.pipeline_repeats;
  Result<PipelineSchedule> s = PipelineSchedule::make(
      {S, m.pipeline_microbatches, R, m.pipeline_delay, m.pipelined_layers() / (S * R)});
  ENG_CHECK(s.ok(), "pipeline: unvalidated schedule: {}", s.status().message());
  return *s;
}

int pipeline_layer_dims(const ValueInfo& param) {
  return !param.logical.empty() && param.logical[0] == "circular_repeats" ? 3 : 2;
}

std::optional<std::string> pipeline_param_subpath(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  return name.substr(prefix.size());
}

std::optional<std::string> outside_pipeline_subpath(const std::string& name) {
  const std::string prefix = kOutsidePrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  return name.substr(prefix.size());
}

std::string pp_act_as_dp_name(const std::string& logical) { return logical + kPpAsDpSuffix; }

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

LogicalAxisRules pipeline_logical_axis_rules(const LogicalAxisRules& rules, bool outside_layers) {
  std::vector<LogicalAxisRule> out = rules.rules();
  for (LogicalAxisRule& r : out) {
    if (r.logical != "activation_embed_and_logits_batch") continue;
    std::erase(r.mesh_axes, std::string("stage"));
    r.mesh_axes.insert(r.mesh_axes.begin(), "stage");
    r.bare = false;
    break;  // MaxText rewrites the first such rule only
  }
  if (!outside_layers) return LogicalAxisRules(std::move(out));
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) {
    if (out[i].logical.ends_with(kPpAsDpSuffix)) continue;
    LogicalAxisRule r = out[i];
    r.logical = pp_act_as_dp_name(r.logical);
    std::erase(r.mesh_axes, std::string("stage"));
    if (auto at = std::find(r.mesh_axes.begin(), r.mesh_axes.end(), "data");
        at != r.mesh_axes.end())
      r.mesh_axes.insert(at, "stage");
    r.bare = r.bare && r.mesh_axes.size() == 1;
    out.push_back(std::move(r));
  }
  return LogicalAxisRules(std::move(out));
}

LlamaLayerParams declare_pipeline_layer_params(Builder& b, const ModelConfig& m,
                                               std::vector<ValueId>& all) {
  const int64_t S = m.pipeline_stages, R = m.pipeline_repeats;
  const int64_t lps = m.pipelined_layers() / (S * R);
  auto param = [&](const std::string& sub, std::vector<int64_t> dims,
                   std::vector<std::string> logical) {
    dims.insert(dims.begin(), {S, lps});
    logical.insert(logical.begin(), {"layers", ""});
    if (R > 1) {  // MaxText's circular vmap adds the repeats dim in front
      dims.insert(dims.begin(), R);
      logical.insert(logical.begin(), "circular_repeats");
    }
    ValueId v = b.argument(kPrefix + sub, Shape(std::move(dims)), m.weight_dtype, std::move(logical),
                           ArgRole::kParam);
    all.push_back(v);
    return v;
  };
  std::vector<ValueId> layer;
  for (const LayerWeight& w : layer_weights(m)) layer.push_back(param(w.sub, w.dims, w.logical));
  return layer_from_list(layer);
}

LlamaLayerParams declare_outside_pipeline_params(Builder& b, const ModelConfig& m,
                                                 std::vector<ValueId>& all) {
  const int64_t n = m.num_decoder_layers - m.pipelined_layers();
  ENG_CHECK(n > 0, "pipeline: no layers outside the pipeline ({} of {} pipelined)",
            m.pipelined_layers(), m.num_decoder_layers);
  std::vector<ValueId> layer;
  for (LayerWeight& w : layer_weights(m)) {  // (..., L - P at param_scan_axis, ...)
    w.dims.insert(w.dims.begin() + m.param_scan_axis, n);
    w.logical.insert(w.logical.begin() + m.param_scan_axis, kLayersOutsidePipeline);
    const ValueId v = b.argument(kOutsidePrefix + std::string(w.sub), Shape(w.dims),
                                 m.weight_dtype, w.logical, ArgRole::kParam);
    all.push_back(v);
    layer.push_back(v);
  }
  return layer_from_list(layer);
}

namespace {

// MaxText's pipeline_fsdp_ag_once / _per_repeat (all_gather_over_fsdp): a constraint whose
// resolved spec drops the fsdp axes (kConstraint's `drop`), so the weight is gathered there.
constexpr const char* kFsdpAxes[] = {"fsdp", "fsdp_transpose"};

ValueId constrain(Builder& b, ValueId x, std::vector<std::string> logical, bool drop_fsdp) {
  OpAttrs a;
  a.logical = to_logical_axes(logical);
  if (drop_fsdp) a.mesh_axes.assign(std::begin(kFsdpAxes), std::end(kFsdpAxes));
  return b.emit(OpKind::kConstraint, {x}, a)[0];
}

// Stage weights for layer j of every stage, each stage at its current repeat: (S, ...).
// Taken out of the (S, lps, ...) slab once per (weight, repeat, j) by index_in_dim (a local
// copy of each device's shard; all lps layers of a slab together, the first time one is
// needed), then constrained to the stacked weight's own sharding in every use. The
// constraint is a no-op forward; its VJP reshards the layer's gradient (partial over the
// batch axes) to the weight's sharding right there, so index_in_dim's VJP adds sharded
// gradients into slot j of one (S, lps, ...) accumulator in place, not whole (S, lps, ...)
// partial sums (1.4 GiB per llama2-7b MLP weight on stage=4 x fsdp=64). Taking a weight's
// layers together also assembles one weight's stacked gradient before the next one's in the
// backward pass (slices taken per use interleaved the weights: the three MLP weights' stacked
// gradients were built together, 5.9 GiB more temps on llama2-7b stage=2 x fsdp=2).
//
// A fresh constraint in every iteration, as MaxText's scan body selects each stage's weights
// per iteration: one value per (iteration, layer), so the fsdp all_gather of a layer's weights
// lives within its iteration (one shared value kept every gathered layer alive across the
// whole loop: 6 GiB on llama2-7b stage=4 x fsdp=64; slicing afresh each iteration instead
// kept M + S - 1 local copies of the stage's weights: 0.7 GiB).
//
// pipeline_fsdp_ag_once instead gathers each stacked weight over fsdp once, before the loop;
// _per_repeat gathers repeat r's (S, lps, ...) once, before its first use. Right after a
// gather every layer of it is taken out, so the gathered stack dies there and the plan holds
// the gathered weights once, as per-layer (S, ...) values (taking them on first use kept the
// stack, each repeat's slab and the layers alive together: 2.3x the gathered weights at the
// peak of a circular plan). The per-use constraints keep the gathered sharding; their VJPs
// still reduce-scatter each layer's gradient (a `drop` constraint transposes to the
// constraint without it).
//
// Circular pipelines: a stage's repeat r slab is w[r] (index_in_dim on the unsharded repeats
// dim: local). When the stages are at different repeats (d*(S-1) iterations per repeat
// boundary), each stage selects its own repeat's row with index_per_row (op.h), as MaxText's
// per-stage dynamic slice vmapped over stages: the stacked weight stays split over `stage`
// and no weight byte moves (a concat of the slabs' rows gathered them over `stage`). Its
// VJP adds each stage's gradient into its selected row only, in place. Gathered, the stages
// select from their repeats' gathered layers, stacked locally (a transient copy of one layer
// per repeat; nothing is gathered twice).
class StageWeights {
 public:
  StageWeights(Builder& b, const ModelConfig& m, const LlamaLayerParams& stacked)
      : b_(b),
        stacked_(stacked),
        R_(m.pipeline_repeats),
        lps_(m.pipelined_layers() / (m.pipeline_stages * m.pipeline_repeats)),
        once_(m.pipeline_fsdp_ag_once || (m.pipeline_fsdp_ag_per_repeat && R_ == 1)),
        per_repeat_(m.pipeline_fsdp_ag_per_repeat && R_ > 1) {}

  LlamaLayerParams layer(int64_t j, const std::vector<int64_t>& repeats) {
    auto w = [&](ValueId x) { return weight(x, j, repeats); };
    const LlamaLayerParams& s = stacked_;
    LlamaLayerParams lp{w(s.pre_norm),  w(s.query), w(s.key),  w(s.value), w(s.out),
                        w(s.post_norm), w(s.wi_0),  w(s.wi_1), w(s.wo)};
    if (s.query_norm != kNoValue) {  // use_qk_norm
      lp.query_norm = w(s.query_norm);
      lp.key_norm = w(s.key_norm);
    }
    return lp;
  }

 private:
  bool gathered() const { return once_ || per_repeat_; }
  int lead() const { return R_ > 1 ? 3 : 2; }  // (R,) S, lps

  // x with the fsdp axes dropped from its sharding (an all_gather over them).
  ValueId gather(ValueId x, std::vector<std::string> logical) {
    return constrain(b_, x, std::move(logical), true);
  }

  // Layer j of every stage at repeat r, (S, ...), a local copy. The first time a repeat's
  // slab (S, lps, ...) is needed all its layers are taken out, so the slab dies there: with
  // _ag_once, every repeat's layers of the stack gathered once; with _per_repeat, repeat r's
  // gathered slab; otherwise the device's shard of w[r] (w when R = 1).
  ValueId layer_of(ValueId w, int64_t r, int64_t j) {
    const auto key = std::tuple{w, r, j};
    if (auto it = layers_.find(key); it != layers_.end()) return it->second;
    std::vector<int64_t> repeats = {r};
    ValueId stack = w;
    if (once_) {
      stack = gather(w, b_.info(w).logical);
      repeats.resize(R_);
      for (int64_t k = 0; k < R_; ++k) repeats[k] = k;
    }
    for (int64_t rr : repeats) {
      ValueId from = R_ > 1 ? b_.index_in_dim(stack, 0, rr) : stack;
      if (per_repeat_) {
        std::vector<std::string> logical = b_.info(w).logical;
        logical.erase(logical.begin());
        from = gather(from, std::move(logical));
      }
      for (int64_t jj = 0; jj < lps_; ++jj)
        layers_[std::tuple{w, rr, jj}] = b_.index_in_dim(from, 1, jj);
    }
    const auto it = layers_.find(key);
    ENG_CHECK(it != layers_.end(), "StageWeights: no layer {} of repeat {}", j, r);
    return it->second;
  }

  // Stages at different repeats: each selects its own row (index_per_row) of the stacked
  // weight (every layer taken out of that selection together), or, gathered, of its repeats'
  // gathered layer j stacked locally.
  ValueId mixed(ValueId w, int64_t j, const std::vector<int64_t>& repeats) {
    const auto key = std::tuple{w, repeats, j};
    if (auto it = mixed_.find(key); it != mixed_.end()) return it->second;
    if (!gathered()) {
      const ValueId rows = b_.index_per_row(w, repeats);  // (S, lps, ...)
      for (int64_t jj = 0; jj < lps_; ++jj)
        mixed_[std::tuple{w, repeats, jj}] = b_.index_in_dim(rows, 1, jj);
      const auto it = mixed_.find(key);
      ENG_CHECK(it != mixed_.end(), "StageWeights: no layer {} of the mixed repeats", j);
      return it->second;
    }
    std::vector<int64_t> used = repeats;
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    std::vector<ValueId> parts;
    for (int64_t r : used) {
      const ValueId one = layer_of(w, r, j);
      std::vector<int64_t> d = b_.info(one).shape.dims();
      d.insert(d.begin(), 1);
      parts.push_back(b_.reshape(one, Shape(std::move(d))));
    }
    std::vector<int64_t> at;  // each stage's position in `used`
    for (int64_t r : repeats)
      at.push_back(std::lower_bound(used.begin(), used.end(), r) - used.begin());
    return mixed_[key] = b_.index_per_row(b_.concat(parts, 0), at);
  }

  ValueId weight(ValueId w, int64_t j, const std::vector<int64_t>& repeats) {
    std::vector<std::string> logical = b_.info(w).logical;  // (layers, <the layer weight's>)
    logical.erase(logical.begin(), logical.begin() + lead());
    logical.insert(logical.begin(), "layers");
    const bool same = std::all_of(repeats.begin(), repeats.end(),
                                  [&](int64_t r) { return r == repeats[0]; });
    const ValueId layer = same ? layer_of(w, repeats[0], j) : mixed(w, j, repeats);
    return constrain(b_, layer, std::move(logical), gathered());
  }

  Builder& b_;
  const LlamaLayerParams& stacked_;
  const int64_t R_, lps_;
  const bool once_, per_repeat_;
  std::map<std::tuple<ValueId, int64_t, int64_t>, ValueId> layers_;  // (w, repeat, j) -> (S, ...)
  // (weight, each stage's repeat, j) -> (S, ...)
  std::map<std::tuple<ValueId, std::vector<int64_t>, int64_t>, ValueId> mixed_;
};

// A per-row i32 batch array (positions, segment ids) as the stages see it: at iteration t,
// stage s runs the schedule's microbatch_id(t, s), so the stage body gets (S, micro, T) of
// those microbatches (bubble slots: MaxText's clamped id, a valid microbatch; their input is
// zeros or stale and their output is never collected).
class StageRows {
 public:
  StageRows(Builder& b, ValueId rows, const PipelineSchedule& sch) : b_(b), sch_(sch) {
    const Shape& s = b.info(rows).shape;
    const int64_t M = sch.shape().microbatches;
    mb_ = s[0] / M;
    T_ = s[1];
    // Split over data/fsdp only (the pipelined batch arrays' sharding; MaxText all-gathers
    // positions and segment ids to replicated here), so the reshape keeps them on `micro`.
    view_ = b.reshape(b.constraint(rows, {"activation_batch", "activation_norm_length"}),
                      Shape{mb_, M, T_});
  }

  ValueId at_iteration(int64_t t) {
    std::vector<ValueId> per_stage;
    for (int64_t s = 0; s < sch_.shape().stages; ++s)
      per_stage.push_back(micro(sch_.microbatch_id(t, s)));
    return b_.concat(per_stage, 0);  // (S, micro, T)
  }

 private:
  ValueId micro(int64_t i) {
    auto it = cache_.find(i);
    if (it != cache_.end()) return it->second;
    return cache_[i] = b_.reshape(b_.slice(view_, 1, i, 1), Shape{1, mb_, T_});
  }

  Builder& b_;
  const PipelineSchedule& sch_;
  int64_t mb_ = 0, T_ = 0;
  ValueId view_ = kNoValue;           // (micro, M, T)
  std::map<int64_t, ValueId> cache_;  // microbatch -> (1, micro, T)
};

// Leaving the pipeline. The loss is a mean over rows, so the loss head takes them in the
// order pipeline_output_rows gives: stage s owns microbatches [s*M/S, (s+1)*M/S) (`stage`
// major in the loss head's batch sharding, as MaxText's rule 2 has it when pipelining), and
// microbatch i = s*M/S + k reaches its owner by ONE collective permute S-1 -> s when the last
// stage finishes it (kShift with one source row; for s = S-1 a shift by 0 that keeps row S-1
// and zeros the others, no traffic), added into block s of
// accumulator k (the other blocks are zeros: adds are exact). outputs[k] is accumulator k,
// (S, micro, T, E); stacked as (S, micro, M/S, T, E) and merged into (B, T, E), sharded
// (stage, data, fsdp, ...) by a local reshape. Backward, each microbatch's cotangent goes
// back by the transposed permute s -> S-1: no value moves over `stage` but by permutes.
ValueId pipeline_output(Builder& b, const std::vector<ValueId>& outputs, const Shape& xs) {
  std::vector<ValueId> parts;
  for (ValueId z : outputs) {
    std::vector<int64_t> d = b.info(z).shape.dims();  // (S, micro, T, E)
    d.insert(d.begin() + 2, 1);
    parts.push_back(b.reshape(z, Shape(std::move(d))));
  }
  return b.constraint(b.reshape(b.concat(parts, 2), xs),
                      {"activation_embed_and_logits_batch", "activation_norm_length",
                       "activation_embed"});
}

// The state entering iteration t, (S, micro, T, E): stage s > 0 gets stage s-1's output of
// iteration t - d (MaxText's shift of prev_outputs with delay); stage 0 gets microbatch t
// while t < M, then (circular) stage S-1's output of the microbatch's previous repeat, moved
// S-1 -> 0 when it was produced (`wraps`: MaxText's circ_storage, or with the shift its
// _rotate_right when M = S*d), else zeros.
ValueId stage_inputs(Builder& b, const PipelineSchedule& sch, int64_t t, ValueId xm,
                     const std::vector<ValueId>& ys, std::map<int64_t, ValueId>& wraps) {
  const PipelineShape& p = sch.shape();
  const Shape xs = b.info(xm).shape;  // (micro, M, T, E)
  ValueId state = kNoValue;
  auto add = [&](ValueId v) { state = state == kNoValue ? v : b.add(state, v); };
  if (t - p.delay >= 0) add(b.shift(ys[t - p.delay], 0, 1));  // _shift_right over `stage`
  if (t < p.microbatches) {
    // stage 0's rows of the state, placed on stage 0 alone (no (S, micro, T, E) temporary)
    add(b.pad(b.reshape(b.slice(xm, 1, t, 1), Shape{1, xs[0], xs[2], xs[3]}), 0, 0, p.stages,
              {"activation_stage", "activation_batch", "activation_norm_length",
               "activation_embed"}));
  } else if (auto it = wraps.find(t); it != wraps.end()) {
    add(it->second);
    wraps.erase(it);
  }
  ENG_CHECK(state != kNoValue, "pipeline: iteration {} has no input", t);  // t = 0 reads x
  return state;
}

// One iteration's stage body: the stage's layers vmapped over stages, each stage with its
// current repeat's weights.
ValueId run_stages(Builder& b, const ModelConfig& m, const PipelineSchedule& sch, int64_t t,
                   ValueId state, StageWeights& weights, StageRows& pos, StageRows* seg) {
  const PipelineShape& p = sch.shape();
  std::vector<int64_t> repeats;
  for (int64_t s = 0; s < p.stages; ++s) repeats.push_back(sch.repeat_id(t, s));
  const ValueId stage_pos = pos.at_iteration(t);                   // (S, micro, T)
  const ValueId stage_seg = seg ? seg->at_iteration(t) : kNoValue;  // (S, micro, T)
  ValueId y = state;
  for (int64_t j = 0; j < p.layers_per_stage; ++j) {
    const LlamaLayerParams lw = weights.layer(j, repeats);
    b.set_vmap_logical("activation_stage");
    b.set_vmap(p.stages);  // jax.vmap over stages, spmd_axis_name="stage"
    y = trace_decoder_layer(b, m, lw, y, stage_pos,
                            static_cast<int32_t>(t * p.layers_per_stage + j), stage_seg);
    b.set_vmap(0);
  }
  return y;
}

// The L - P layers after the pipeline (MaxText's scan_decoder_layers "layers_outside_pipeline"
// under logical_axis_rules_pp_act_as_dp): layer P + k reads slice k of the stacked weights
// inside its remat region, as the scanned model does; its activations carry the pp_act_as_dp
// names, so x (B, T, E) (the loss head's sharding, `stage` major) stays split over `stage`
// and each device runs these layers on its own rows. Remat scopes continue after the
// pipeline's (first_scope + k).
ValueId trace_outside_layers(Builder& b, const ModelConfig& m, const LlamaLayerParams& stacked,
                             ValueId x, ValueId positions, ValueId segment_ids,
                             int32_t first_scope) {
  const std::vector<std::string> rows = {pp_act_as_dp_name("activation_batch"),
                                         pp_act_as_dp_name("activation_norm_length")};
  // (B, T) in the pipeline output's row order, rows split as x's
  const ValueId pos = b.constraint(pipeline_output_rows(b, m, positions), rows);
  const ValueId seg = segment_ids == kNoValue
                          ? kNoValue
                          : b.constraint(pipeline_output_rows(b, m, segment_ids), rows);
  return trace_scanned_layers(b, m, stacked, m.num_decoder_layers - m.pipelined_layers(), x, pos,
                              seg, first_scope, true);
}

}  // namespace

ValueId trace_pipeline_decoder(Builder& b, const ModelConfig& m, const LlamaParams& p, ValueId x,
                               ValueId positions, ValueId segment_ids) {
  const Shape xs = b.info(x).shape;
  const int64_t B = xs[0], T = xs[1], E = xs[2];
  const int64_t S = m.pipeline_stages, M = m.pipeline_microbatches, R = m.pipeline_repeats;
  const int64_t mb = B / M;
  ENG_CHECK(validate_pipeline(m.pipelined_layers(), S, M, B).ok(),
            "pipeline: unvalidated shape (layers {}, stages {}, microbatches {}, batch {})",
            m.pipelined_layers(), S, M, B);
  const PipelineSchedule sch = pipeline_schedule(m);
  StageWeights weights(b, m, p.stacked);
  // Microbatch i = rows {r * M + i}: (B, ...) viewed as (micro, M, ...), so a batch sharded on
  // dim 0 stays sharded on micro (a local reshape).
  const ValueId xm = b.reshape(x, Shape{mb, M, T, E});
  StageRows pos(b, positions, sch);
  std::optional<StageRows> seg;
  if (segment_ids != kNoValue) seg.emplace(b, segment_ids, sch);

  std::vector<ValueId> outputs(M / S, kNoValue);  // accumulators (pipeline_output)
  std::vector<ValueId> ys;                    // each iteration's output (S, micro, T, E)
  std::map<int64_t, ValueId> wraps;           // iteration -> stage 0's input from stage S-1
  for (int64_t t = 0; t < sch.iterations(); ++t) {
    b.set_pipeline_iteration(static_cast<int32_t>(t));  // a profile's unit (program.h)
    const ValueId state = stage_inputs(b, sch, t, xm, ys, wraps);
    b.checkpoint_name(state, "iteration_input");
    ys.push_back(run_stages(b, m, sch, t, state, weights, pos, seg ? &*seg : nullptr));
    const ScheduleCell last = sch.cell(t, S - 1);
    if (last.bubble()) continue;
    if (last.repeat == R - 1) {  // microbatch done: S-1 -> its owner stage
      const int64_t owner = last.microbatch / (M / S), k = last.microbatch % (M / S);
      const ValueId moved = b.shift(ys.back(), 0, owner - (S - 1), S - 1, 1);
      outputs[k] = outputs[k] == kNoValue ? moved : b.add(outputs[k], moved);
    } else {  // stage 0 runs it again at iteration_of(0, mb, repeat + 1): S-1 -> 0 now
      wraps[sch.iteration_of(0, last.microbatch, last.repeat + 1)] =
          b.shift(ys.back(), 0, -(S - 1));
    }
  }
  b.set_pipeline_iteration(-1);
  const ValueId y = pipeline_output(b, outputs, xs);
  if (m.pipelined_layers() == m.num_decoder_layers) return y;
  const int64_t scopes = sch.iterations() * sch.shape().layers_per_stage;  // the pipeline's
  return trace_outside_layers(b, m, p.outside, y, positions, segment_ids,
                              static_cast<int32_t>(scopes));
}

}  // namespace eng
