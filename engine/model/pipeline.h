// engine/model/pipeline.h: MaxText's pipeline module (layers/pipeline.py), non-circular
// schedule, traced into the global program over the `stage` mesh axis.
//
// Layout: every layer weight kind is ONE parameter (stages, layers_per_stage, ...)
// (params/decoder/layers/<sub>, logical ("layers", None, ...): `layers` -> `stage`), so each
// device holds only its stage's layers. Layer l = s * layers_per_stage + j lives at [s, j].
// Schedule: M microbatches (microbatch i = batch rows b with b % M == i), S stages,
// M + S - 1 iterations; at iteration t stage s runs microbatch t - s (a bubble slot when out
// of range: zeros in, never collected). Each iteration runs the stage body vmapped over the
// (S, micro, T, E) state (Builder::set_vmap: each device runs its own stage), collects the
// last stage's output, and shifts the state one stage right (kShift: a collective permute
// over `stage`; stage 0 receives the next microbatch).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/ir/builder.h"

namespace eng {

struct ModelConfig;
struct LlamaParams;
struct LlamaLayerParams;

// Declares the stacked pipeline weights (appending them to `all`, in LlamaLayerParams order).
LlamaLayerParams declare_pipeline_layer_params(Builder& b, const ModelConfig& m,
                                               std::vector<ValueId>& all);

// The decoder layers as a pipeline: x (B, T, E), positions (B, T) -> (B, T, E).
ValueId trace_pipeline_decoder(Builder& b, const ModelConfig& m, const LlamaParams& p, ValueId x,
                               ValueId positions);

// "params/decoder/layers/mlp/wo/kernel" -> "mlp/wo/kernel"; nullopt for other names.
std::optional<std::string> pipeline_param_subpath(const std::string& name);

// Checks a pipeline shape: layers divisible by stages, microbatches dividing the batch and
// divisible by stages; errors name both numbers.
Status validate_pipeline(int64_t num_layers, int64_t stages, int64_t microbatches,
                         int64_t global_batch);

// Iterations of the schedule: M + S - 1 (MaxText's total_iterations with R = 1, delay 1).
inline int64_t pipeline_iterations(int64_t stages, int64_t microbatches) {
  return microbatches + stages - 1;
}

}  // namespace eng
