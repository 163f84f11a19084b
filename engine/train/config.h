// engine/train/config.h: the training configuration, keyed by MaxText's names
// (MaxText's configs/base.yml). Values resolve in MaxText's order: base defaults, then
// the model preset (like configs/models/<model>.yml), then the user's overrides.
//
//   Config c;
//   ENG_RETURN_IF_ERROR(c.set("model_name", "llama-tiny"));
//   ENG_RETURN_IF_ERROR(c.set("steps", int64_t{200}));
//   Result<ResolvedConfig> r = c.resolve(/*num_devices=*/1);
//
// An unknown key is an error with a did-you-mean suggestion; a value of the wrong type
// names the key, the expected type and what was given.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/base/status.h"
#include "engine/model/llama.h"
#include "engine/sharding/logical_rules.h"

namespace eng {

using ConfigValue = std::variant<bool, int64_t, double, std::string>;
std::string config_value_string(const ConfigValue& v);

struct ConfigKey {
  std::string_view name;
  ConfigValue default_value;
  std::string_view doc;
};

// Every key shardlab knows, in documentation order.
const std::vector<ConfigKey>& config_keys();

class Config {
 public:
  // Sets a user override. Integers are accepted for float keys; "model" is an alias of
  // "model_name" and "dataset" ("synthetic", "text:PATH", "tokens:PATH") sets
  // dataset_type and dataset_path.
  Status set(std::string_view key, ConfigValue value);
  bool has_override(std::string_view key) const;
  // The value after defaults, preset and overrides.
  Result<ConfigValue> get(std::string_view key) const;
  int64_t get_int(std::string_view key) const;        // REQUIRES: a known int key
  double get_float(std::string_view key) const;       // REQUIRES: a known float key
  bool get_bool(std::string_view key) const;          // REQUIRES: a known bool key
  std::string get_string(std::string_view key) const; // REQUIRES: a known string key
  // Every key with its resolved value, sorted: the `params` table of the metrics store.
  std::map<std::string, std::string> flatten() const;
  const std::map<std::string, ConfigValue>& overrides() const { return overrides_; }

  // logical_axis_rules as a typed value (the shell hands the rules it read from a Lua table;
  // nothing prints and re-parses them). get("logical_axis_rules") shows them in base.yml's list
  // form. A string set with set() (MaxText's override syntax) is parsed by logical_axis_rules(),
  // whose error names the position.
  void set_logical_axis_rules(LogicalAxisRules rules);
  Result<LogicalAxisRules> logical_axis_rules() const;

 private:
  const ConfigValue* preset_value(std::string_view key) const;
  std::map<std::string, ConfigValue> overrides_;  // user-set keys
  std::optional<LogicalAxisRules> rules_;         // set_logical_axis_rules; nullopt: parse the key
};

// The derived values a run needs, validated together.
struct ResolvedConfig {
  ModelConfig model;
  int64_t num_devices = 1;
  int64_t per_device_batch_size = 0;   // after int() of the float key
  int64_t global_batch_size = 0;       // MaxText global_batch_size_to_load
  int64_t max_target_length = 0;       // T
  int64_t steps = 0;
  // Optimizer (optax.adamw, MaxText defaults) and schedule.
  double learning_rate = 0, warmup_steps_fraction = 0, learning_rate_final_fraction = 0;
  int64_t warmup_steps = 0, cos_steps = 0;
  double adam_b1 = 0, adam_b2 = 0, adam_eps = 0, adam_weight_decay = 0;
  double gradient_clipping_threshold = 0;
  // float32 gradients are cast to grad_dtype (MaxText train.py); dtype and weight_dtype live
  // in model (docs/precision.md).
  DType grad_dtype = DType::kF32;
  // Data.
  std::string dataset_type;  // synthetic | text | tokens
  std::string dataset_path;
  bool packing = false;  // text dataset with packing: documents packed, segment ids (data.h)
  uint64_t init_weights_seed = 0, data_shuffle_seed = 0;
  std::string run_name;
  // Rematerialisation (engine/ir/remat.h): remat_policy and, for save_only_these_names /
  // custom, remat_save_names (validated).
  std::string remat_policy = "full";
  std::string remat_save_names;
  std::string remat_offload_names;  // custom: offloaded to host memory (remat.h)
};

// Validates and derives; errors name the key and value (e.g. "per_device_batch_size must be
// positive, got -1").
Result<ResolvedConfig> resolve_config(const Config& c, int64_t num_devices);

// The per-model logical_axis_rules of MaxText's configs/models/<model>.yml: llama2-7b, -13b
// and -70b carry [['norm', 'fsdp']]; other presets none. compile_options_from_config merges
// them into base.yml's rules first and the user's logical_axis_rules after (pyconfig.py).
LogicalAxisRules model_logical_axis_rules(const std::string& model_name);

// Closest known key to `key` (edit distance), or "" if none is close.
std::string suggest_config_key(std::string_view key);

// The global batch of per_device_batch_size on num_devices. MaxText computes
// int(num_devices * per_device_batch_size) and silently truncates (0.3 on 4 devices trains on 1
// sequence); here the product must be a whole number >= 1, else the error names the value, the
// device count and the product, with the nearest valid per_device_batch_size values.
Result<int64_t> global_batch_size(double per_device_batch_size, int64_t num_devices);

// The device count of the mesh a config asks for when the trainer is given none: the num_devices
// key if set, else the product of the ici_*_parallelism sizes that are not -1 (a -1 axis then
// fills to 1). nullopt when the config sets neither num_devices nor any ici_* key: the trainer
// keeps its one-device mesh with no axes.
Result<std::optional<int64_t>> config_num_devices(const Config& c);

// MaxText's command-line overrides in one string, as pyconfig reads argv[2:]:
// "model=llama-tiny steps=10 run_name='my run'". Tokens are split at whitespace outside quotes
// ('...' literal, "..." with \" and \\ escapes; the quotes are removed), each at its first
// '='. Errors name the token: an unterminated quote, a token without '=' or with an empty key.
struct ConfigOverride {
  std::string key;
  std::string value;  // unquoted text, typed by parse_config_value
  std::string token;  // as written, for error messages
};
Result<std::vector<ConfigOverride>> split_config_overrides(std::string_view text);
// pyconfig's typing of a command-line value by the key's type in the key table: int() for
// integer keys ("10", "-1", "+3"), float() for number keys ("3e-4", "1"), true/false in any case
// for booleans, the text itself for strings ("model" and "dataset" are strings).
Result<ConfigValue> parse_config_value(std::string_view key, std::string_view text);

// The warning t:train{} prints (once per trainer) when a call ends with the learning rate still
// in its linear warmup (last_step < warmup_steps: with the default warmup_steps_fraction 0.1,
// fewer than a tenth of the schedule's steps were run). It names the steps run, the schedule
// length and the lr at the last step; "" when the warmup is over.
std::string warmup_warning(const ResolvedConfig& r, int64_t steps_run, int64_t last_step,
                           double last_lr);
// What t:train{} says when a call starts at `first_step` and asks for `steps` steps past the
// config's `steps` (MaxText trains exactly `steps` steps): with no steps given (`asked` false)
// that there is nothing left to train; else which steps lie past it and, past the learning-rate
// schedule's end, that their learning rate is 0 (they leave the weights as they are). "" when
// the call stays within the config's steps.
std::string past_steps_note(const ResolvedConfig& r, int64_t first_step, int64_t steps, bool asked);

}  // namespace eng
