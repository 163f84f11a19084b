// engine/model/mla.cpp: multi-head latent attention (engine/model/mla.h).
#include "engine/model/mla.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace eng {

namespace {

using Logical = std::vector<std::string>;

ValueId as_dtype(Builder& b, ValueId x, DType dtype) {
  return b.info(x).dtype == dtype ? x : b.convert(x, dtype);
}

}  // namespace

Status validate_mla(const ModelConfig& m) {
  const MlaConfig& c = m.mla;
  if (m.attention_type != "global" && m.attention_type != "mla")
    return unimplemented("model {}: attention_type '{}' is not supported (global or mla)", m.name,
                         m.attention_type);
  if (!m.is_mla()) {
    const MlaConfig d;
    if (c.q_lora_rank != d.q_lora_rank || c.kv_lora_rank != d.kv_lora_rank ||
        c.qk_nope_head_dim != d.qk_nope_head_dim || c.qk_rope_head_dim != d.qk_rope_head_dim ||
        c.v_head_dim != d.v_head_dim)
      return invalid_argument(
          "model {}: q_lora_rank={}, kv_lora_rank={}, qk_nope_head_dim={}, qk_rope_head_dim={}, "
          "v_head_dim={} are multi-head latent attention's keys, but attention_type is '{}' "
          "(set attention_type=mla, or leave them at base.yml's {}, {}, {}, {}, {})",
          m.name, c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim,
          c.v_head_dim, m.attention_type, d.q_lora_rank, d.kv_lora_rank, d.qk_nope_head_dim,
          d.qk_rope_head_dim, d.v_head_dim);
    if (m.rope_type == "yarn")
      return unimplemented(
          "model {}: rope_type yarn is run only with attention_type mla here "
          "(its rope part); attention_type is '{}'",
          m.name, m.attention_type);
    return ok_status();
  }
  if (m.decoder_block != "deepseek")  // MaxText builds MLA in deepseek's decoder layer only
    return invalid_argument(
        "model {}: attention_type mla with decoder_block {}: MaxText's "
        "multi-head latent attention is the deepseek decoder's "
        "(decoder_block=deepseek)",
        m.name, m.decoder_block);
  if (m.gpt3() || m.fused_qkv)
    return invalid_argument(
        "model {}: attention_type mla with decoder_block {} / fused_qkv={}: "
        "MaxText's MLA has separate projections (\"Fused QKV is not supported "
        "for MLA\") in the llama2-style decoders",
        m.name, m.decoder_block, m.fused_qkv);
  if (c.q_lora_rank < 0 || c.kv_lora_rank <= 0 || c.qk_nope_head_dim <= 0 ||
      c.qk_rope_head_dim <= 0 || c.v_head_dim <= 0)
    return invalid_argument(
        "model {}: MLA needs kv_lora_rank, qk_nope_head_dim, "
        "qk_rope_head_dim, v_head_dim > 0 and q_lora_rank >= 0, got {}, {}, "
        "{}, {}, {}",
        m.name, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,
        c.q_lora_rank);
  if (c.qk_rope_head_dim % 2 != 0)
    return invalid_argument("model {}: qk_rope_head_dim {} must be even for rotary embeddings",
                            m.name, c.qk_rope_head_dim);
  if (m.num_kv_heads != m.num_query_heads)
    return invalid_argument(
        "model {}: MLA requires num_kv_heads == num_query_heads (MaxText's "
        "assert), got {} and {}",
        m.name, m.num_kv_heads, m.num_query_heads);
  if (m.use_qk_norm)
    return invalid_argument(
        "model {}: use_qk_norm=true with attention_type mla: MLA's norms are "
        "q_norm and kv_norm on the low-rank projections",
        m.name);
  if (m.pipeline_stages > 1)
    return unimplemented("model {}: attention_type mla in a pipeline is not supported yet", m.name);
  if (m.rope_type == "yarn" && !c.rope_interleave)
    return unimplemented(
        "model {}: rope_type yarn with rope_interleave=false is not supported "
        "yet (only MaxText's default interleaved pairs)",
        m.name);
  if (m.rope_type == "yarn" && (!(c.beta_fast > 0) || !(c.beta_slow > 0)))
    return invalid_argument("model {}: yarn's beta_fast {:g} and beta_slow {:g} must be positive",
                            m.name, c.beta_fast, c.beta_slow);
  if (!(c.rope_factor > 0) || c.max_position_embeddings <= 0 ||
      c.original_max_position_embeddings <= 0)
    return invalid_argument(
        "model {}: rope_factor {:g}, max_position_embeddings {} and "
        "original_max_position_embeddings {} must be positive",
        m.name, c.rope_factor, c.max_position_embeddings, c.original_max_position_embeddings);
  return ok_status();
}

