// engine/model/pipeline.h: MaxText's pipeline module (layers/pipeline.py), traced into the
// global program over the `stage` mesh axis; the schedule is engine/model/pipeline_schedule.h.
//
// Layout: every layer weight kind is ONE parameter (stages, layers_per_stage, ...)
// (params/decoder/layers/<sub>, logical ("layers", None, ...): `layers` -> `stage`), so each
// device holds only its stage's layers; a circular pipeline (R > 1 repeats) has
// (repeats, stages, layers_per_stage, ...) with logical ("circular_repeats", "layers", None,
// ...), as MaxText's circular vmap stacks it. Either way the leading dims flattened row-major
// are the layer index l = r*S*lps + s*lps + j, so the stack is the scanned (L, ...) array.
// Schedule: M microbatches (microbatch i = batch rows b with b % M == i), fully unrolled
// over M*R + d*(S-1) iterations; at iteration t stage s runs the cell the schedule gives (a
// bubble slot when there is none: zeros in, never collected). Each iteration runs the stage
// body vmapped over the (S, micro, T, E) state (Builder::set_vmap: each device runs its own
// stage) with each stage's weights of its current repeat, collects the last stage's output
// of the last repeat, and forwards the output (kShift: a collective permute over `stage`)
// d iterations later; stage S-1's output for the next repeat reaches stage 0 by a permute
// S-1 -> 0 (with the shift: MaxText's _rotate_right; kept until used: its circ_storage).
//
// pipeline_parallel_layers P < L (MaxText's decoders.py): the pipeline runs the first P layers
// (R = P / (S * lps)); the other L - P run after it as scanned layers, MaxText's
// scan_decoder_layers named "layers_outside_pipeline": one weight per kind
// params/decoder/layers_outside_pipeline/<sub> with the layer dim (L - P) at param_scan_axis,
// logical name "layers_outside_pipeline" there (no rule: unsharded; the other dims by the
// ordinary rules, so these weights are replicated over `stage`). Their activations use
// MaxText's logical_axis_rules_pp_act_as_dp (`stage` acts as data), so each device runs them
// on its 1/S of the batch rows, not redundantly on every stage.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/ir/builder.h"
#include "engine/model/pipeline_schedule.h"
#include "engine/sharding/logical_rules.h"

namespace eng {

struct ModelConfig;
struct LlamaParams;
struct LlamaLayerParams;

// Declares the stacked pipeline weights (appending them to `all`, in LlamaLayerParams order).
LlamaLayerParams declare_pipeline_layer_params(Builder& b, const ModelConfig& m,
                                               std::vector<ValueId>& all);
// Declares the layers_outside_pipeline weights (L - P layers; m.pipelined_layers() < L).
LlamaLayerParams declare_outside_pipeline_params(Builder& b, const ModelConfig& m,
                                                 std::vector<ValueId>& all);

// The decoder layers as a pipeline, then the layers outside it (P < L): x (B, T, E),
// positions (B, T)[, segment_ids (B, T)] -> (B, T, E).
ValueId trace_pipeline_decoder(Builder& b, const ModelConfig& m, const LlamaParams& p, ValueId x,
                               ValueId positions, ValueId segment_ids = kNoValue);

// A (B, T) per-row batch array (targets, positions, segment ids) in the row order the
// pipeline hands the loss head (and the layers after it): stage s's block holds microbatches
// [s*M/S, (s+1)*M/S) (microbatch i = rows b with b % M == i), so each finished microbatch
// reaches one stage by one permute. The loss is a mean over rows: the order does not change
// it. Sharded (stage, data, fsdp, ...) on B, taken from the array's rows by local slices.
ValueId pipeline_output_rows(Builder& b, const ModelConfig& m, ValueId rows);

// "params/decoder/layers/mlp/wo/kernel" -> "mlp/wo/kernel"; nullopt for other names.
std::optional<std::string> pipeline_param_subpath(const std::string& name);
// "params/decoder/layers_outside_pipeline/mlp/wo/kernel" -> "mlp/wo/kernel"; else nullopt.
std::optional<std::string> outside_pipeline_subpath(const std::string& name);
// The logical name of a layers_outside_pipeline weight's layer dim (MaxText's PARTITION_NAME).
inline constexpr const char* kLayersOutsidePipeline = "layers_outside_pipeline";

// Checks a pipeline shape: layers divisible by stages, microbatches dividing the batch and
// divisible by stages; errors name both numbers.
Status validate_pipeline(int64_t num_layers, int64_t stages, int64_t microbatches,
                         int64_t global_batch);

// The rules a pipelined plan uses, as MaxText's types.py rewrites rule 2 when pipelining: the
// batch of the logits and loss (`activation_embed_and_logits_batch`) gets `stage` first, so the
// loss head is split over stages (stage-major, in pipeline_output_rows order) as well as over
// data/fsdp. (The pipelined batch arrays use activation_batch instead: llama.h
// input_data_logical_axes.) Rules without that name are returned unchanged.
//
// outside_layers (pipeline_parallel_layers set): every rule is also appended under its
// pp_act_as_dp_name with MaxText's logical_axis_rules_pp_act_as_dp applied (utils/
// sharding.py: `stage` removed, and inserted just before `data` where the rule has it), the
// rules the layers after the pipeline resolve their activations by: they take the pipeline's
// output rows and hand the loss head its sharding with no reshard.
LogicalAxisRules pipeline_logical_axis_rules(const LogicalAxisRules& rules,
                                             bool outside_layers = false);
// "activation_batch" -> "activation_batch@pp_act_as_dp": the name a layer after the pipeline
// gives its activations, resolved by the pp_act_as_dp rules above.
std::string pp_act_as_dp_name(const std::string& logical);

// The schedule a (validated) pipelined model config traces.
PipelineSchedule pipeline_schedule(const ModelConfig& m);

// How many leading dims of a pipeline parameter index layers (3 for a circular pipeline's
// (R, S, lps, ...), 2 for (S, lps, ...)); their row-major flattening is the layer index.
int pipeline_layer_dims(const ValueInfo& param);

}  // namespace eng
