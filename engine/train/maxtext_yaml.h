// engine/train/maxtext_yaml.h: MaxText's own YAML configs (configs/base.yml, configs/models/
// <name>.yml, a user's file with `base_config: "base.yml"`) and command-line overrides, read
// with the rules of MaxText's pyconfig.py into a shardlab Config.
//
//   Result<MaxTextConfig> m = load_maxtext_config("configs/base.yml",
//                                                 {{"model_name", "llama2-7b", "model_name=..."}});
//   m->config   // the keys shardlab models, set where they differ from its defaults
//   m->report() // the keys accepted without an effect on the plan, once
//
// The rules (MaxText src/MaxText/pyconfig.py, read at commit 00471011f941 of
// AI-Hypercomputer/maxtext):
//  - base_config is resolved relative to the file naming it; the child's keys replace the
//    parent's (top-level keys, no deep merge). A cycle is an error naming the chain.
//  - command-line key=value: the key must be in the merged files (else an error with a
//    did-you-mean; shardlab's own keys such as num_devices are accepted too). The value is
//    read as YAML (10_000 and 1e-5 are numbers, [a, b] a list) and then typed like the file's
//    value: int(), float(), true/false, str(); a list only where the file has a list.
//  - model_name other than "default" loads models/<model_name>.yml next to the config file
//    (else next to the root of its base_config chain, where MaxText's base.yml lives); its keys
//    must exist in the config with the same YAML type and replace them; a key set both by the
//    model file and the command line is an error unless override_model_config=true (then the
//    command line wins).
//  - derived values: global_parameter_scale scales base_emb_dim, heads, base_mlp_dim and layers
//    (pyconfig's get_individual_scales); with compile_topology the ici_*/dcn_* keys are laid on
//    the hardware by physical_mesh_from_config (plan.h), else every axis is ici_* x dcn_*
//    folded into the ici_* keys, -1 filling the devices of a slice (ici) or the slices (dcn);
//    the global batch is resolve_config's.
//
// What takes effect: every key of shardlab's key table (config.h) whose value differs from
// shardlab's default for the model. base.yml's values are shardlab's defaults except for a few
// keys where shardlab keeps its own (dataset_type tfds: no tfds here, synthetic data;
// enable_checkpointing, log_period, max_num_checkpoints_to_keep, logical_axis_rules: shardlab's
// copy of base.yml's rules); those are listed in the report when they come from the chain's root.
// Keys that change the model or mesh in ways shardlab does not model yet (num_experts > 1,
// decoder_block other than llama2, fused_qkv, gradient_accumulation_steps > 1, ...) are errors
// naming the key, the file and the feature. Every other key is accepted and reported once as
// "accepted, no effect on the plan".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/base/status.h"
#include "engine/mesh/topology.h"
#include "engine/train/config.h"

namespace eng {

// One YAML value, typed as MaxText's loader (PyYAML under OmegaConf) types plain scalars.
struct YamlValue {
  enum class Kind { kNull, kBool, kInt, kFloat, kString, kList, kMap };
  Kind kind = Kind::kNull;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                  // kString: the text
  std::vector<YamlValue> items;   // kList: the elements; kMap: the values, keys in `keys`
  std::vector<std::string> keys;  // kMap only
  // The value in flow form, as pyconfig would print it: 'text', 12, 1e-05, True, None,
  // ['silu', 'linear'].
  std::string to_string() const;
  // "a string", "an integer", "a number", "a boolean", "null", "a list", "a mapping".
  const char* type_name() const;
};

// A parsed YAML document: its top-level keys in file order. Errors name `name` (a path) and
// say what is wrong: not YAML (with yaml-cpp's line and column), not a mapping, a duplicate
// key, nesting deeper than 64.
struct YamlDocument {
  std::vector<std::pair<std::string, YamlValue>> keys;
};
Result<YamlDocument> parse_yaml_document(std::string_view text, std::string_view name);
// A plain (unquoted) scalar typed as YAML 1.1 does: null, true/false (yes/no/on/off), ints
// with underscores, 0x.., floats with or without a dot (1e-5, 1.e-05, .5, .inf), else a string.
YamlValue plain_scalar(std::string_view text);

struct MaxTextKey {
  YamlValue value;
  std::string source;  // the file that set it last, or "command line"
};

struct MaxTextConfig {
  std::string path;                        // the config file given
  std::vector<std::string> files;          // every file read, root of the base_config chain first
  std::string model_file;                  // models/<model_name>.yml, "" for model_name default
  std::map<std::string, MaxTextKey> keys;  // the merged keys after overrides and the model
  Config config;                           // shardlab's configuration
  int64_t num_devices = -1;                // -1: the config gives no device count
  int64_t num_slices = 1;
  std::string compile_topology;      // "" when not set
  std::optional<Topology> topology;  // compile_topology x compile_topology_num_slices
  // key=value (source) of keys that were set (by a file other than the root, the model file or
  // the command line) and have no effect on the plan; root keys without effect are counted.
  std::vector<std::string> no_effect;
  int64_t defaults_without_effect = 0;
  std::vector<std::string> notes;  // base.yml values shardlab keeps its own default for
  // The lines to show once: "accepted, no effect on the plan: ..." and the notes.
  std::string report() const;
};

// Reads `path` with MaxText's rules (above), applies `overrides` (MaxText's argv[2:]) and fills
// a Config. Errors name the file (or "command line") and the key. compile_topology names the
// hardware (engine/mesh/topology.h); `topology` and `num_devices` then come from its mesh.
Result<MaxTextConfig> load_maxtext_config(const std::string& path,
                                          const std::vector<ConfigOverride>& overrides);

// True when `arg` names a YAML file (ends in .yml or .yaml) rather than key=value overrides.
bool is_yaml_path(std::string_view arg);

}  // namespace eng