std::vector<LayerWeight> mla_attention_weights(const ModelConfig& m) {
  const MlaConfig& c = m.mla;
  const int64_t E = m.emb_dim, H = m.num_query_heads, Dqk = c.qk_head_dim();
  std::vector<LayerWeight> w;
  if (c.q_lora_rank > 0) {
    w.push_back({"self_attention/wq_a/kernel", {E, c.q_lora_rank}, {"embed", "q_lora_up_proj"}});
    w.push_back({"self_attention/q_norm/scale", {c.q_lora_rank}, {"norm"}});
    w.push_back(
        {"self_attention/wq_b/kernel", {c.q_lora_rank, H, Dqk}, {"q_lora", "q_heads", "kv"}});
  } else {
    w.push_back({"self_attention/query/kernel", {E, H, Dqk}, {"embed", "q_heads", "kv"}});
  }
  w.push_back({"self_attention/wkv_a/kernel",
               {E, c.kv_lora_rank + c.qk_rope_head_dim},
               {"embed", "kv_lora_up_proj"}});
  w.push_back({"self_attention/kv_norm/scale", {c.kv_lora_rank}, {"norm"}});
  w.push_back({"self_attention/wkv_b/kernel",
               {c.kv_lora_rank, H, c.qk_nope_head_dim + c.v_head_dim},
               {"kv_lora", "kv_heads", "kv_head_dim"}});
  w.push_back({"self_attention/out/kernel", {H, c.v_head_dim, E}, {"heads", "kv", "embed"}});
  return w;
}

int64_t mla_attention_params(const ModelConfig& m) {
  int64_t n = 0;
  for (const LayerWeight& w : mla_attention_weights(m)) {
    int64_t k = 1;
    for (int64_t d : w.dims) k *= d;
    n += k;
  }
  return n;
}

double mla_softmax_scale(const ModelConfig& m) {
  const MlaConfig& c = m.mla;
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_head_dim()));
  if (c.max_position_embeddings > c.original_max_position_embeddings) {
    const double mscale = 0.1 * c.mscale * std::log(c.rope_factor) + 1.0;
    scale *= mscale * mscale;
  }
  return scale;
}

