// engine/model/mla.h: MaxText's multi-head latent attention (attention_type: mla; DeepSeek-V2/V3),
// traced from existing IR ops (matmul, rmsnorm, slice, reshape, rope, repeat_kv, concat, pad,
// attention). Read from MaxText's src/maxtext/layers/attention_mla.py (class MLA) at commit
// e591f30 (2026-08).
//
// Glossary: B batch, T sequence, E emb_dim, H heads, Rq q_lora_rank, Rkv kv_lora_rank,
// Dn qk_nope_head_dim, Dr qk_rope_head_dim, Dv v_head_dim.
// Parameters (under .../self_attention/, MaxText's names, shapes and logical axes):
//   wq_a/kernel   (E, Rq)           (embed, q_lora_up_proj)     q_lora_rank > 0
//   q_norm/scale  (Rq)              (norm,)                     q_lora_rank > 0
//   wq_b/kernel   (Rq, H, Dn + Dr)  (q_lora, q_heads, kv)       q_lora_rank > 0
//   query/kernel  (E, H, Dn + Dr)   (embed, q_heads, kv)        q_lora_rank == 0
//   wkv_a/kernel  (E, Rkv + Dr)     (embed, kv_lora_up_proj)
//   kv_norm/scale (Rkv)             (norm,)
//   wkv_b/kernel  (Rkv, H, Dn + Dv) (kv_lora, kv_heads, kv_head_dim)
//   out/kernel    (H, Dv, E)        (heads, kv, embed)
// Forward (train mode):
//   q = wq_b(rmsnorm(wq_a h)) [or query h]; q = [q_nope, rope(q_pe)]          (B, T, H, Dn+Dr)
//   kv = wkv_a h = [c, k_pe]; c = rmsnorm(c) (mla_kv); [k_nope, v] = wkv_b c
//   k = [k_nope, rope(k_pe) broadcast over the H heads]                       (B, T, H, Dn+Dr)
//   out = out(attention(q, k, v, softmax_scale))                                 (B, T, E)
// rope_type yarn: yarn_rope below. Checkpoint names as MaxText's: query_wa_proj, mla_q, kv_wa_proj,
// mla_kv, query_proj, key_proj, value_proj, context, out_proj. The attention op takes q, k, v of
// one head dim: when Dv != Dn + Dr the narrower side is zero-padded (exact: zero columns add
// nothing to q.k, and the padded context columns are sliced off); the engine's cost model then
// counts the attention at max(Dn + Dr, Dv), MaxText's TFLOP count (mla_flops) at its own dims.
#pragma once

#include <vector>

#include "engine/base/status.h"
#include "engine/model/llama.h"

namespace eng {

// attention_type "global" or "mla"; MLA's sizes positive, Dr even, num_kv_heads == heads, no
// use_qk_norm, no gpt3 (MaxText's asserts). The MLA keys on a non-MLA model are refused
// when they differ from base.yml's defaults (they would have no effect).
Status validate_mla(const ModelConfig& m);

// The attention weights of an MLA layer, in declaration order (replacing query, key, value, out).
std::vector<LayerWeight> mla_attention_weights(const ModelConfig& m);
int64_t mla_attention_params(const ModelConfig& m);  // per layer

// MaxText's softmax_scale (mla_config.h).
double mla_softmax_scale(const ModelConfig& m);

// The attention block's output (B, T, E) on h = rmsnorm(x) (B, T, E): out_proj.
ValueId trace_mla_attention(Builder& b, const ModelConfig& m, const LlamaLayerParams& lp, ValueId h,
                            ValueId positions, ValueId segment_ids, bool stage_as_data);

// MaxText's YarnRotaryEmbedding frequencies (embeddings.py freqs_cis) of the Dr/2 rope pairs:
// base_i = theta^(-2i/Dr) (theta = rope_max_timescale), mixed with base_i / rope_factor by a
// linear ramp between the correction dims of beta_fast and beta_slow (floored / ceiled with
// rope_truncate): f_i = base_i / rope_factor x ramp_i + base_i x (1 - ramp_i).
std::vector<double> yarn_frequencies(const ModelConfig& m);
// x (B, T, heads, Dr) rotated by yarn: pair i = (x[2i], x[2i+1]) by angle pos x f_i. Built from
// the rope op on contiguous runs of pairs whose frequencies are geometric (each run one rope op
// with its own timescales), concatenated; attention scores equal MaxText's (its output layout
// [real, imag] is a permutation applied to query and key alike).
ValueId yarn_rope(Builder& b, const ModelConfig& m, ValueId x, ValueId positions);

// MaxText's calculate_mla_tflops_per_device (maxtext_utils.py, no indexer): the per-layer
// FLOPs of the q and kv projections, the causal attention (already halved), the out projection.
struct MlaFlops {
  double qkv = 0, causal_attention = 0, projection = 0;
};
MlaFlops mla_flops(const ModelConfig& m, double per_device_batch, double seq);

}  // namespace eng
