// engine/model/moe.h: MaxText's routed mixture-of-experts block (layers/moe.py, RoutedMoE:
// with sparse_matmul=false and capacity_factor > 0 dense_matmul's dispatch with capacity, with
// sparse_matmul=true the dropless sparse_matmul: moe_top_k, moe_permute, ragged_dot, without
// expert parallelism; docs/sharding.md "Dropless dispatch"), traced in a decoder layer's MLP
// place.
//
// Parameters of one layer (MaxText's paths under the layer; scanned: the `layers` dim at
// param_scan_axis as every layer weight):
//   MoeBlock_0/gate/kernel  (emb, E)       (embed_moe, None)
//   MoeBlock_0/wi_0         (E, emb, M)    (exp, embed_moe, mlp_moe)
//   MoeBlock_0/wi_1         (E, emb, M)    (exp, embed_moe, mlp_moe)
//   MoeBlock_0/wo           (E, M, emb)    (exp, mlp_moe, embed_moe)
// with shard_exp_on_fsdp the expert dim takes embed_moe and the embed dim None. qwen3_moe
// (MaxText's Qwen3MoeDecoderLayer) names the block moe_block instead of MoeBlock_0.
//
// The dense dispatch (B batch, S sequence, E experts, C capacity, M model width, H expert width):
//   logits = h . gate                              (B, S, E)
//   combine, lb, load = moe_route(logits)          (B, S, E, C); (); (2, E)
//   x_e = moe_dispatch(combine != 0, h)            (E, B, C, M)  constrained to activation_exp
//   y_e = wo(silu(wi_0 x_e) * wi_1 x_e)            (E, B, C, M)  one GEMM per expert
//   out = moe_combine(combine, y_e)                (B, S, M)
// The constraint moves `expert` from the tokens' batch dim to the experts' dim: the
// partitioned program has an all-to-all over `expert` there and one back before the combine.
// Every tensor of the block is in h's dtype (bf16: the weights cast where used, the GEMMs
// accumulating in f32, as MaxText's RoutedMoE with float32_gate_logits false); the routing's
// math, the router bias, lb and load are f32 (docs/precision.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/ir/builder.h"
#include "engine/model/llama.h"

namespace eng {

// What the MoE layers of one trace leave for the loss and the metrics.
struct MoeOutputs {
  std::vector<ValueId> lb;    // () per layer: load-balance loss (weight included)
  std::vector<ValueId> load;  // (2, E) per layer: tokens routed to each expert; dropped
};

// Bad MoE settings of model m name both values (num_experts_per_tok > num_experts, the
// dispatch mode, ...). Also called by ModelConfig::validate.
Status validate_moe(const ModelConfig& m);

// Slots per expert per sequence of length S (MaxText's generate_masks):
// int(max(ceil(S * k / E) * capacity_factor, capacity_factor)).
int64_t moe_capacity(const MoeConfig& c, int64_t S);

// The MoE layer weights in LlamaLayerParams order: wi_0, wi_1, wo, gate.
std::vector<LayerWeight> moe_layer_weights(const ModelConfig& m);

// init_param's fan-in of an expert weight, or 0 for other weights. MaxText initialises
// wi/wo (E, a, b) with in_axis 0 and out_axis 1, so jax's variance_scaling counts the last
// dim as a receptive field: fan_in = E * b.
int64_t moe_kernel_fan_in(const ValueInfo& param);

// The block on h (B, S, emb) (the post-attention RMSNorm's output); returns (B, S, emb).
ValueId trace_moe_block(Builder& b, const ModelConfig& m, const LlamaLayerParams& lp, ValueId h,
                        bool stage_as_data, MoeOutputs& out);

// routed_bias_update_rate > 0 (MaxText's aux-loss-free balancing, train.py after the optimizer
// step): each MoE layer's gate/bias in new_params (the updated parameters, p.all's order) gets
// + rate x sign(choices / E - count_e), count_e the layer's top-k choices of expert e over the
// whole batch (its load row 0), choices = B x S x num_experts_per_tok. Scanned, the layers'
// updates stack at param_scan_axis. Nothing without routed_bias or with the rate 0.
void apply_routed_bias_updates(Builder& b, const ModelConfig& m, const LlamaParams& p,
                               const std::vector<ValueId>& loads, int64_t choices,
                               std::vector<ValueId>& new_params);

// mean over layers of out.lb.
ValueId mean_lb_loss(Builder& b, const MoeOutputs& out);

// The MoE presets (mixtral-tiny, mixtral-8x7b, mixtral-8x22b, qwen3-235b-a22b, qwen3-tiny);
// model_preset() asks here.
std::vector<std::string> moe_preset_names();
std::optional<ModelConfig> moe_model_preset(const std::string& name);

// Model FLOPs of the MoE MLPs per step (MaxText's calculate_tflops_training_per_device for
// mixtral-style blocks: (gate + ffn(moe_mlp) * k) per layer), forward only. deepseek: its
// calculate_routed_and_shared_ffn_tflops_per_device (dense layers' ffn(mlp), MoE layers'
// gate + (k + shared_experts) x ffn(moe_mlp)) averaged per layer.
double moe_ffn_flops(const ModelConfig& m, double B, double S);

}  // namespace eng