ValueId trace_mla_attention(Builder& b, const ModelConfig& m, const LlamaLayerParams& lp, ValueId h,
                            ValueId positions, ValueId segment_ids, bool stage_as_data) {
  auto names = [&](Logical l) {
    if (stage_as_data)
      for (std::string& n : l) n = pp_act_as_dp_name(n);
    return l;
  };
  const MlaConfig& c = m.mla;
  const Logical kActivation =
      names({"activation_batch", "activation_norm_length", "activation_embed"});
  const Logical kHeads =
      names({"activation_batch", "activation_length", "activation_heads", "activation_kv"});
  const Logical kQLora = names({"activation_batch", "activation_length", "q_lora_up_proj"});
  const Logical kKvLora = names({"activation_batch", "activation_length", "kv_lora_up_proj"});
  const double eps = m.normalization_layer_epsilon;
  auto w = [&](ValueId p) { return as_dtype(b, p, m.dtype); };
  auto s = [&](ValueId p) { return as_dtype(b, p, DType::kF32); };
  const Shape& hs = b.info(h).shape;  // (B, T, E)
  const int64_t B = hs[0], T = hs[1], H = m.num_query_heads;
  const int64_t Dn = c.qk_nope_head_dim, Dr = c.qk_rope_head_dim, Dv = c.v_head_dim;
  const int64_t Dqk = Dn + Dr, D = std::max(Dqk, Dv);
  // MaxText's rope for the rope part: YarnRotaryEmbedding (yarn_rope), LLaMARotaryEmbedding for
  // llama3.1, else RotaryEmbedding.
  const bool yarn = m.rope_type == "yarn";
  const kern::RopeForm form{m.llama31_rope(), m.llama31_rope() && m.rope_use_scale};
  auto rope = [&](ValueId x) {
    if (yarn) return yarn_rope(b, m, x, positions);
    return b.rope(x, positions, m.rope_min_timescale, m.rope_max_timescale, false, form);
  };

  // Query: wq_b(q_norm(wq_a h)) or query h, (B, T, H, Dn + Dr); rope on its last Dr.
  ValueId q;
  if (lp.wq_a != kNoValue) {
    ValueId qa =
        b.checkpoint_name(b.constraint(b.matmul(h, w(lp.wq_a), 2, 1, false, false, kQLora), kQLora),
                          "query_wa_proj");  // (B, T, Rq)
    qa = b.checkpoint_name(b.rmsnorm(qa, s(lp.q_norm), eps).first, "mla_q");
    q = b.matmul(qa, w(lp.query), 2, 1, false, false, kHeads);
  } else {
    q = b.matmul(h, w(lp.query), 2, 1, false, false, kHeads);
  }
  q = b.constraint(q, kHeads);
  ValueId q_nope = b.slice(q, 3, 0, Dn);
  ValueId q_pe = b.constraint(rope(b.slice(q, 3, Dn, Dr)), kHeads);
  q = b.checkpoint_name(b.constraint(b.concat({q_nope, q_pe}, 3), kHeads), "query_proj");

  // Key/value: wkv_a h = [c (Rkv), k_pe (Dr)]; c normed (mla_kv), then wkv_b c = [k_nope, v].
  ValueId kv = b.checkpoint_name(
      b.constraint(b.matmul(h, w(lp.wkv_a), 2, 1, false, false, kKvLora), kKvLora),
      "kv_wa_proj");  // (B, T, Rkv + Dr)
  ValueId latent = b.checkpoint_name(
      b.rmsnorm(b.slice(kv, 2, 0, c.kv_lora_rank), s(lp.kv_norm), eps).first, "mla_kv");
  // The key's rope part: one head (B, T, 1, Dr), rotated, then shared by all H heads.
  ValueId k_pe = rope(b.reshape(b.slice(kv, 2, c.kv_lora_rank, Dr), Shape{B, T, 1, Dr}));
  k_pe = H > 1 ? b.constraint(b.repeat_kv(k_pe, H, kHeads[2]), kHeads) : k_pe;
  ValueId kvb = b.constraint(b.matmul(latent, w(lp.wkv_b), 2, 1, false, false, kHeads),
                             kHeads);  // (B, T, H, Dn + Dv)
  ValueId k = b.checkpoint_name(b.constraint(b.concat({b.slice(kvb, 3, 0, Dn), k_pe}, 3), kHeads),
                                "key_proj");
  ValueId v = b.checkpoint_name(b.constraint(b.slice(kvb, 3, Dn, Dv), kHeads), "value_proj");

  // One head dim for the attention op: the narrower side zero-padded (mla.h).
  if (Dv < D) v = b.constraint(b.pad(v, 3, 0, D, kHeads), kHeads);
  if (Dqk < D) {
    q = b.constraint(b.pad(q, 3, 0, D, kHeads), kHeads);
    k = b.constraint(b.pad(k, 3, 0, D, kHeads), kHeads);
  }
  ValueId o = b.attention(q, k, v, mla_softmax_scale(m), segment_ids).first;  // (B, T, H, D)
  if (Dv < D) o = b.constraint(b.slice(o, 3, 0, Dv), kHeads);
  o = b.checkpoint_name(o, "context");  // (B, T, H, Dv)
  return b.checkpoint_name(b.matmul(o, w(lp.out), 2, 2, false, false, kActivation),
                           "out_proj");  // (B, T, E)
}

