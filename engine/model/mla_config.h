// engine/model/mla_config.h: the multi-head latent attention keys of a model (MaxText's
// attention_type: mla; names and base.yml defaults); engine/model/mla.h traces the attention
// they describe.
#pragma once

#include <cstdint>

namespace eng {

struct MlaConfig {
  int64_t q_lora_rank = 0;         // 0: one query kernel (E, H, Dn + Dr); > 0: wq_a, q_norm, wq_b
  int64_t kv_lora_rank = 512;      // wkv_a's latent width (before the rope part)
  int64_t qk_nope_head_dim = 128;  // Dn: the query/key part without rope
  int64_t qk_rope_head_dim = 64;   // Dr: the rope part (the key's shared across heads)
  int64_t v_head_dim = 128;        // Dv
  // MaxText's softmax scale: (Dn + Dr)^-0.5, times mscale'^2 with
  // mscale' = 0.1 x mscale x ln(rope_factor) + 1 when max_position_embeddings >
  // original_max_position_embeddings (attention_mla.py, whatever rope_type is).
  double mscale = 1.0;
  double rope_factor = 40.0;
  int64_t max_position_embeddings = 163840;
  int64_t original_max_position_embeddings = 4096;
  // rope_type yarn (MaxText's YarnRotaryEmbedding, engine/model/mla.h yarn_frequencies): pairs
  // (2i, 2i+1) (rope_interleave true; false is not supported here), frequencies corrected
  // between the dims beta_fast and beta_slow rotate in original_max_position_embeddings.
  bool rope_interleave = true;
  double beta_fast = 32.0, beta_slow = 1.0;
  bool rope_truncate = true;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

}  // namespace eng
