// engine/model/presets.cpp: the model presets (MaxText's configs/models/<name>.yml values) and
// the nearest-name hint for an unknown model.
#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "engine/base/text.h"
#include "engine/model/llama.h"
#include "engine/model/moe.h"

namespace eng {

namespace {

struct Preset {
  const char* name;
  int64_t vocab, emb, heads, head_dim, mlp, layers;
  int64_t kv_heads = 0;                   // 0: = heads (multi-head attention)
  double rope_max_timescale = 10000.0;    // MaxText base.yml's default
};

// llama-tiny / llama-small: the shapes of bench/compare_torch.py's PyTorch reference tiny and
// small presets. The others are MaxText's configs/models/<name>.yml key for key (base_emb_dim,
// base_num_query_heads, base_num_kv_heads, head_dim, base_mlp_dim, base_num_decoder_layers,
// vocab_size, rope_max_timescale; every one has mlp_activations [silu, linear] and
// normalization_layer_epsilon 1e-5, this decoder's defaults). llama3-8b is MaxText's
// src/maxtext/configs/models/llama3-8b.yml at commit e591f30 (2026-08); mistral-7b's
// decoder_block "mistral" is the llama2 layer (MaxText models/mistral.py: the same four
// sub-modules and names). llama3.1-*: the rope is MaxText's LLaMARotaryEmbedding (below).
constexpr Preset kPresets[] = {
    {"llama-tiny", 256, 256, 4, 64, 704, 4},
    {"llama-small", 8192, 512, 8, 64, 1408, 8},
    {"llama2-7b", 32000, 4096, 32, 128, 11008, 32},
    {"llama2-13b", 32000, 5120, 40, 128, 13824, 40},
    {"llama2-70b", 32000, 8192, 64, 128, 28672, 80, 8},  // grouped-query: 8 kv heads
    {"llama3-8b", 128256, 4096, 32, 128, 14336, 32, 8, 500000.0},
    {"llama3.1-8b", 128256, 4096, 32, 128, 14336, 32, 8, 500000.0},
    {"llama3.1-70b", 128256, 8192, 64, 128, 28672, 80, 8, 500000.0},
    {"llama3.1-405b", 128256, 16384, 128, 128, 53248, 126, 8, 500000.0},
    {"mistral-7b", 32000, 4096, 32, 128, 14336, 32, 8, 1000000.0},
    {"default", 32000, 2048, 16, 128, 7168, 16},  // MaxText's model_name: "default" (base.yml)
};

// MaxText's decoder_block "gpt3" (engine/model/gpt3.h): gpt3-175b and gpt3-52k are
// configs/models/<name>.yml (trainable_position_size, mlp_activations [gelu],
// logits_via_embedding, use_iota_embed, fused_qkv, normalization_layer_epsilon 1e-5); gpt3-tiny
// is this project's trainable one (byte vocabulary, 2 layers). The ymls' optimizer keys
// (opt_type adam_pax and its betas) are not model keys here: adamw runs (docs/models.md).
struct Gpt3Preset {
  const char* name;
  int64_t vocab, emb, heads, head_dim, mlp, layers, positions;
};
constexpr Gpt3Preset kGpt3Presets[] = {
    {"gpt3-175b", 50304, 12288, 96, 128, 49152, 96, 16384},
    {"gpt3-52k", 1024, 16, 2, 8, 64, 1, 2048},
    {"gpt3-tiny", 256, 128, 4, 32, 512, 2, 1024},
};

// MaxText's decoder_block "deepseek" with attention_type "mla" (engine/model/mla.h):
// deepseek3-671b is configs/models/deepseek3-671b.yml key for key (head_dim is base.yml's 128,
// unused by MLA; rope_type yarn is MaxText's YarnRotaryEmbedding, engine/model/mla.h);
// deepseek-tiny is this project's trainable one (byte vocabulary, 1 dense + 2 MoE layers, the
// rope part rotated by the default RotaryEmbedding, v_head_dim < qk head dim as in V3).
struct DeepSeekPreset {
  const char* name;
  int64_t vocab, emb, heads, mlp, moe_mlp, layers, dense_layers, experts, per_tok;
  int64_t q_lora, kv_lora, nope, rope, v;
  const char* rope_type;
  double load_balance_loss_weight;
};
constexpr DeepSeekPreset kDeepSeekPresets[] = {
    {"deepseek3-671b", 129280, 7168, 128, 18432, 2048, 61, 3, 256, 8, 1536, 512, 128, 64, 128,
     "yarn", 0.0},
    {"deepseek-tiny", 256, 64, 4, 96, 32, 3, 1, 4, 2, 32, 16, 16, 8, 12, "default", 0.01},
};

std::optional<ModelConfig> deepseek_model_preset(const std::string& name) {
  for (const DeepSeekPreset& p : kDeepSeekPresets) {
    if (name != p.name) continue;
    ModelConfig m;
    m.name = p.name;
    m.decoder_block = "deepseek";
    m.vocab_size = p.vocab;
    m.emb_dim = p.emb;
    m.num_query_heads = m.num_kv_heads = p.heads;
    m.head_dim = 128;  // base.yml's; MLA's head dims are its own keys
    m.mlp_dim = p.mlp;
    m.num_decoder_layers = p.layers;
    m.normalization_layer_epsilon = 1e-6;
    m.rope_type = p.rope_type;
    m.moe.num_experts = p.experts;
    m.moe.num_experts_per_tok = p.per_tok;
    m.moe.moe_mlp_dim = p.moe_mlp;
    m.moe.shared_experts = 1;
    m.moe.first_num_dense_layers = p.dense_layers;
    m.moe.routed_score_func = "sigmoid";
    m.moe.routed_bias = true;
    m.moe.routed_scaling_factor = 2.5;
    m.moe.load_balance_loss_weight = p.load_balance_loss_weight;
    m.attention_type = "mla";
    m.mla.q_lora_rank = p.q_lora;
    m.mla.kv_lora_rank = p.kv_lora;
    m.mla.qk_nope_head_dim = p.nope;
    m.mla.qk_rope_head_dim = p.rope;
    m.mla.v_head_dim = p.v;
    return m;
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  for (const Gpt3Preset& p : kGpt3Presets) names.push_back(p.name);
  for (const std::string& n : moe_preset_names()) names.push_back(n);
  for (const DeepSeekPreset& p : kDeepSeekPresets) names.push_back(p.name);
  return names;
}

std::vector<std::string> nearest_model_names(const std::string& name, size_t n) {
  // Edit distance, ties broken by the longer common prefix ("llama3-70b": llama2-70b, then
  // llama3-8b and llama3.1-70b before llama2-7b).
  struct Scored {
    size_t distance, prefix;
    std::string name;
  };
  std::vector<Scored> scored;
  for (const std::string& p : model_preset_names()) {
    size_t prefix = 0;
    while (prefix < p.size() && prefix < name.size() && p[prefix] == name[prefix]) ++prefix;
    scored.push_back({edit_distance(name, p), prefix, p});
  }
  std::stable_sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    return a.distance != b.distance ? a.distance < b.distance : a.prefix > b.prefix;
  });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < n; ++i) out.push_back(scored[i].name);
  return out;
}

