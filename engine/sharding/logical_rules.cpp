// engine/sharding/logical_rules.cpp: MaxText's default rules, flax's resolution, size-1 removal.
#include "engine/sharding/logical_rules.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "engine/base/hash.h"

namespace eng {

namespace {

std::string quoted(const std::string& s) { return fmt::format("'{}'", s); }

// A base.yml row with a list value: ['embed', ['fsdp', ...]] (also [] rows).
LogicalAxisRule list_rule(std::string logical, std::vector<std::string> axes) {
  return LogicalAxisRule{std::move(logical), std::move(axes), false};
}
// A base.yml row with a bare string value: ['layers', 'stage'].
LogicalAxisRule bare_rule(std::string logical, std::string axis) {
  return LogicalAxisRule{std::move(logical), {std::move(axis)}, true};
}

std::vector<LogicalAxisRule> maxtext_default_rules() {
  const std::vector<std::string> batch = {"data", "fsdp", "fsdp_transpose", "expert"};
  const std::vector<std::string> ctx = {"context", "context_usp_ulysses"};
  const std::vector<std::string> norm_len = {"tensor_sequence", "context", "context_usp_ulysses"};
  const std::vector<std::string> heads = {"tensor", "tensor_sequence", "autoregressive"};
  const std::vector<std::string> t_ts = {"tensor", "tensor_sequence"};
  const std::vector<std::string> fsdp_all = {"fsdp", "fsdp_transpose", "context",
                                             "context_usp_ulysses", "expert"};
  const std::vector<std::string> fsdp_no_t = {"fsdp", "context", "context_usp_ulysses", "expert"};
  const std::vector<std::string> mlp = {"fsdp_transpose", "tensor", "tensor_sequence",
                                        "autoregressive"};
  return {
      list_rule("circular_repeats", {}),  // 1
      list_rule("activation_embed_and_logits_batch",
                {"data", "stage", "fsdp", "fsdp_transpose", "expert"}),  // 2
      list_rule("activation_embed_and_logits_batch_sequence",
                {"data", "stage", "fsdp", "fsdp_transpose", "context", "context_usp_ulysses",
                 "expert"}),                                                                 // 3
      list_rule("activation_vocab", t_ts),                                                   // 4
      list_rule("activation_vocab", {"tensor"}),                                             // 5
      bare_rule("activation_vocab", "tensor_sequence"),                                      // 6
      list_rule("vocab", heads),                                                             // 7
      list_rule("embed_vocab", fsdp_all),                                                    // 8
      list_rule("activation_batch_attn", batch),                                             // 9
      list_rule("activation_input_length_attn", {"tensor_sequence", "context"}),             // 10
      list_rule("activation_heads", heads),                                                  // 11
      list_rule("activation_kv_heads", t_ts),                                                // 12
      list_rule("activation_length_attn", ctx),                                              // 13
      list_rule("activation_q_length", ctx),                                                 // 14
      list_rule("activation_kv_length", {}),                                                 // 15
      list_rule("activation_embed_attn", {"tensor"}),                                        // 16
      list_rule("activation_kv", t_ts),                                                      // 17
      list_rule("activation_kv_batch", batch),                                               // 18
      list_rule("activation_kv_head_dim", t_ts),                                             // 19
      list_rule("heads", heads),                                                             // 20
      list_rule("q_heads", heads),                                                           // 21
      list_rule("kv_heads", heads),                                                          // 22
      list_rule("qkv", {}),                                                                  // 23
      list_rule("kv", {}),                                                                   // 24
      list_rule("kv_head_dim", {}),                                                          // 25
      list_rule("q_lora", fsdp_all),                                                         // 26
      list_rule("q_lora", fsdp_no_t),                                                        // 27
      list_rule("q_lora_up_proj", {}),                                                       // 28
      list_rule("kv_lora", fsdp_all),                                                        // 29
      list_rule("kv_lora", fsdp_no_t),                                                       // 30
      list_rule("kv_lora_up_proj", {}),                                                      // 31
      list_rule("activation_batch_moe", batch),                                              // 32
      list_rule("activation_length_moe", ctx),                                               // 33
      list_rule("activation_norm_length_moe", norm_len),                                     // 34
      list_rule("activation_embed_moe", {"tensor"}),                                         // 35
      list_rule("activation_mlp_moe", t_ts),                                                 // 36
      list_rule("activation_exp", {"expert"}),                                               // 37
      bare_rule("exp", "expert"),                                                            // 38
      list_rule("mlp_moe", mlp),                                                             // 39
      list_rule("embed_moe", {"fsdp", "fsdp_transpose", "context", "context_usp_ulysses"}),  // 40
      list_rule("embed_moe", {"fsdp", "context", "context_usp_ulysses"}),                    // 41
      list_rule("activation_mlp", t_ts),                                                     // 42
      list_rule("activation_batch", batch),                                                  // 43
      list_rule("activation_length", ctx),                                                   // 44
      list_rule("activation_norm_length", norm_len),                                         // 45
      list_rule("activation_embed", {"tensor"}),                                             // 46
      bare_rule("activation_stage", "stage"),                                                // 47
      list_rule("mlp", mlp),                                                                 // 48
      list_rule("gdn_head", mlp),                                                            // 49
      list_rule("embed", fsdp_all),                                                          // 50
      list_rule("embed", fsdp_no_t),                                                         // 51
      list_rule("norm", {"tensor"}),                                                         // 52
      bare_rule("layers", "stage"),                                                          // 53
      bare_rule("diloco", "diloco"),                                                         // 54
      list_rule("engram_dim", {"tensor"}),                                                   // 55
      list_rule("dense_layers", {}),                                                         // 56
      list_rule("moe_layers", {}),                                                           // 57
      list_rule("local_layers", {}),                                                         // 58
      list_rule("mhc", {}),                                                                  // 59
      list_rule("prefill_activation_length", ctx),                                           // 60
      list_rule("prefill_activation_norm_length", norm_len),                                 // 61
      list_rule("activation_prefill_kv_batch", batch),                                       // 62
      list_rule("decode_batch", batch),                                                      // 63
      list_rule("decode_length", {}),                                                        // 64
      list_rule("cache_heads", {"autoregressive", "tensor", "tensor_sequence"}),             // 65
      list_rule("paged_kv_heads", {"tensor"}),                                               // 66
      list_rule("cache_batch_prefill", {}),                                                  // 67
      list_rule("cache_batch", {}),                                                          // 68
      list_rule("cache_heads_none", {}),                                                     // 69
      list_rule("cache_kv", {}),                                                             // 70
      list_rule("cache_sequence", {}),                                                       // 71
      list_rule("num_pages", {}),                                                            // 72
      list_rule("tokens_per_page", {}),                                                      // 73
      list_rule("paged_kv_head_dim_size", {}),                                               // 74
      list_rule("mlp_no_fsdp", heads),                                                       // 75
      bare_rule("exp_with_fsdp", "fsdp"),                                                    // 76
  };
}

}  // namespace

std::string logical_axes_string(const LogicalAxes& names) {
  std::vector<std::string> parts;
  for (const auto& n : names) parts.push_back(n ? quoted(*n) : "None");
  if (parts.size() == 1) return fmt::format("({},)", parts[0]);
  return fmt::format("({})", fmt::join(parts, ", "));
}

std::string LogicalAxisRule::to_string() const {
  if (bare && mesh_axes.size() == 1)
    return fmt::format("[{}, {}]", quoted(logical), quoted(mesh_axes[0]));
  std::vector<std::string> q;
  for (const auto& a : mesh_axes) q.push_back(quoted(a));
  return fmt::format("[{}, [{}]]", quoted(logical), fmt::join(q, ", "));
}

const LogicalAxisRules& LogicalAxisRules::maxtext_default() {
  static const LogicalAxisRules rules(maxtext_default_rules());
  return rules;
}

std::vector<LogicalAxisRule> LogicalAxisRules::find(std::string_view logical) const {
  std::vector<LogicalAxisRule> out;
  for (const auto& r : rules_)
    if (r.logical == logical) out.push_back(r);
  return out;
}

LogicalAxisRules LogicalAxisRules::merged(const LogicalAxisRules& overrides,
                                          bool replace_all) const {
  if (overrides.rules_.empty()) return *this;
  if (replace_all) return overrides;
  std::set<std::string> replaced;
  for (const auto& r : overrides.rules_) replaced.insert(r.logical);
  std::vector<LogicalAxisRule> out;
  for (const auto& r : rules_)
    if (!replaced.count(r.logical)) out.push_back(r);
  out.insert(out.end(), overrides.rules_.begin(), overrides.rules_.end());
  return LogicalAxisRules(std::move(out));
}

std::string LogicalAxisRules::to_string() const {
  std::vector<std::string> lines;
  for (const auto& r : rules_) lines.push_back(r.to_string());
  return fmt::format("{}", fmt::join(lines, "\n"));
}

std::string LogicalAxisRules::to_list_string() const {
  std::vector<std::string> parts;
  for (const auto& r : rules_) parts.push_back(r.to_string());
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

namespace {

// A tiny reader for base.yml's nested list of quoted strings.
class RulesReader {
 public:
  explicit RulesReader(std::string_view text) : s_(text) {}

  Result<LogicalAxisRules> read() {
    skip();
    if (pos_ == s_.size()) return LogicalAxisRules();
    ENG_RETURN_IF_ERROR(expect('['));
    std::vector<LogicalAxisRule> rules;
    while (!peek(']')) {
      ENG_RETURN_IF_ERROR(expect('['));
      LogicalAxisRule r;
      ENG_ASSIGN_OR_RETURN(r.logical, string());
      ENG_RETURN_IF_ERROR(expect(','));
      if (peek('[')) {
        ++pos_;
        while (!peek(']')) {
          ENG_ASSIGN_OR_RETURN(std::string axis, string());
          r.mesh_axes.push_back(std::move(axis));
          if (!peek(']')) ENG_RETURN_IF_ERROR(expect(','));
        }
        ++pos_;
      } else {
        ENG_ASSIGN_OR_RETURN(std::string axis, string());
        r.mesh_axes = {std::move(axis)};
        r.bare = true;
      }
      ENG_RETURN_IF_ERROR(expect(']'));
      rules.push_back(std::move(r));
      if (!peek(']')) ENG_RETURN_IF_ERROR(expect(','));
    }
    ++pos_;
    skip();
    if (pos_ != s_.size()) return error("end of input");
    return LogicalAxisRules(std::move(rules));
  }

 private:
  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) ++pos_;
  }
  bool peek(char c) {
    skip();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  Status error(std::string_view expected) const {
    return invalid_argument("logical_axis_rules: expected {} at position {} of \"{}\"", expected,
                            pos_, s_);
  }
  Status expect(char c) {
    if (!peek(c)) return error(fmt::format("'{}'", c));
    ++pos_;
    return ok_status();
  }
  Result<std::string> string() {
    skip();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"'))
      return error("a quoted name");
    const char q = s_[pos_];
    const size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) return error("a closing quote");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    if (out.empty()) return error("a non-empty name");
    return out;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Result<LogicalAxisRules> parse_logical_axis_rules(std::string_view text) {
  return RulesReader(text).read();
}

uint64_t LogicalAxisRules::hash() const {
  uint64_t h = hash_mix(0, rules_.size());
  for (const auto& r : rules_) {
    h = hash_mix(h, hash_bytes(r.logical));
    h = hash_mix(h, r.mesh_axes.size());
    for (const auto& a : r.mesh_axes) h = hash_mix(h, hash_bytes(a));
  }
  return h;
}

Result<PartitionSpec> logical_to_mesh_axes(const LogicalAxes& names,
                                           const LogicalAxisRules& rules) {
  // flax rejects every name that occurs more than once (None excepted), listing them all.
  std::vector<std::string> dups;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!names[i]) continue;
    bool first = true, repeated = false;
    for (size_t j = 0; j < names.size(); ++j) {
      if (names[j] != names[i]) continue;
      if (j < i) first = false;
      if (j != i) repeated = true;
    }
    if (first && repeated) dups.push_back(quoted(*names[i]));
  }
  if (!dups.empty()) {
    std::string tuple = dups.size() == 1 ? fmt::format("({},)", dups[0])
                                         : fmt::format("({})", fmt::join(dups, ", "));
    return invalid_argument(
        "logical_to_mesh_axes: Unsupported: Dimensions {} occur more than once in array names "
        "{}",
        tuple, logical_axes_string(names));
  }

  std::vector<bool> assigned(names.size(), false);
  std::vector<PartitionSpec::DimAxes> dims(names.size());
  std::set<std::string> used;  // mesh axes taken by any dim so far
  for (const auto& rule : rules.rules()) {
    int pos = -1;
    for (size_t i = 0; i < names.size() && pos < 0; ++i)
      if (names[i] && *names[i] == rule.logical) pos = static_cast<int>(i);
    if (pos < 0 || assigned[pos]) continue;
    bool free = true;
    for (const auto& a : rule.mesh_axes) free = free && !used.count(a);
    if (!free) continue;   // partly conflicting: skipped whole; a later rule may be the fallback
    assigned[pos] = true;  // an [] rule lands here too: the dim is settled as None
    dims[pos] = rule.mesh_axes;
    used.insert(rule.mesh_axes.begin(), rule.mesh_axes.end());
  }
  return PartitionSpec(std::move(dims));
}

namespace {

// Why rule `r` (name at dim `pos`) does not fire, or "" when it does: the same test as
// logical_to_mesh_axes's walk, with the dim and rule that own the conflict.
std::string skip_reason(const LogicalAxisRule& r, int pos, const LogicalAxes& names,
                        const std::vector<DimResolution>& out,
                        const std::map<std::string, int>& owner) {
  if (out[pos].fired >= 0) return fmt::format("dim {} is already settled by #{}", pos,
                                              out[pos].fired + 1);
  for (const std::string& a : r.mesh_axes) {
    auto it = owner.find(a);
    if (it == owner.end()) continue;
    const int d = it->second;
    return fmt::format("mesh axis '{}' is already used by dim {} ({}, #{})", a, d,
                       names[d] ? quoted(*names[d]) : "None", out[d].fired + 1);
  }
  return "";
}

}  // namespace

Result<std::vector<DimResolution>> explain_logical_to_mesh(const LogicalAxes& names,
                                                           const Mesh& mesh,
                                                           const LogicalAxisRules& rules) {
  ENG_ASSIGN_OR_RETURN(PartitionSpec spec, logical_to_mesh(names, mesh, rules));  // checks names
  std::vector<DimResolution> out(names.size());
  std::map<std::string, int> owner;  // mesh axis -> the dim that took it
  for (int k = 0; k < rules.size(); ++k) {
    const LogicalAxisRule& r = rules[k];
    int pos = -1;
    for (size_t i = 0; i < names.size() && pos < 0; ++i)
      if (names[i] && *names[i] == r.logical) pos = static_cast<int>(i);
    if (pos < 0) continue;
    std::string why = skip_reason(r, pos, names, out, owner);
    if (!why.empty()) {
      out[pos].skipped.push_back({k, std::move(why)});
      continue;
    }
    out[pos].fired = k;
    out[pos].raw_axes = r.mesh_axes;
    for (const std::string& a : r.mesh_axes) owner[a] = pos;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    out[i].logical = names[i];
    out[i].axes = spec.dim_or_none(static_cast<int>(i));
  }
  return out;
}

Result<PartitionSpec> logical_to_mesh(const LogicalAxes& names, const Mesh& mesh,
                                      const LogicalAxisRules& rules) {
  ENG_ASSIGN_OR_RETURN(PartitionSpec raw, logical_to_mesh_axes(names, rules));
  return remove_size_one_mesh_axis(raw, mesh);
}

Result<NamedSharding> logical_to_sharding(const LogicalAxes& names, const Mesh& mesh,
                                          const LogicalAxisRules& rules) {
  ENG_ASSIGN_OR_RETURN(PartitionSpec spec, logical_to_mesh(names, mesh, rules));
  return NamedSharding{mesh, std::move(spec)};
}

Result<NamedSharding> logical_to_sharding_keep_size_one(const LogicalAxes& names, const Mesh& mesh,
                                                        const LogicalAxisRules& rules) {
  ENG_ASSIGN_OR_RETURN(PartitionSpec spec, logical_to_mesh_axes(names, rules));
  return NamedSharding{mesh, std::move(spec)};
}

PartitionSpec adjust_pspec_for_indivisible_shapes(const PartitionSpec& spec, const Shape& shape,
                                                  const Mesh& mesh) {
  std::vector<PartitionSpec::DimAxes> dims;
  for (int i = 0; i < spec.rank() && i < shape.rank(); ++i) {
    PartitionSpec::DimAxes kept;
    int64_t ways = 1;  // product of the axes kept so far on this dim
    for (const auto& a : spec.dim(i)) {
      int64_t next = ways * mesh.axis_size(a);
      if (shape[i] % next != 0) continue;
      kept.push_back(a);
      ways = next;
    }
    dims.push_back(std::move(kept));
  }
  return PartitionSpec(std::move(dims), spec.partial());
}

std::string PartitionAxes::to_string() const {
  return fmt::format("zero1={} zero1_skip={} vmap={}", zero1, zero1_skip, vmap);
}

const LogicalAxes& default_input_data_sharding_logical_axes() {
  static const LogicalAxes axes = {"activation_embed_and_logits_batch", "activation_norm_length"};
  return axes;
}

Result<NamedSharding> get_input_data_sharding(const Mesh& mesh, const LogicalAxisRules& rules,
                                              const LogicalAxes& logical_axes) {
  return logical_to_sharding(logical_axes, mesh, rules);
}

}  // namespace eng
