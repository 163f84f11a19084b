// engine/train/train_step.cpp: assembles train_step and MaxText's TFLOPs formula.
#include "engine/train/train_step.h"

#include <algorithm>

#include "engine/ir/autodiff.h"
#include "engine/ir/builder.h"
#include "engine/ir/remat.h"
#include "engine/model/gpt3.h"
#include "engine/model/llama.h"
#include "engine/model/mla.h"
#include "engine/model/moe.h"

namespace eng {

int NamedLayout::find(std::string_view name) const {
  for (const NamedSlot& s : slots)
    if (s.name == name) return s.index;
  return -1;
}

int NamedLayout::at(std::string_view name) const {
  const int i = find(name);
  ENG_CHECK(i >= 0, "train_step layout: no array named '{}'", name);
  return i;
}

// learning/moe_lb_loss (MaxText's name), and per MoE layer l and expert e the tokens routed
// there (moe/layer_<l>/expert_<e>/tokens) and dropped (moe/layer_<l>/expert_<e>/dropped):
// scalars sliced from each layer's (2, E) load.
static std::vector<std::pair<std::string, ValueId>> moe_metrics(Builder& b, const LossValues& loss) {
  std::vector<std::pair<std::string, ValueId>> out;
  if (loss.moe_lb_loss == kNoValue) return out;
  out.push_back({"learning/moe_lb_loss", loss.moe_lb_loss});
  for (size_t l = 0; l < loss.moe_load.size(); ++l) {
    const ValueId load = loss.moe_load[l];
    const int64_t E = b.info(load).shape[1];
    const char* kinds[] = {"tokens", "dropped"};
    for (int64_t row = 0; row < 2; ++row) {
      const ValueId r = b.index_in_dim(load, 0, row);
      for (int64_t e = 0; e < E; ++e)
        out.push_back({fmt::format("moe/layer_{}/expert_{}/{}", l, e, kinds[row]),
                       b.index_in_dim(r, 0, e)});
    }
  }
  return out;
}

Program build_train_step(const ResolvedConfig& c, TrainStepLayout* layout) {
  Builder b("train_step");
  // The decoder (MaxText's decoder_block): llama2 (and mistral), or gpt3 (engine/model/gpt3.h).
  LlamaParams params;
  Gpt3Params gpt3;
  if (c.model.gpt3()) {
    gpt3 = declare_gpt3_params(b, c.model);
    params.all = gpt3.all;
  } else {
    params = declare_llama_params(b, c.model);
  }
  // One sum of squares per parameter (the llama decoder's scanned weights: per layer slice).
  auto sum_squares = [&](const std::vector<ValueId>& values) {
    if (!c.model.gpt3()) return per_layer_sum_squares(b, c.model, params, values);
    std::vector<ValueId> out;
    for (ValueId v : values) out.push_back(b.sum_squares(v));
    return out;
  };
  const int n = static_cast<int>(params.all.size());
  std::vector<ValueId> mu(n), nu(n);
  for (int i = 0; i < n; ++i) {
    const ValueInfo p = b.info(params.all[i]);
    const std::string path = p.name.substr(std::string("params/").size());
    mu[i] = b.argument("opt_state/mu/" + path, p.shape, p.dtype, p.logical, ArgRole::kOptMu);
  }
  for (int i = 0; i < n; ++i) {
    const ValueInfo p = b.info(params.all[i]);
    const std::string path = p.name.substr(std::string("params/").size());
    nu[i] = b.argument("opt_state/nu/" + path, p.shape, p.dtype, p.logical, ArgRole::kOptNu);
  }
  ValueId step = b.argument("step", Shape{}, DType::kI32, {}, ArgRole::kStep);
  BatchArgs batch = declare_batch(b, c.model, c.global_batch_size, c.max_target_length);

  LossValues loss = c.model.gpt3() ? trace_gpt3_loss(b, c.model, gpt3, batch)
                                   : trace_llama_loss(b, c.model, params, batch);
  const int forward_end = static_cast<int>(b.program().instrs().size());
  std::vector<ValueId> grads = append_gradients(b, loss.loss, params.all);
  // MaxText train.py: float32 gradients are cast to grad_dtype (others keep theirs); with
  // grad_dtype float32 no op is emitted (MaxText PR #3922 item 8). Partial sums pass through
  // the cast, so the cross-device reduction happens in grad_dtype (docs/precision.md).
  for (ValueId& g : grads)
    if (b.info(g).dtype == DType::kF32 && c.grad_dtype != DType::kF32) g = b.convert(g, c.grad_dtype);

  // Global-norm clipping (optax.clip_by_global_norm) folded into the AdamW update.
  // One term per unscanned parameter, in the unscanned order (scan_layers: per layer slice).
  std::vector<ValueId> grad_sq = sum_squares(grads);
  ValueId raw_norm = b.global_norm(grad_sq);
  ValueId clip = b.clip_factor(raw_norm, c.gradient_clipping_threshold);
  ValueId grad_norm = b.mul(raw_norm, clip);
  ValueId lr = b.learning_rate(step, c.learning_rate, c.warmup_steps, c.cos_steps,
                               c.learning_rate_final_fraction);

  std::vector<ValueId> new_params(n), new_mu(n), new_nu(n);
  for (int i = 0; i < n; ++i) {
    auto upd = b.adamw(params.all[i], grads[i], mu[i], nu[i], lr, clip, step, c.adam_b1, c.adam_b2,
                       c.adam_eps, c.adam_weight_decay);
    new_params[i] = upd[0];
    new_mu[i] = upd[1];
    new_nu[i] = upd[2];
  }
  if (!c.model.gpt3())  // routed_bias_update_rate: MaxText's rule update of the router bias
    apply_routed_bias_updates(b, c.model, params, loss.moe_load,
                              c.global_batch_size * c.max_target_length *
                                  c.model.moe.num_experts_per_tok,
                              new_params);
  std::vector<ValueId> param_sq = sum_squares(new_params);
  ValueId param_norm = b.global_norm(param_sq);
  ValueId new_step = b.increment(step);

  const Program& prog = b.program();
  for (int i = 0; i < n; ++i) b.output(new_params[i], prog.value(params.all[i]).name, i);
  for (int i = 0; i < n; ++i) b.output(new_mu[i], prog.value(mu[i]).name, n + i);
  for (int i = 0; i < n; ++i) b.output(new_nu[i], prog.value(nu[i]).name, 2 * n + i);
  b.output(new_step, "step", 3 * n);

  TrainStepLayout l;
  l.num_params = n;
  l.step_arg = 3 * n;
  l.first_batch_arg = 3 * n + 1;
  l.first_metric_output = 3 * n + 1;
  const std::pair<const char*, ValueId> metrics[] = {
      {"learning/loss", loss.loss},
      {"learning/total_weights", loss.total_weights},
      {"learning/raw_grad_norm", raw_norm},
      {"learning/grad_norm", grad_norm},
      {"learning/param_norm", param_norm},
      {"learning/current_learning_rate", lr},
  };
  for (const auto& [name, v] : metrics) {
    b.output(v, name);
    l.metric_names.push_back(name);
  }
  for (const auto& [name, v] : moe_metrics(b, loss)) {  // MoE models only
    b.output(v, name);
    l.metric_names.push_back(name);
  }
  Program traced = std::move(b).finish();
  for (const std::string& name : l.metric_names)
    l.metrics.slots.push_back({name, traced.find_output(name)});
  for (int i = l.first_batch_arg; i < static_cast<int>(traced.args().size()); ++i)
    l.batch.slots.push_back({traced.value(traced.args()[i].value).name, i});
  if (layout) *layout = l;
  Result<RematPolicy> policy =
      remat_policy(c.remat_policy, c.remat_save_names, c.remat_offload_names);
  ENG_CHECK(policy.ok(), "build_train_step: {}", policy.status().message());  // resolve_config validated it
  if (policy->save_all && c.model.num_vocab_tiling <= 1) return traced;  // none: nothing to recompute
  return rematerialize(traced, forward_end, *policy);
}

Result<CompileOptions> compile_options_from_config(const Config& config) {
  CompileOptions o;
  ENG_ASSIGN_OR_RETURN(o.shard_mode, parse_shard_mode(config.get_string("shard_mode")));
  o.shard_optimizer_over_data = config.get_bool("shard_optimizer_over_data");
  o.skip_trivial_specs = config.get_bool("skip_trivial_specs");
  // MaxText merges logical_axis_rules into the base rules (_merge_logical_axis_rules).
  ENG_ASSIGN_OR_RETURN(LogicalAxisRules overrides, config.logical_axis_rules());
  // A misspelt axis would otherwise vanish silently (an absent axis counts as size 1).
  const std::vector<std::string>& known = maxtext_mesh_axes();
  for (const LogicalAxisRule& r : overrides.rules())
    for (const std::string& a : r.mesh_axes)
      if (std::find(known.begin(), known.end(), a) == known.end())
        return invalid_argument("config: logical_axis_rules: rule {} names mesh axis '{}', which is "
                                "not one of MaxText's mesh axes ({})",
                                r.to_string(), a, fmt::join(known, ", "));
  // pyconfig.py: base.yml's rules, then the model yml's (merged), then the user's (merged, or
  // replacing everything with override_logical_axis_rules).
  // MoE: MaxText moe.py's activation_batch_no_exp (the dispatched tokens' batch dim without
  // `expert`, which the experts' dim takes), beside the model's own rules.
  LogicalAxisRules model_rules = model_logical_axis_rules(config.get_string("model_name"));
  if (config.get_int("num_experts") > 1)
    model_rules = model_rules.merged(LogicalAxisRules({LogicalAxisRule{
        "activation_batch_no_exp", {"data", "fsdp", "fsdp_transpose"}, false}}));
  o.rules = LogicalAxisRules::maxtext_default()
                .merged(model_rules)
                .merged(overrides, config.get_bool("override_logical_axis_rules"));
  if (config.get_int("ici_pipeline_parallelism") > 1)
    o.rules = pipeline_logical_axis_rules(o.rules,
                                          config.get_int("pipeline_parallel_layers") != -1);
  return o;
}

std::string ici_key(const std::string& axis) {
  return axis == "stage" ? "ici_pipeline_parallelism" : "ici_" + axis + "_parallelism";
}

std::string dcn_key(const std::string& axis) {
  return axis == "stage" ? "dcn_pipeline_parallelism" : "dcn_" + axis + "_parallelism";
}

int64_t dcn_factor(const Config& config, const std::string& axis) {
  const int64_t d = config.get_int(dcn_key(axis));
  return d == -1 ? 1 : d;
}

Result<Mesh> mesh_from_config(const Config& config, int64_t num_devices) {
  std::vector<std::pair<std::string, int64_t>> ici;
  for (const std::string& axis : maxtext_mesh_axes()) {
    const int64_t i = config.get_int(ici_key(axis));  // -1 fills: the dcn part is in the fill
    ici.push_back({axis, i == -1 ? i : i * dcn_factor(config, axis)});
  }
  ENG_ASSIGN_OR_RETURN(ShardMode mode, parse_shard_mode(config.get_string("shard_mode")));
  return Mesh::from_maxtext(ici, num_devices,
                            mode == ShardMode::kExplicit ? AxisType::kExplicit : AxisType::kAuto);
}

Status check_mesh_matches_config(const Config& config, const Mesh& mesh) {
  for (const std::string& axis : maxtext_mesh_axes()) {
    const std::string key = ici_key(axis), dkey = dcn_key(axis);
    const bool dcn = dcn_factor(config, axis) != 1;
    if (axis != "stage" && !config.has_override(key) && !dcn) continue;
    const int64_t ici = config.get_int(key);
    if (ici == -1) continue;
    const int64_t want = ici * dcn_factor(config, axis);
    if (want == mesh.axis_size(axis)) continue;
    if (dcn)  // the axis spans slices: MaxText's size is ici x dcn
      return invalid_argument(
          "config: {}={} x {}={} makes the '{}' axis {} devices but the mesh's has size {}; the "
          "trainer runs on the mesh it is given, so make them equal (sl.mesh{{{}={}}})",
          key, ici, dkey, config.get_int(dkey), axis, want, mesh.axis_size(axis), axis, want);
    return invalid_argument(
        "config: {}={} but the mesh's '{}' axis has size {}; the trainer runs on the mesh it is "
        "given, so make them equal (sl.mesh{{{}={}}} or {}={})",
        key, want, axis, mesh.axis_size(axis), axis, want, key, mesh.axis_size(axis));
  }
  return ok_status();
}

Status check_mesh_fits_model(const ResolvedConfig& config, const Mesh& mesh) {
  const int64_t ep = mesh.axis_size("expert");
  const int64_t E = config.model.moe.num_experts;
  if (config.model.moe.enabled() && ep > 1 && E % ep != 0)
    return invalid_argument(
        "config: the mesh's 'expert' axis of size {} does not divide num_experts {} (each device "
        "of an `expert` group holds num_experts / {} experts; ici_expert_parallelism x "
        "dcn_expert_parallelism must divide num_experts)",
        ep, E, ep);
  return ok_status();
}

TrainingTflops calculate_tflops_training_per_device(const ModelConfig& m, double B, int64_t seq,
                                                    int64_t grad_accum, bool halved) {
  const double S = static_cast<double>(seq), E = static_cast<double>(m.emb_dim);
  const double mlp = static_cast<double>(m.mlp_dim), L = static_cast<double>(m.num_decoder_layers);
  const double Hq = static_cast<double>(m.num_query_heads), Hkv = static_cast<double>(m.num_kv_heads);
  const double hd = static_cast<double>(m.head_dim), V = static_cast<double>(m.vocab_size);
  const double n_act = static_cast<double>(m.mlp_activations.size());
  // MoE (mixtral): (gate + ffn(moe_mlp) x k) per layer, capacity padding not counted.
  const double ffn = m.moe.enabled() ? moe_ffn_flops(m, B, S)
                                     : 2 * B * S * mlp * E * n_act + 2 * B * S * mlp * E;
  double qkv = 2 * B * S * E * (Hq + 2 * Hkv) * hd;
  double proj = 2 * B * S * E * Hq * hd;
  double causal_attention = 4 * B * S * S * Hq * hd / (halved ? 2 : 1);
  if (m.is_mla()) {  // calculate_mla_tflops_per_device (always halved for the causal mask)
    const MlaFlops f = mla_flops(m, B, S);
    qkv = f.qkv;
    proj = f.projection;
    causal_attention = f.causal_attention;
  }
  const double embedding = 2 * B * S * E * V;
  TrainingTflops t;
  t.learnable = (ffn * L + (qkv + proj) * L + embedding) * 3 / 1e12 * static_cast<double>(grad_accum);
  t.attention = causal_attention * L * 3 / 1e12 * static_cast<double>(grad_accum);
  t.total = t.learnable + t.attention;
  return t;
}

}  // namespace eng
