// engine/train/maxtext_config.cpp: pyconfig.py's rules over MaxText's YAML files (base_config
// chains, model files, command-line overrides, derived values) into a shardlab Config.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include "engine/base/file.h"
#include "engine/base/text.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/topology.h"
#include "engine/train/maxtext_yaml.h"
#include "engine/train/plan.h"
#include "engine/train/train_step.h"

namespace eng {

namespace {

namespace fs = std::filesystem;
using Kind = YamlValue::Kind;
using Keys = std::map<std::string, MaxTextKey>;

constexpr int kMaxChain = 32;  // base_config files in one chain
constexpr const char* kCommandLine = "command line";

// ---- files ------------------------------------------------------------------------------

Result<YamlDocument> read_document(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found("config: {}: no such file", path);
  if (fs::is_directory(path, ec))
    return invalid_argument("config: {}: is a directory, not a YAML file", path);
  ENG_ASSIGN_OR_RETURN(std::string text,
                       read_regular_file(path, "config", int64_t{16} << 20));  // base.yml: 60 KB
  if (text.find('\0') != std::string::npos)
    return invalid_argument("config: {}: not a YAML file (it holds binary data)", path);
  return parse_yaml_document(text, path);
}

// pyconfig's _load_config: the file's keys over its base_config's (resolved next to the file).
Status load_chain(const std::string& path, std::vector<std::string>& stack, Keys& out,
                  std::vector<std::string>& files) {
  std::error_code ec;
  const std::string canonical = fs::weakly_canonical(path, ec).string();
  for (const std::string& seen : stack)
    if (seen == canonical) {
      stack.push_back(canonical);
      return invalid_argument("config: base_config cycle: {}", fmt::join(stack, " -> "));
    }
  if (stack.size() >= kMaxChain)
    return invalid_argument("config: {}: more than {} files in its base_config chain", path,
                            kMaxChain);
  stack.push_back(canonical);
  ENG_ASSIGN_OR_RETURN(YamlDocument doc, read_document(path));
  for (const auto& [key, value] : doc.keys) {
    if (key != "base_config") continue;
    if (value.kind != Kind::kString)
      return invalid_argument("config: {}: base_config expects a file name, got {} ({})", path,
                              value.type_name(), value.to_string());
    fs::path parent(value.s);
    if (parent.is_relative()) parent = fs::path(path).parent_path() / parent;
    Status s = load_chain(parent.string(), stack, out, files);
    if (!s.ok() && s.code() == Code::kNotFound)
      return not_found("{} (the base_config of {})", s.message(), path);
    ENG_RETURN_IF_ERROR(s);
  }
  files.push_back(path);
  for (auto& [key, value] : doc.keys) out[key] = MaxTextKey{value, path};
  stack.pop_back();
  return ok_status();
}

// ---- command-line values ----------------------------------------------------------------

// OmegaConf.from_cli reads a value as YAML: "[a, b]" is a list, 10_000 an int, 1e-5 a float.
Result<YamlValue> read_cli_value(const ConfigOverride& o) {
  const std::string& t = o.value;
  if (!t.empty() && (t[0] == '[' || t[0] == '{')) {
    Result<YamlDocument> doc = parse_yaml_document(fmt::format("v: {}", t), kCommandLine);
    if (!doc.ok())
      return invalid_argument("config: command line: {}: '{}' is not a YAML list or mapping", o.key,
                              t);
    return doc->keys.empty() ? YamlValue{} : doc->keys[0].second;
  }
  return plain_scalar(t);
}

// pyconfig's _update_from_env_and_command_line: the command-line value typed like the file's.
Result<YamlValue> coerce_cli_value(const ConfigOverride& o, const YamlValue& proposal,
                                   const MaxTextKey& file) {
  const Kind want = file.value.kind;
  if (proposal.kind == want || proposal.kind == Kind::kNull) return proposal;
  auto fail = [&](std::string_view what) {
    return invalid_argument("config: command line: {}={}: {} ({} has {} {})", o.key, o.value, what,
                            file.source, file.value.type_name(), file.value.to_string());
  };
  YamlValue v;
  v.kind = want;
  switch (want) {
    case Kind::kString:
      if (proposal.kind == Kind::kList || proposal.kind == Kind::kMap)
        return fail("expected a string, got " + std::string(proposal.type_name()));
      v.s = o.value;  // str() of the value as written
      return v;
    case Kind::kInt:
      if (proposal.kind == Kind::kFloat && proposal.f == std::floor(proposal.f) &&
          std::fabs(proposal.f) < 9e15) {
        v.i = static_cast<int64_t>(proposal.f);
        return v;
      }
      return fail(fmt::format("expected an integer, got {}", proposal.type_name()));
    case Kind::kFloat:
      if (proposal.kind == Kind::kInt) {
        v.f = static_cast<double>(proposal.i);
        return v;
      }
      return fail(fmt::format("expected a number, got {}", proposal.type_name()));
    case Kind::kBool:
      return fail(fmt::format("expected true or false, got {}", proposal.type_name()));
    default:
      return fail(fmt::format("a {} key can only be replaced by {} of the same kind",
                              file.value.type_name(), file.value.type_name()));
  }
}

const ConfigKey* shardlab_key(std::string_view name) {
  for (const ConfigKey& k : config_keys())
    if (k.name == name) return &k;
  return nullptr;
}

std::string did_you_mean(const std::string& key, const Keys& keys) {
  std::vector<std::string_view> names;
  for (const auto& [k, v] : keys) names.push_back(k);
  for (const ConfigKey& k : config_keys()) names.push_back(k.name);
  const std::string hint = closest_match(key, names);
  return hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint);
}

Status apply_cli(const std::vector<ConfigOverride>& overrides, const std::string& path, Keys& keys,
                 std::set<std::string>& from_cli) {
  for (const ConfigOverride& o : overrides) {
    const std::string key = o.key == "model" ? "model_name" : o.key;
    auto it = keys.find(key);
    if (it == keys.end()) {
      if (shardlab_key(key) != nullptr) {  // shardlab's own keys (num_devices, log_compiles, ...)
        ENG_ASSIGN_OR_RETURN(ConfigValue cv, parse_config_value(key, o.value));
        (void)cv;  // typed again when the Config is filled; here only checked
        keys[key] = MaxTextKey{plain_scalar(o.value), kCommandLine};
        if (shardlab_key(key)->default_value.index() == 3) {
          keys[key].value.kind = Kind::kString;
          keys[key].value.s = o.value;
        }
        from_cli.insert(key);
        continue;
      }
      return invalid_argument(
          "config: command line: key '{}' is in no config file ({} and its "
          "base_config chain) nor shardlab's keys{}",
          o.key, path, did_you_mean(key, keys));
    }
    ENG_ASSIGN_OR_RETURN(YamlValue proposal, read_cli_value(o));
    ENG_ASSIGN_OR_RETURN(YamlValue v, coerce_cli_value(o, proposal, it->second));
    it->second = MaxTextKey{std::move(v), kCommandLine};
    from_cli.insert(key);
  }
  return ok_status();
}

// ---- the model file ---------------------------------------------------------------------

// A model file read on its own (sl.config("configs/models/qwen3-235b-a22b.yml")) sets no
// model_name; its file name is the preset's, whose architecture (decoder_block, ...) it holds.
std::optional<std::string> model_file_preset(const std::string& path) {
  const fs::path p(path);
  if (p.parent_path().filename() != "models" || p.extension() != ".yml") return std::nullopt;
  const std::string stem = p.stem().string();
  if (!model_preset(stem).ok()) return std::nullopt;
  return stem;
}

Status apply_model(MaxTextConfig& m, const std::set<std::string>& from_cli) {
  const MaxTextKey& name = m.keys.at("model_name");
  if (name.value.kind != Kind::kString)
    return invalid_argument("config: {}: model_name expects a string, got {}", name.source,
                            name.value.to_string());
  if (name.value.s == "default") return ok_status();
  if (m.model_file == m.path && fs::path(m.path).stem().string() == name.value.s)
    return ok_status();  // the model file is the config itself
  const std::string file = name.value.s + ".yml";
  fs::path path = fs::path(m.path).parent_path() / "models" / file;
  std::error_code ec;
  if (!fs::exists(path, ec)) path = fs::path(m.files.front()).parent_path() / "models" / file;
  if (!fs::exists(path, ec))
    return not_found("config: model_name '{}' ({}): no models/{} next to {} or {}", name.value.s,
                     name.source, file, m.path, m.files.front());
  m.model_file = path.string();
  ENG_ASSIGN_OR_RETURN(YamlDocument doc, read_document(m.model_file));
  const bool override_model = m.keys.count("override_model_config") &&
                              m.keys["override_model_config"].value.kind == Kind::kBool &&
                              m.keys["override_model_config"].value.b;
  std::vector<std::string> both;
  for (auto& [key, value] : doc.keys) {
    auto it = m.keys.find(key);
    if (it == m.keys.end())
      return invalid_argument("config: {}: key '{}' does not exist in config {}{}", m.model_file,
                              key, m.path, did_you_mean(key, m.keys));
    if (from_cli.count(key)) {
      if (override_model) continue;  // the command line wins
      both.push_back(key);
      continue;
    }
    const Kind was = it->second.value.kind;
    if (was != value.kind && !(was == Kind::kFloat && value.kind == Kind::kInt))
      return invalid_argument("config: {}: {}: expected {} as in {}, got {} ({})", m.model_file,
                              key, it->second.value.type_name(), it->second.source,
                              value.type_name(), value.to_string());
    it->second = MaxTextKey{value, m.model_file};
  }
  if (!both.empty())
    return invalid_argument(
        "config: keys {} are set both by {} and on the command line; MaxText "
        "refuses this unless override_model_config=true",
        fmt::join(both, ", "), m.model_file);
  return ok_status();
}

// ---- values into shardlab's keys --------------------------------------------------------

Result<ConfigValue> to_config_value(const std::string& key, const MaxTextKey& k,
                                    const ConfigValue& like) {
  const YamlValue& v = k.value;
  auto fail = [&](const char* want) {
    return invalid_argument("config: {}: {} expects {}, got {} ({})", k.source, key, want,
                            v.type_name(), v.to_string());
  };
  switch (like.index()) {
    case 0:
      if (v.kind == Kind::kBool) return ConfigValue{v.b};
      return fail("true or false");
    case 1:
      if (v.kind == Kind::kInt) return ConfigValue{v.i};
      if (key == "max_num_checkpoints_to_keep" &&
          (v.kind == Kind::kNull || (v.kind == Kind::kString && v.s == "None")))
        return ConfigValue{int64_t{-1}};  // MaxText's None: keep every checkpoint
      return fail("an integer");
    case 2:
      if (v.kind == Kind::kFloat) return ConfigValue{v.f};
      if (v.kind == Kind::kInt) return ConfigValue{static_cast<double>(v.i)};
      return fail("a number");
    default:
      if (v.kind == Kind::kString) return ConfigValue{v.s};
      if (key == "logical_axis_rules" && v.kind == Kind::kList) return ConfigValue{v.to_string()};
      if (v.kind == Kind::kNull) return ConfigValue{std::string()};
      if (v.kind == Kind::kInt || v.kind == Kind::kFloat || v.kind == Kind::kBool) {
        std::string s = v.to_string();
        if (v.kind == Kind::kBool) s = v.b ? "true" : "false";
        return ConfigValue{s};
      }
      return fail("a string");
  }
}

// Keys where base.yml's value is not shardlab's default: taken only when a file other than the
// chain's root or the command line sets them.
struct OwnDefault {
  const char* key;
  const char* why;
};
constexpr OwnDefault kOwnDefaults[] = {
    {"dataset_type", "no tfds/hf/grain input pipelines here: synthetic data, or dataset=text:PATH"},
    {"enable_checkpointing", "off, so a plan or a REPL writes no files"},
    {"log_period", "1: every step durable in the store"},
    {"max_num_checkpoints_to_keep", "-1: keep all"},
    {"logical_axis_rules", "shardlab's built-in copy of base.yml's rules"},
};

// Plan-changing MaxText keys shardlab does not model yet: each must keep this value.
struct Unsupported {
  const char* key;
  const char* supported;  // YamlValue::to_string() of the one value shardlab models
  const char* feature;
};
constexpr Unsupported kUnsupported[] = {
    {"num_experts", "1", "mixture-of-experts layers"},
    {"decoder_block", "'llama2'", "decoder blocks other than llama2's"},
    {"attention_type", "'global'", "attention other than global causal (local, chunk, MLA)"},
    {"mlp_activations", "['silu', 'linear']", "MLP activations other than SwiGLU"},
    {"logits_via_embedding", "False", "logits through the tied embedding"},
    {"fused_qkv", "False", "a fused QKV projection"},
    {"trainable_position_size", "-1", "learned position embeddings"},
    {"first_num_dense_layers", "0", "dense layers before MoE layers"},
    {"gradient_accumulation_steps", "1", "gradient accumulation"},
    {"quantization", "''", "quantized training"},
    {"mu_dtype", "''", "an optimizer-moment dtype other than weight_dtype"},
    {"ici_sequence_parallelism", "1", "the 'sequence' mesh axis"},
    {"dcn_sequence_parallelism", "1", "the 'sequence' mesh axis"},
    {"custom_mesh_and_rule", "''", "custom mesh axes and logical axis rules"},
    {"custom_mesh", "''", "custom device orders (hybrid rings)"},
    {"rope_attention_scaling", "False", "yarn's scaling of the rotary output"},
};

// Keys this file consumes itself (they shape the mesh, the model file, the dims).
bool consumed_here(const std::string& key) {
  static const std::set<std::string> kKeys = {"base_config",
                                              "model_name",
                                              "override_model_config",
                                              "compile_topology",
                                              "compile_topology_num_slices",
                                              "num_slices",
                                              "global_parameter_scale",
                                              "mesh_axes",
                                              // remat_policy=custom's fates (map_remat)
                                              "decoder_layer_input",
                                              "context",
                                              "mlpwi",
                                              "mlpwi_0",
                                              "mlpwi_1",
                                              "mlpwo",
                                              "query_proj",
                                              "key_proj",
                                              "value_proj",
                                              "out_proj",
                                              "query_wa_proj",
                                              "kv_wa_proj",
                                              "mla_q",
                                              "mla_kv"};
  return kKeys.count(key) || key.starts_with("dcn_");
}

// The value (YamlValue::to_string form) the model preset of model_name has for a key of
// kUnsupported: a model file's own value for its architecture (gpt3's decoder_block "gpt3",
// mistral's "mistral", ...) is what the preset builds, not an unsupported feature. nullopt: the
// preset says nothing of that key.
std::optional<std::string> preset_implies(const ModelConfig& p, std::string_view key) {
  const auto flag = [](bool b) { return std::string(b ? "True" : "False"); };
  if (key == "decoder_block") {
    if (p.gpt3() || p.decoder_block == "qwen3_moe" || p.decoder_block == "deepseek")
      return fmt::format("'{}'", p.decoder_block);
    // MaxText's mistral and mixtral decoder layers are the llama2 layer here (mixtral's with the
    // MoE block in the MLP's place).
    if (p.name.starts_with("mistral")) return "'mistral'";
    return p.name.starts_with("mixtral") ? "'mixtral'" : "'llama2'";
  }
  if (key == "mlp_activations") {
    std::vector<std::string> q;
    for (const std::string& a : p.mlp_activations) q.push_back("'" + a + "'");
    return fmt::format("[{}]", fmt::join(q, ", "));
  }
  if (key == "logits_via_embedding") return flag(p.logits_via_embedding);
  if (key == "fused_qkv") return flag(p.fused_qkv);
  if (key == "trainable_position_size") return fmt::format("{}", p.trainable_position_size);
  return std::nullopt;
}

Status check_unsupported(const MaxTextConfig& m) {
  std::optional<ModelConfig> preset;
  if (auto it = m.keys.find("model_name");
      it != m.keys.end() && it->second.value.kind == Kind::kString) {
    Result<ModelConfig> p = model_preset(it->second.value.s);
    if (p.ok()) preset = *p;
  }
  for (const Unsupported& u : kUnsupported) {
    // Modelled by the key table (a later merge); decoder_block is a key too (deepseek's MoE
    // layout), but a model file's comes from its preset: checked here, never set below.
    if (shardlab_key(u.key) != nullptr && std::string_view(u.key) != "decoder_block") continue;
    auto it = m.keys.find(u.key);
    if (it == m.keys.end() || it->second.value.to_string() == u.supported) continue;
    if (preset && preset_implies(*preset, u.key) == it->second.value.to_string()) continue;
    if (it->second.value.kind == Kind::kInt && std::string(u.supported) == "1" &&
        std::string(u.key).ends_with("_parallelism") && it->second.value.i == -1)
      continue;  // a -1 fill of a size-1 axis
    return unimplemented("config: {}: {}={} is not supported yet ({}; shardlab models {}={})",
                         it->second.source, u.key, it->second.value.to_string(), u.feature, u.key,
                         u.supported);
  }
  if (auto it = m.keys.find("mesh_axes"); it != m.keys.end()) {
    YamlValue want;
    want.kind = Kind::kList;
    for (const std::string& a : maxtext_mesh_axes()) {
      YamlValue x;
      x.kind = Kind::kString;
      x.s = a;
      want.items.push_back(x);
    }
    if (it->second.value.to_string() != want.to_string())
      return unimplemented(
          "config: {}: mesh_axes={} is not supported yet (custom mesh axes; "
          "shardlab's mesh has MaxText's axes {})",
          it->second.source, it->second.value.to_string(), want.to_string());
  }
  return ok_status();
}

Result<int64_t> int_key(const MaxTextConfig& m, const std::string& key, int64_t fallback) {
  auto it = m.keys.find(key);
  if (it == m.keys.end()) return fallback;
  if (it->second.value.kind != Kind::kInt)
    return invalid_argument("config: {}: {} expects an integer, got {} ({})", it->second.source,
                            key, it->second.value.type_name(), it->second.value.to_string());
  return it->second.value.i;
}

// pyconfig's get_individual_scales: 2^k cycles heads+mlp, then embed, then layers.
Status scale_dims(MaxTextConfig& m) {
  ENG_ASSIGN_OR_RETURN(int64_t scale, int_key(m, "global_parameter_scale", 1));
  if (scale == 1) return ok_status();
  if (scale < 1 || (scale & (scale - 1)) != 0)
    return invalid_argument("config: {}: global_parameter_scale must be a power of 2, got {}",
                            m.keys.at("global_parameter_scale").source, scale);
  int log2 = 0;
  while ((int64_t{1} << log2) < scale) ++log2;
  const int base = log2 / 3, rem = log2 % 3;
  const int heads = base + (rem > 0), emb = base + (rem > 1), layers = base;
  const std::pair<const char*, int> dims[] = {{"base_emb_dim", emb},
                                              {"base_num_query_heads", heads},
                                              {"base_num_kv_heads", heads},
                                              {"base_mlp_dim", heads},
                                              {"base_num_decoder_layers", layers}};
  for (const auto& [key, shift] : dims) {
    auto it = m.keys.find(key);
    if (it == m.keys.end() || it->second.value.kind != Kind::kInt) continue;
    it->second.value.i <<= shift;
    it->second.source += fmt::format(" x global_parameter_scale {}", scale);
  }
  return ok_status();
}

// The mesh. With compile_topology (shardlab keys since the named-hardware work): the ici_* and
// dcn_* keys stay as given and physical_mesh_from_config lays them on the hardware (sl.plan and
// train_compile use that mesh); MaxText's train_compile needs compile_topology_num_slices >= 1.
// Without it: every axis is ici x dcn, -1 filling a slice (ici) or the slices (dcn, over
// MaxText's num_slices), folded into the ici_* keys for mesh_from_config, the dcn_* keys reset
// to 1; num_devices, else the product of the sizes, is the device count.
Status derive_mesh(MaxTextConfig& m) {
  m.compile_topology = m.config.get_string("compile_topology");
  if (!m.compile_topology.empty()) {
    const int64_t slices = m.config.get_int("compile_topology_num_slices");
    if (slices < 1)
      return invalid_argument(
          "config: compile_topology={} needs compile_topology_num_slices >= 1 (MaxText's "
          "train_compile asserts it; base.yml has -1), got {}",
          m.compile_topology, slices);
    Result<PhysicalMesh> pm = physical_mesh_from_config(m.config);
    if (!pm.ok())
      return Status(pm.status().code(), fmt::format("config: {}", pm.status().message()));
    m.num_slices = slices;
    m.topology = pm->topology;
    m.num_devices = pm->mesh.num_devices();
    const int64_t wanted = m.config.get_int("num_devices");
    if (wanted != -1 && wanted != m.num_devices)
      return invalid_argument(
          "config: num_devices={} but compile_topology {} x {} slice(s) has {} "
          "devices",
          wanted, m.compile_topology, slices, m.num_devices);
    return ok_status();
  }
  ENG_ASSIGN_OR_RETURN(int64_t slices, int_key(m, "num_slices", -1));
  m.num_slices = slices < 1 ? 1 : slices;
  int64_t total = m.config.get_int("num_devices");
  const std::vector<std::string>& axes = maxtext_mesh_axes();
  std::vector<int64_t> ici, dcn;
  for (const std::string& axis : axes) {
    ici.push_back(m.config.get_int(ici_key(axis)));
    dcn.push_back(m.config.get_int(dcn_key(axis)));
  }
  auto product = [](const std::vector<int64_t>& v) {
    int64_t p = 1;
    for (int64_t x : v)
      if (x != -1) p *= x;
    return p;
  };
  const bool ici_fill = std::count(ici.begin(), ici.end(), -1) > 0;
  if (total == -1 && !ici_fill) total = product(ici) * m.num_slices;
  if (total == -1) return ok_status();  // no device count: the trainer's mesh decides
  if (total < 1 || total % m.num_slices != 0)
    return invalid_argument("config: {} devices do not split into {} slices", total, m.num_slices);
  const int64_t per_slice = total / m.num_slices;
  auto fill = [&](std::vector<int64_t>& v, int64_t n, const char* level) -> Status {
    if (std::count(v.begin(), v.end(), -1) > 1)
      return invalid_argument("config: more than one {}_*_parallelism is -1", level);
    const int64_t p = product(v);
    for (int64_t& x : v)
      if (x == -1) x = p > 0 && n % p == 0 ? n / p : 0;
    if (product(v) != n)
      return invalid_argument(
          "config: the {}_*_parallelism sizes ({}) do not multiply to {}, the {}", level,
          fmt::join(v, " x "), n, std::string(level) == "ici" ? "devices per slice" : "slices");
    return ok_status();
  };
  ENG_RETURN_IF_ERROR(fill(ici, per_slice, "ici"));
  ENG_RETURN_IF_ERROR(fill(dcn, m.num_slices, "dcn"));
  for (size_t i = 0; i < axes.size(); ++i) {
    if (m.config.get_int(ici_key(axes[i])) != ici[i] * dcn[i])
      ENG_RETURN_IF_ERROR(m.config.set(ici_key(axes[i]), ici[i] * dcn[i]));
    if (m.config.get_int(dcn_key(axes[i])) != 1 && m.config.has_override(dcn_key(axes[i])))
      ENG_RETURN_IF_ERROR(m.config.set(dcn_key(axes[i]), int64_t{1}));  // folded into ici_*
  }
  m.num_devices = total;
  if (m.config.get_int("num_devices") != total)
    ENG_RETURN_IF_ERROR(m.config.set("num_devices", total));
  return ok_status();
}

Status fill_config(MaxTextConfig& m) {
  const std::string& root = m.files.front();
  const MaxTextKey& name = m.keys.at("model_name");
  {
    if (!model_preset(name.value.s).ok())
      return unimplemented(
          "config: {}: model_name '{}' is not supported yet: shardlab has no "
          "preset for it (its models: {})",
          name.source, name.value.s, fmt::join(model_preset_names(), ", "));
    ENG_RETURN_IF_ERROR(m.config.set("model_name", name.value.s));
  }
  for (const ConfigKey& k : config_keys()) {
    const std::string key(k.name);
    auto it = m.keys.find(key);
    if (key == "model_name" || key == "decoder_block" || it == m.keys.end()) continue;
    const OwnDefault* own = nullptr;
    for (const OwnDefault& d : kOwnDefaults)
      if (key == d.key) own = &d;
    ENG_ASSIGN_OR_RETURN(ConfigValue current, m.config.get(key));
    if (own != nullptr && it->second.source == root) {
      if (key == "logical_axis_rules") {
        m.notes.push_back(fmt::format("{}: logical_axis_rules: {}", root, own->why));
        continue;
      }
      Result<ConfigValue> v = to_config_value(key, it->second, k.default_value);
      if (!v.ok() || *v != current)
        m.notes.push_back(fmt::format("{}: {}={} kept as shardlab's {} ({})", root, key,
                                      it->second.value.to_string(), config_value_string(current),
                                      own->why));
      continue;
    }
    ENG_ASSIGN_OR_RETURN(ConfigValue v, to_config_value(key, it->second, k.default_value));
    if (key == "logical_axis_rules") {  // merged by the Config as MaxText merges a model's
      if (std::get<std::string>(v) == std::get<std::string>(current)) continue;
    } else if (v == current) {  // exact: {:g} text would hide a change in the 7th digit
      continue;
    }
    Status s = m.config.set(key, std::move(v));
    if (!s.ok())
      return Status(s.code(), fmt::format("{} (set by {})", s.message(), it->second.source));
  }
  return ok_status();
}

// MaxText's remat_policy=custom names each tensor's fate in its own key (decoder_layer_input,
// query_proj, ...: 'remat' | 'device' | 'offload'); shardlab's custom policy takes the saved
// names in remat_save_names and the offloaded ones in remat_offload_names (engine/ir/remat.h:
// moved to host memory after the forward, back before the backward). The layer input is
// always on the device here unless offloaded (a scan carry), so its 'remat' is a note.
Status map_remat(MaxTextConfig& m) {
  const std::string policy = m.config.get_string("remat_policy");
  if (policy != "custom" || m.config.has_override("remat_save_names") ||
      m.config.has_override("remat_offload_names"))
    return ok_status();
  static const char* kTensors[] = {"decoder_layer_input", "context",  "mlpwi",
                                   "mlpwi_0",             "mlpwi_1",  "mlpwo",
                                   "query_proj",          "key_proj", "value_proj",
                                   "out_proj",            "query_wa_proj", "kv_wa_proj",
                                   "mla_q",               "mla_kv"};
  std::vector<std::string> saved, offloaded;
  for (const char* t : kTensors) {
    auto it = m.keys.find(t);
    if (it == m.keys.end() || it->second.value.kind != Kind::kString) continue;
    const std::string& fate = it->second.value.s;
    if (fate == "offload")
      offloaded.push_back(t);
    else if (fate == "device")
      saved.push_back(t);
    else if (fate != "remat")
      return invalid_argument("config: {}: {}='{}': expected 'remat', 'device' or 'offload'",
                              it->second.source, t, fate);
  }
  // decoder_layer_input stays on the device whether 'device' or 'remat' (shardlab's scan
  // carry is always saved); only 'offload' changes it.
  std::erase(saved, std::string("decoder_layer_input"));
  auto it = m.keys.find("decoder_layer_input");
  if (it != m.keys.end() && it->second.value.kind == Kind::kString && it->second.value.s == "remat")
    m.notes.push_back(fmt::format(
        "{}: decoder_layer_input='remat': planned as 'device' (shardlab saves each layer's "
        "input, as a scan carry)",
        it->second.source));
  ENG_RETURN_IF_ERROR(m.config.set("remat_offload_names", fmt::format("{}", fmt::join(offloaded, ","))));
  return m.config.set("remat_save_names", fmt::format("{}", fmt::join(saved, ",")));
}

void collect_no_effect(MaxTextConfig& m) {
  const std::string& root = m.files.front();
  for (const auto& entry : m.keys) {
    const std::string& key = entry.first;  // not a structured binding: clang 14 cannot capture one
    const auto& k = entry.second;
    if (shardlab_key(key) != nullptr || consumed_here(key)) continue;
    if (std::any_of(std::begin(kUnsupported), std::end(kUnsupported),
                    [&](const Unsupported& u) { return key == u.key; }))
      continue;
    if (k.source == root) {
      ++m.defaults_without_effect;
    } else {
      m.no_effect.push_back(fmt::format("{}={} ({})", key, k.value.to_string(), k.source));
    }
  }
}

}  // namespace

