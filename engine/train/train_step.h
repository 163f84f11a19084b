// engine/train/train_step.h: forward + backward + AdamW update traced as ONE Program.
//
// Arguments, in order: params (ArgRole::kParam), opt_state/mu/<path> (kOptMu),
// opt_state/nu/<path> (kOptNu), step (kStep, i32 scalar: optax's count), then the six
// batch arrays (kBatch). Outputs: every param, mu, nu and step updated in place (aliased),
// then the metrics MaxText's train_step returns:
//   learning/loss, learning/total_weights, learning/raw_grad_norm, learning/grad_norm
//   (after clipping), learning/param_norm (of the new params), learning/current_learning_rate.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/compile/executable.h"
#include "engine/ir/program.h"
#include "engine/mesh/mesh.h"
#include "engine/train/config.h"

namespace eng {

// A named position in the program: an argument index (batch arrays) or an output index
// (metrics). Callers find arrays by name, never by offset arithmetic.
struct NamedSlot {
  std::string name;  // "inputs", "learning/loss"
  int index = -1;    // program argument or output index
};
struct NamedLayout {
  std::vector<NamedSlot> slots;           // in program order
  int find(std::string_view name) const;  // index, or -1 when absent
  int at(std::string_view name) const;    // REQUIRES: present (a bug otherwise)
  size_t size() const { return slots.size(); }
};

struct TrainStepLayout {
  int num_params = 0;           // args [0, n) params, [n, 2n) mu, [2n, 3n) nu
  int step_arg = -1;            // index of the step argument
  int first_batch_arg = -1;     // six batch args from here
  std::vector<std::string> metric_names;  // program outputs after the aliased state
  int first_metric_output = -1;
  NamedLayout batch;    // "inputs" ... "targets_segmentation" -> argument index
  NamedLayout metrics;  // "learning/loss" ... -> output index
};

Program build_train_step(const ResolvedConfig& config, TrainStepLayout* layout);

// A traced train_step and its layout, shared by shape-only plans of one config on several
// meshes (search.h): the trace reads the mesh only through the device count and the pipeline
// and expert axes, so plans that differ in the data, fsdp, fsdp_transpose or tensor split
// trace the same program.
struct TracedTrainStep {
  Program program;
  TrainStepLayout layout;
};

// CompileOptions from the config's sharding keys: shard_mode, shard_optimizer_over_data,
// skip_trivial_specs, and logical_axis_rules merged into MaxText's defaults (replacing them
// with override_logical_axis_rules).
Result<CompileOptions> compile_options_from_config(const Config& config);
// MaxText's config key for a mesh axis: ici_<axis>_parallelism, ici_pipeline_parallelism for stage.
std::string ici_key(const std::string& axis);
// MaxText's dcn key for a mesh axis: dcn_<axis>_parallelism, dcn_pipeline_parallelism for stage.
std::string dcn_key(const std::string& axis);
// An axis's size over slices, dcn_<axis>_parallelism, for a mesh of simulated devices (no
// slices): MaxText's mesh axis is ici x dcn devices, so the trainer's mesh folds it in; -1
// (dcn_data_parallelism's default: the remaining slices) is 1 without named hardware.
int64_t dcn_factor(const Config& config, const std::string& axis);
// MaxText's mesh from the 12 ici_*_parallelism keys (stage: ici_pipeline_parallelism) over
// num_devices; shard_mode explicit gives Explicit axes.
Result<Mesh> mesh_from_config(const Config& config, int64_t num_devices);
// The trainer takes its mesh explicitly, so an ici_*_parallelism key the user set (and
// ici_pipeline_parallelism always: it decides whether the decoder is traced as a pipeline)
// must agree with the mesh's axis, or the key would be silently ignored. -1 matches any size.
Status check_mesh_matches_config(const Config& config, const Mesh& mesh);
// What the model needs of the mesh it runs on, read from the mesh's axes (not the ici_* keys,
// which the user may leave unset): the dropless MoE dispatch (sparse_matmul) refuses an
// `expert` axis of size > 1, whose ragged all-to-all is not built.
Status check_mesh_fits_model(const ResolvedConfig& config, const Mesh& mesh);

// MaxText's calculate_tflops_training_per_device for a dense llama (maxtext_utils.py):
// returns {total, learnable, attention} TFLOPs per device per step.
struct TrainingTflops {
  double total = 0, learnable = 0, attention = 0;
};
// causal_attention_halved: MaxText since PR #1988 (2025-07) halves the attention count for
// the causal mask; tpu-recipes logs before it (v0.1.0-v0.1.4) count it whole.
TrainingTflops calculate_tflops_training_per_device(const ModelConfig& m, double per_device_batch,
                                                    int64_t seq_len,
                                                    int64_t gradient_accumulation_steps = 1,
                                                    bool causal_attention_halved = true);

}  // namespace eng
