// engine/train/plan.cpp: the config's mesh on named hardware, a shape-only compile, the
// predicted step time and MaxText's TFLOP count.
#include "engine/train/plan.h"

#include <fmt/format.h>

namespace eng {

PredictionRow prediction_row(const Prediction& p) {
  PredictionRow row;
  row.topology = p.topology;
  row.num_slices = p.num_slices;
  row.step_time_s = p.step_time_s;
  row.tflops_per_device = p.tflops_per_device;
  row.tflops_per_s_per_device = p.tflops_per_s_per_device;
  row.tokens_per_s_per_device = p.tokens_per_s_per_device;
  row.mfu = p.mfu;
  row.fits = p.fits;
  row.peak_bytes = p.peak_bytes;
  row.hbm_bytes = p.hbm_bytes;
  row.bound = p.bound;
  row.compute_s = p.compute_s;
  row.collective_s = p.collective_s;
  row.exposed_collective_s = p.exposed_collective_s;
  for (const PredictedCompute& k : p.compute)
    row.parts.push_back({"compute", k.op_class, k.seconds, 0, k.flops, k.bytes});
  for (const PredictedCollectives& k : p.collectives)
    row.parts.push_back({"collective", k.axes, k.seconds, k.exposed_seconds, 0, k.bytes});
  if (p.host_transfers.count > 0)  // host offload's moves, both directions of the host link
    row.parts.push_back({"host_offload", "host", p.host_transfers.seconds,
                         p.host_transfers.exposed_seconds, 0, p.host_transfers.bytes});
  return row;
}

Result<PhysicalMesh> physical_mesh_from_config(const Config& config) {
  const std::string name = config.get_string("compile_topology");
  if (name.empty())
    return invalid_argument("plan: compile_topology is not set; name the hardware ({})",
                            known_topology_families());
  ENG_ASSIGN_OR_RETURN(Topology t,
                       topology_from_name(name, config.get_int("compile_topology_num_slices")));
  std::vector<int64_t> ici, dcn;
  for (const std::string& axis : maxtext_mesh_axes()) {
    ici.push_back(config.get_int(ici_key(axis)));
    dcn.push_back(config.get_int(dcn_key(axis)));
  }
  ENG_ASSIGN_OR_RETURN(ShardMode mode, parse_shard_mode(config.get_string("shard_mode")));
  return lay_out_mesh(t, maxtext_mesh_axes(), std::move(ici), std::move(dcn),
                      mode == ShardMode::kExplicit ? AxisType::kExplicit : AxisType::kAuto);
}

Result<Plan> plan_for_topology(const Config& config, const PlanOptions& options) {
  Plan plan;
  ENG_ASSIGN_OR_RETURN(plan.physical, physical_mesh_from_config(config));
  const Mesh& mesh = plan.physical.mesh;
  // The trainer checks the ici_* keys against its mesh; an axis that also spans slices has
  // size ici x dcn, so the copy it gets says that size.
  Config c = config;
  for (const AxisPlacement& a : plan.physical.axes) {
    if (a.dcn_size > 1) ENG_RETURN_IF_ERROR(c.set(ici_key(a.axis), a.ici_size * a.dcn_size));
    if (c.get_int(dcn_key(a.axis)) != 1)  // folded into ici_* (the trainer's mesh reads both)
      ENG_RETURN_IF_ERROR(c.set(dcn_key(a.axis), int64_t{1}));
  }
  if (c.get_int("num_devices") != -1 && c.get_int("num_devices") != mesh.num_devices())
    return invalid_argument("plan: num_devices={} but {} has {} devices", c.get_int("num_devices"),
                            plan.physical.topology.to_string(), mesh.num_devices());
  ENG_RETURN_IF_ERROR(
      global_batch_size(c.get_float("per_device_batch_size"), mesh.num_devices()).status());
  TrainerOptions topts;
  topts.shape_only = true;
  topts.store = options.store;
  topts.argv = options.argv;
  topts.script = options.script;
  topts.record_shape_only = options.record_run;
  topts.traced = options.traced;
  ENG_ASSIGN_OR_RETURN(plan.trainer, Trainer::create(c, mesh, topts));
  ENG_ASSIGN_OR_RETURN(plan.exe, plan.trainer->compile());
  PredictOptions popts;
  popts.attention_block_q = c.get_int("sa_block_q");
  popts.attention_block_kv = c.get_int("sa_block_kv");
  popts.attention_block_q_dkv = c.get_int("sa_block_q_dkv");
  popts.attention_block_kv_dkv = c.get_int("sa_block_kv_dkv");
  popts.attention_block_q_dq = c.get_int("sa_block_q_dq");
  popts.attention_block_kv_dq = c.get_int("sa_block_kv_dq");
  popts.attention_fused_bwd = c.get_bool("sa_use_fused_bwd_kernel");
  if (popts.attention_block_q < 1 || popts.attention_block_kv < 1)
    return invalid_argument("plan: sa_block_q and sa_block_kv must be >= 1, got {} and {}",
                            popts.attention_block_q, popts.attention_block_kv);
  for (const char* key : {"sa_block_q_dkv", "sa_block_kv_dkv", "sa_block_q_dq", "sa_block_kv_dq"})
    if (c.get_int(key) < 1)
      return invalid_argument("plan: {} must be >= 1, got {}", key, c.get_int(key));
  ENG_ASSIGN_OR_RETURN(plan.predicted, predict_step(*plan.exe, plan.physical, popts));

  const ResolvedConfig& rc = plan.trainer->config();
  const double per_device_batch =
      static_cast<double>(rc.global_batch_size) / static_cast<double>(mesh.num_devices());
  const TrainingTflops tf = calculate_tflops_training_per_device(
      rc.model, per_device_batch, rc.max_target_length, 1, options.causal_attention_halved);
  Prediction& p = plan.predicted;
  p.tflops_per_device = tf.total;
  if (p.step_time_s > 0) {
    p.tflops_per_s_per_device = tf.total / p.step_time_s;
    p.tokens_per_s_per_device =
        per_device_batch * static_cast<double>(rc.max_target_length) / p.step_time_s;
    p.mfu = p.tflops_per_s_per_device / plan.physical.topology.chip.maxtext_peak_tflops;
  }
  plan.compile_id = plan.trainer->recorder().last_analysis_compile_id();
  if (options.store != nullptr && plan.compile_id > 0) {
    ENG_RETURN_IF_ERROR(options.store->record_prediction(plan.compile_id, prediction_row(p)));
  }
  return plan;
}

}  // namespace eng
