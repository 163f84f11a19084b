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
#include "engine/sharding/logical_rules.h"

namespace eng {

struct ModelConfig;
struct LlamaParams;
struct LlamaLayerParams;

// Declares the stacked pipeline weights (appending them to `all`, in LlamaLayerParams order).
LlamaLayerParams declare_pipeline_layer_params(Builder& b, const ModelConfig& m,
                                               std::vector<ValueId>& all);

// The decoder layers as a pipeline: x (B, T, E), positions (B, T)[, segment_ids (B, T)]
// -> (B, T, E).
ValueId trace_pipeline_decoder(Builder& b, const ModelConfig& m, const LlamaParams& p, ValueId x,
                               ValueId positions, ValueId segment_ids = kNoValue);

// "params/decoder/layers/mlp/wo/kernel" -> "mlp/wo/kernel"; nullopt for other names.
std::optional<std::string> pipeline_param_subpath(const std::string& name);

// Checks a pipeline shape: layers divisible by stages, microbatches dividing the batch and
// divisible by stages; errors name both numbers.
Status validate_pipeline(int64_t num_layers, int64_t stages, int64_t microbatches,
                         int64_t global_batch);

// The rules a pipelined plan uses (MaxText's types.py rewrites rule 2 when pipelining): the
// batch of the embedding, logits and loss (`activation_embed_and_logits_batch`, also the
// input batch's sharding) gets `stage`, so the loss head is split over stages as well as over
// data/fsdp. MaxText puts `stage` first (and swaps `stage` ahead of `data` in its mesh); here
// `stage` goes LAST, minor-most: the decoder layers' `activation_batch` (data, fsdp, ...
// without stage) is then a prefix of it, so entering the pipeline is an all_gather over
// `stage` of a per-device batch slice and leaving it is a local slice, and no value of
// global-batch size exists on one device (with `stage` first that reshard is not a prefix
// change and gathers the whole batch). Only which device holds which rows differs from
// MaxText; every value is the same. Rules without that name are returned unchanged.
LogicalAxisRules pipeline_logical_axis_rules(const LogicalAxisRules& rules);

// Iterations of the schedule: M + S - 1 (MaxText's total_iterations with R = 1, delay 1).
inline int64_t pipeline_iterations(int64_t stages, int64_t microbatches) {
  return microbatches + stages - 1;
}

}  // namespace eng
