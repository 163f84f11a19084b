// engine/model/moe_config.h: the mixture-of-experts keys of a model (MaxText's names and
// base.yml defaults); engine/model/moe.h traces the block they describe.
#pragma once

#include <cstdint>
#include <string>

namespace eng {

struct MoeConfig {
  int64_t num_experts = 1;           // E; > 1 makes every decoder layer's MLP a routed MoE block
  int64_t num_experts_per_tok = 1;   // k (top-k)
  int64_t moe_mlp_dim = -1;          // base_moe_mlp_dim: each expert's hidden width (-1: mlp_dim)
  double capacity_factor = -1.0;     // > 0 with sparse_matmul=false: dense dispatch with capacity
                                     // (not read with sparse_matmul=true)
  bool sparse_matmul = true;         // MaxText's default: dropless
  // The dropless dispatch's receive buffer with expert parallelism (MaxText's
  // get_ragged_buffer_size): > 0: local rows x factor (an overflow drops rows); else the worst
  // case, local rows x min(expert parallelism, num_experts / num_experts_per_tok).
  double ragged_buffer_factor = -1.0;
  bool megablox = true;
  double load_balance_loss_weight = 0.0;
  // decoder_block "deepseek" only (MaxText's deepseek.py): a dense MLP of width
  // shared_experts x moe_mlp_dim beside the routed experts, its output added to theirs; the
  // first first_num_dense_layers layers with a dense MLP (mlp_dim), the others MoE.
  int64_t shared_experts = 0;
  int64_t first_num_dense_layers = 0;
  std::string routed_score_func;     // "", "softmax" or "sigmoid"
  // deepseek: the router's gate/bias (E), added to the scores for the top-k choice only.
  bool routed_bias = false;
  // MaxText's rule update of gate/bias after each step: + rate x sign(mean load - load)
  // (apply_routed_bias_updates, engine/model/moe.h); needs routed_bias.
  double routed_bias_update_rate = 0.0;
  double routed_scaling_factor = 1.0;  // deepseek's weights only (MaxText ignores it elsewhere)
  bool norm_topk_prob = false;         // not deepseek's (MaxText ignores it there)
  bool shard_exp_on_fsdp = false;    // wi/wo expert dim on embed_moe (fsdp), embed dim whole
  // Peel `expert` off the dispatched tensor's batch dim so the experts stay on `expert` and
  // the tokens move by all-to-all (MaxText's moe_dispatch_no_expert_sharding; default true
  // here, false in MaxText: docs/sharding.md "Mixture of experts").
  bool moe_dispatch_no_expert_sharding = true;

  bool enabled() const { return num_experts > 1; }
};

}  // namespace eng