std::vector<double> yarn_frequencies(const ModelConfig& m) {
  const MlaConfig& c = m.mla;
  const int64_t dim = c.qk_rope_head_dim, half = dim / 2;
  const double theta = m.rope_max_timescale, kPi = 3.14159265358979323846;
  auto correction_dim = [&](double rotations) {  // _find_correction_dim
    return static_cast<double>(dim) *
           std::log(static_cast<double>(c.original_max_position_embeddings) /
                    (rotations * 2 * kPi)) /
           (2 * std::log(theta));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.rope_truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // _linear_ramp_factor
  std::vector<double> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double base =
        1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(dim));
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double smooth = 1 - ramp;
    f[static_cast<size_t>(i)] = base / c.rope_factor * (1 - smooth) + base * smooth;
  }
  return f;
}

ValueId yarn_rope(Builder& b, const ModelConfig& m, ValueId x, ValueId positions) {
  const std::vector<double> f = yarn_frequencies(m);
  const int64_t half = static_cast<int64_t>(f.size());
  const double step = std::pow(m.rope_max_timescale,
                               2.0 / static_cast<double>(m.mla.qk_rope_head_dim));  // f_i / f_i+1
  const kern::RopeForm adjacent{true, false};
  std::vector<ValueId> parts;
  for (int64_t a = 0; a < half;) {
    int64_t w = 1;  // the run of pairs a .. a+w-1 with f_j = f_a / step^(j - a)
    while (a + w < half &&
           std::fabs(f[static_cast<size_t>(a + w - 1)] / f[static_cast<size_t>(a + w)] - step) <=
               1e-9 * step)
      ++w;
    // rope's timescale_j = min (max / min)^(2j / 2w) = (1 / f_a) step^j.
    const double min_ts = 1.0 / f[static_cast<size_t>(a)];
    const double max_ts = min_ts * std::pow(step, static_cast<double>(w));
    ValueId run = half == w ? x : b.slice(x, 3, 2 * a, 2 * w);
    parts.push_back(b.rope(run, positions, min_ts, max_ts, false, adjacent));
    a += w;
  }
  return parts.size() == 1 ? parts[0] : b.concat(parts, 3);
}

MlaFlops mla_flops(const ModelConfig& m, double per_device_batch, double seq) {
  const MlaConfig& c = m.mla;
  const double BS = per_device_batch * seq, E = static_cast<double>(m.emb_dim),
               H = static_cast<double>(m.num_query_heads);
  const double Dqk = static_cast<double>(c.qk_head_dim()),
               Dn = static_cast<double>(c.qk_nope_head_dim),
               Dr = static_cast<double>(c.qk_rope_head_dim), Dv = static_cast<double>(c.v_head_dim);
  const double Rq = static_cast<double>(c.q_lora_rank), Rkv = static_cast<double>(c.kv_lora_rank);
  MlaFlops f;
  const double q = c.q_lora_rank == 0 ? 2 * BS * E * H * Dqk : 2 * BS * (E * Rq + Rq * H * Dqk);
  const double kv = 2 * BS * (E * (Rkv + Dr) + Rkv * H * (Dn + Dv));
  f.qkv = q + kv;
  f.causal_attention = 2 * BS * seq * H * (Dqk + Dv) / 2;
  f.projection = 2 * BS * E * H * Dv;
  return f;
}

}  // namespace eng