std::string MaxTextConfig::report() const {
  std::string out;
  if (!no_effect.empty() || defaults_without_effect > 0) {
    out += "accepted, no effect on the plan:";
    if (!no_effect.empty()) out += " " + fmt::format("{}", fmt::join(no_effect, ", "));
    if (defaults_without_effect > 0)
      out += fmt::format("{}{} other key(s) of {} at their values", no_effect.empty() ? " " : "; ",
                         defaults_without_effect, files.front());
    out += "\n";
  }
  for (const std::string& n : notes) out += n + "\n";
  return out;
}

Result<MaxTextConfig> load_maxtext_config(const std::string& path,
                                          const std::vector<ConfigOverride>& overrides) {
  MaxTextConfig m;
  m.path = path;
  std::vector<std::string> stack;
  ENG_RETURN_IF_ERROR(load_chain(path, stack, m.keys, m.files));
  if (!m.keys.count("model_name")) {
    YamlValue d;
    d.kind = Kind::kString;
    d.s = "default";
    std::string source = "MaxText's default";
    if (std::optional<std::string> preset = model_file_preset(path)) {
      d.s = *preset;
      source = fmt::format("{} (its file name)", path);
      m.model_file = path;
    }
    m.keys["model_name"] = MaxTextKey{d, source};
  }
  std::set<std::string> from_cli;
  ENG_RETURN_IF_ERROR(apply_cli(overrides, path, m.keys, from_cli));
  ENG_RETURN_IF_ERROR(apply_model(m, from_cli));
  ENG_RETURN_IF_ERROR(scale_dims(m));
  ENG_RETURN_IF_ERROR(check_unsupported(m));
  ENG_RETURN_IF_ERROR(fill_config(m));
  ENG_RETURN_IF_ERROR(map_remat(m));
  ENG_RETURN_IF_ERROR(derive_mesh(m));
  collect_no_effect(m);

  return m;
}

}  // namespace eng