Result<ModelConfig> model_preset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig m;
    m.name = p.name;
    m.vocab_size = p.vocab;
    m.emb_dim = p.emb;
    m.num_query_heads = p.heads;
    m.num_kv_heads = p.kv_heads > 0 ? p.kv_heads : p.heads;
    m.head_dim = p.head_dim;
    m.mlp_dim = p.mlp;
    m.num_decoder_layers = p.layers;
    m.rope_max_timescale = p.rope_max_timescale;
    return m;
  }
  for (const Gpt3Preset& p : kGpt3Presets) {
    if (name != p.name) continue;
    ModelConfig m;
    m.name = p.name;
    m.decoder_block = "gpt3";
    m.vocab_size = p.vocab;
    m.emb_dim = p.emb;
    m.num_query_heads = m.num_kv_heads = p.heads;
    m.head_dim = p.head_dim;
    m.mlp_dim = p.mlp;
    m.num_decoder_layers = p.layers;
    m.trainable_position_size = p.positions;
    m.mlp_activations = {"gelu"};
    m.logits_via_embedding = true;
    m.fused_qkv = true;
    m.use_iota_embed = true;
    return m;
  }
  if (std::optional<ModelConfig> m = moe_model_preset(name)) return *m;
  if (std::optional<ModelConfig> m = deepseek_model_preset(name)) return *m;
  return invalid_argument("unknown model '{}': the nearest known are {} (known models: {})", name,
                          fmt::join(nearest_model_names(name, 3), ", "),
                          fmt::join(model_preset_names(), ", "));
}

}  // namespace eng
