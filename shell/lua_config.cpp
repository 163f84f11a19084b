// shell/lua_config.cpp: Lua bindings for training configurations: sl.config, sl.config_keys, Config.
#include <algorithm>
#include <cctype>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/base/limits.h"
#include "engine/frontend/config.h"
#include "engine/train/config.h"
#include "engine/train/maxtext_yaml.h"
#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/lua_binding.h"
#include "shell/lua_sharding.h"
#include "shell/lua_types.h"

namespace shell {
namespace {

// Every key sl.config takes: MaxText's names and the short forms model and dataset.
const std::vector<std::string>& config_key_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = {"model", "dataset"};
    for (const eng::ConfigKey& k : eng::config_keys()) out.emplace_back(k.name);
    return out;
  }();
  return names;
}

// An unknown key in the shell's one wording (the engine's own message says it differently).
Status check_config_key(std::string_view fn, const std::string& key) {
  if (static_cast<int64_t>(key.size()) > eng::kMaxNameLength)  // as Config::set says it
    return eng::invalid_argument(
        "{}: a key of {} characters ('{}...') is over the limit of {} characters", fn,
        key.size(), key.substr(0, 32), eng::kMaxNameLength);
  const std::vector<std::string>& names = config_key_names();
  if (std::find(names.begin(), names.end(), key) != names.end()) return eng::ok_status();
  return eng::invalid_argument("{}: unknown key '{}'{}", fn, key, did_you_mean_hint(key, names));
}

// ---- sl.config -------------------------------------------------------------------------

// A Lua value as a config value: integer, number, boolean or string.
Result<eng::ConfigValue> to_config_value(lua_State* L, int idx, const std::string& key) {
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return eng::ConfigValue{lua_toboolean(L, idx) != 0};
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) return eng::ConfigValue{static_cast<int64_t>(lua_tointeger(L, idx))};
      return eng::ConfigValue{lua_tonumber(L, idx)};
    case LUA_TSTRING: {  // with its length: a NUL inside reaches Config::set (refused there)
      size_t n = 0;
      const char* p = lua_tolstring(L, idx, &n);
      return eng::ConfigValue{std::string(p, n)};
    }
    default:
      return eng::invalid_argument("sl.config: key '{}' expected a number, boolean or string, got {}",
                                   key, luaL_typename(L, idx));
  }
}

// logical_axis_rules given as a table ({{"embed", {"fsdp"}}, ...}) goes into the Config as
// typed rules; returns false (nothing done) for any other key or value.
Result<bool> set_rules_table(lua_State* L, eng::Config& c, const std::string& key, int idx) {
  if (key != "logical_axis_rules" || lua_type(L, idx) != LUA_TTABLE) return false;
  ENG_ASSIGN_OR_RETURN(eng::LogicalAxisRules rules,
                       rules_from_table(L, lua_absindex(L, idx), "sl.config"));
  c.set_logical_axis_rules(std::move(rules));
  return true;
}

// Sets MaxText command-line overrides, typed as pyconfig does (engine/train/config.h): model
// first, so preset-dependent validation sees it (as for the table form); later tokens override
// earlier ones, as in MaxText's argv. Every error names `fn` and the token it is about.
Status apply_overrides(eng::Config& c, std::vector<eng::ConfigOverride> items, std::string_view fn) {
  std::stable_partition(items.begin(), items.end(), [](const eng::ConfigOverride& o) {
    return o.key == "model" || o.key == "model_name";
  });
  for (const eng::ConfigOverride& o : items) {
    Status s = check_config_key(fn, o.key);
    if (s.ok()) {
      Result<eng::ConfigValue> v = eng::parse_config_value(o.key, o.value);
      s = v.ok() ? c.set(o.key, std::move(v).value()) : v.status();
    }
    if (!s.ok())
      return with_context(fn, Status(s.code(), fmt::format("{} (in '{}')", s.message(), o.token)));
  }
  return eng::ok_status();
}

// sl.config("model=llama-tiny steps=10 run_name='a b'"): MaxText's command-line overrides.
Status set_from_overrides(eng::Config& c, std::string_view text) {
  constexpr std::string_view fn = "sl.config";
  Result<std::vector<eng::ConfigOverride>> parsed = eng::split_config_overrides(text);
  if (!parsed.ok()) return with_context(fn, parsed.status());
  return apply_overrides(c, std::move(parsed).value(), fn);
}

// A Lua override value as MaxText's command line would spell it: 12, 1e-05, true, text, [a, b].
Result<std::string> override_text(lua_State* L, int idx, const std::string& key, int depth) {
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return std::string(lua_toboolean(L, idx) ? "true" : "false");
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) return fmt::format("{}", lua_tointeger(L, idx));
      return fmt::format("{}", lua_tonumber(L, idx));
    case LUA_TSTRING: return std::string(lua_tostring(L, idx));
    case LUA_TTABLE: {
      if (depth > 8) return eng::invalid_argument("sl.config: {}: lists nested too deeply", key);
      std::vector<std::string> items;
      const lua_Integer n = luaL_len(L, idx);
      for (lua_Integer i = 1; i <= n; ++i) {
        const bool text = lua_rawgeti(L, idx, i) == LUA_TSTRING;
        Result<std::string> t = override_text(L, lua_absindex(L, -1), key, depth + 1);
        lua_pop(L, 1);
        if (!t.ok()) return t.status();
        if (text && t->find('\'') != std::string::npos)
          return eng::invalid_argument("sl.config: {}: a list item may not hold a quote", key);
        items.push_back(text ? "'" + *t + "'" : *t);
      }
      return fmt::format("[{}]", fmt::join(items, ", "));
    }
    default:
      return eng::invalid_argument("sl.config: {}: expected a number, boolean, string or list, got "
                                   "{}",
                                   key, luaL_typename(L, idx));
  }
}

// sl.config("base.yml" [, {key = value} | "key=value ..."]): MaxText's YAML and overrides
// (engine/train/maxtext_yaml.h); what has no effect on the plan is printed once.
Result<int> config_from_yaml(lua_State* L, const std::string& path) {
  constexpr std::string_view fn = "sl.config";
  std::vector<eng::ConfigOverride> overrides;
  if (lua_type(L, 2) == LUA_TSTRING) {
    ENG_ASSIGN_OR_RETURN(overrides,
                         with_context(fn, eng::split_config_overrides(lua_tostring(L, 2))));
  } else if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, 2) != 0) {
      if (lua_type(L, -2) != LUA_TSTRING) {
        lua_pop(L, 2);
        return eng::invalid_argument("sl.config: override keys must be strings (MaxText names)");
      }
      const std::string key = lua_tostring(L, -2);
      Result<std::string> text = override_text(L, lua_absindex(L, -1), key, 0);
      lua_pop(L, 1);
      if (!text.ok()) return text.status();
      overrides.push_back({key, *text, key + "=" + *text});
    }
    std::sort(overrides.begin(), overrides.end(),
              [](const eng::ConfigOverride& a, const eng::ConfigOverride& b) {
                return a.key < b.key;
              });
  } else if (!lua_isnoneornil(L, 2)) {
    return arg_error(L, 2, fn, "overrides", "table or \"key=value ...\" string");
  }
  Result<eng::MaxTextConfig> m = eng::load_maxtext_config(path, overrides);
  if (!m.ok()) return with_context(fn, m.status());
  const std::string report = m->report();
  push_udata(L, std::move(m->config));
  if (!report.empty()) {  // through print (protected), as sl.trainer's resume note
    lua_getglobal(L, "print");
    lua_pushlstring(L, report.data(), report.size() - 1);  // without the last newline
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_pop(L, 1);
  }
  return 1;
}

Result<int> config_new(lua_State* L) {
  constexpr std::string_view fn = "sl.config";
  eng::Config c;
  if (lua_type(L, 1) == LUA_TSTRING && eng::is_yaml_path(lua_tostring(L, 1)))
    return config_from_yaml(L, lua_tostring(L, 1));
  if (lua_type(L, 1) == LUA_TSTRING) {
    size_t n = 0;
    const char* text = lua_tolstring(L, 1, &n);
    ENG_RETURN_IF_ERROR(set_from_overrides(c, std::string_view(text, n)));
  } else if (!lua_isnoneornil(L, 1)) {
    if (lua_type(L, 1) != LUA_TTABLE)
      return arg_error(L, 1, fn, "options", "table or \"key=value ...\" string");
    // Apply model_name first so preset-dependent validation sees it, then the rest sorted.
    std::vector<std::string> keys;
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {
      if (lua_type(L, -2) != LUA_TSTRING) {
        lua_pop(L, 2);
        return eng::invalid_argument("sl.config: keys must be strings (MaxText config names)");
      }
      size_t n = 0;
      const char* k = lua_tolstring(L, -2, &n);
      keys.emplace_back(k, n);  // whole: "run_name\0x" is not run_name
      lua_pop(L, 1);
    }
    std::sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
      bool ma = a == "model" || a == "model_name", mb = b == "model" || b == "model_name";
      return ma != mb ? ma : a < b;
    });
    for (const std::string& k : keys) {
      ENG_RETURN_IF_ERROR(check_config_key(fn, k));
      push_field(L, 1, k.c_str());
      Result<bool> table = set_rules_table(L, c, k, -1);
      if (!table.ok() || *table) lua_pop(L, 1);
      if (!table.ok()) return table.status();
      if (*table) continue;
      Result<eng::ConfigValue> v = to_config_value(L, -1, k);
      lua_pop(L, 1);
      if (!v.ok()) return v.status();
      eng::Status s = c.set(k, std::move(v).value());
      if (!s.ok()) return with_context(fn, s);
    }
  }
  // The script's key=value arguments override its config, as MaxText's argv overrides the YAML.
  ShellContext& ctx = context(L);
  if (!ctx.arg_overrides.empty()) {
    ENG_RETURN_IF_ERROR(apply_overrides(c, ctx.arg_overrides, "sl.config: script argument"));
    ctx.arg_overrides_applied = true;
  }
  push_udata(L, std::move(c));
  return 1;
}

Result<int> config_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Config * c, arg_udata<eng::Config>(L, 1, "Config:__tostring"));
  std::vector<std::string> parts;
  parts.push_back("model_name=" + c->get_string("model_name"));
  for (const auto& [k, v] : c->overrides())
    if (k != "model_name") parts.push_back(fmt::format("{}={}", k, eng::config_value_string(v)));
  lua_pushstring(L, fmt::format("Config({})", fmt::join(parts, ", ")).c_str());
  return 1;
}

void push_config_value(lua_State* L, const eng::ConfigValue& v) {
  switch (v.index()) {
    case 0: lua_pushboolean(L, std::get<bool>(v)); break;
    case 1: lua_pushinteger(L, std::get<int64_t>(v)); break;
    case 2: lua_pushnumber(L, std::get<double>(v)); break;
    default: lua_pushstring(L, std::get<std::string>(v).c_str());
  }
}

Result<int> config_get(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Config * c, arg_udata<eng::Config>(L, 1, "Config:get"));
  ENG_ASSIGN_OR_RETURN(std::string key, arg_string(L, 2, "Config:get", "key"));
  Result<eng::ConfigValue> v = c->get(key == "model" ? "model_name" : key);
  if (!v.ok()) {
    return eng::invalid_argument("Config:get: unknown key '{}'{}", key, did_you_mean_hint(key, config_key_names()));
  }
  push_config_value(L, *v);
  return 1;
}

Result<int> config_set(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Config * c, arg_udata<eng::Config>(L, 1, "Config:set"));
  ENG_ASSIGN_OR_RETURN(std::string key, arg_string(L, 2, "Config:set", "key"));
  ENG_RETURN_IF_ERROR(check_config_key("Config:set", key));
  ENG_ASSIGN_OR_RETURN(bool table, set_rules_table(L, *c, key, 3));
  if (table) {
    lua_settop(L, 1);
    return 1;
  }
  ENG_ASSIGN_OR_RETURN(eng::ConfigValue v, to_config_value(L, 3, key));
  eng::Status s = c->set(key, std::move(v));
  ENG_RETURN_IF_ERROR(with_context("Config:set", s));
  lua_settop(L, 1);
  return 1;
}

Result<int> config_params(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Config * c, arg_udata<eng::Config>(L, 1, "Config:params"));
  lua_createtable(L, 0, static_cast<int>(eng::config_keys().size()));
  for (const eng::ConfigKey& k : eng::config_keys()) {
    push_config_value(L, c->get(k.name).value());
    lua_setfield(L, -2, std::string(k.name).c_str());
  }
  return 1;
}

Result<int> config_keys_doc(lua_State* L) {
  lua_createtable(L, 0, static_cast<int>(eng::config_keys().size()));
  for (const eng::ConfigKey& k : eng::config_keys()) {
    lua_pushstring(L, fmt::format("{} (default {})", k.doc, eng::config_value_string(k.default_value)).c_str());
    lua_setfield(L, -2, std::string(k.name).c_str());
  }
  return 1;
}

constexpr Function kConfigFunctions[] = {
    {"config", lua_entry<config_new>,
     "sl.config{model=\"llama-tiny\", steps=..., per_device_batch_size=..., ...} | sl.config(\"key=value ...\") -> Config",
     "A training configuration keyed by MaxText's names (see sl.config_keys()). Values resolve as\n"
     "  in MaxText: base defaults, then the model preset, then these overrides. `model` is short\n"
     "  for model_name; dataset=\"synthetic\" | \"text:PATH\" | \"tokens:PATH.npy\" sets dataset_type\n"
     "  and dataset_path. Unknown keys are errors with a did-you-mean suggestion.\n"
     "  A string takes MaxText's command-line overrides: sl.config(\"model=llama-tiny steps=10\n"
     "  per_device_batch_size=1 run_name='my run'\"), typed by each key's type as pyconfig does\n"
     "  (integers, numbers, true/false in any case, strings; quotes group; the last of a repeated\n"
     "  key wins). The script's key=value arguments (`shardlab train.lua steps=5`) override\n"
     "  every sl.config's keys, as MaxText's command line overrides its YAML.\n"
     "  A path ending in .yml/.yaml reads MaxText's own YAML with pyconfig's rules (base_config\n"
     "  chains, models/<model_name>.yml, derived values): sl.config(\"base.yml\", {model_name =\n"
     "  \"llama2-7b\", num_devices = 8}) (overrides as a table or \"key=value ...\" string, typed\n"
     "  like the file's values); keys with no effect on the plan are printed once (docs/train_compile.md)."},
    {"config_keys", lua_entry<config_keys_doc>, "sl.config_keys() -> {key = doc}",
     "Every configuration key with its meaning and default."},
};

constexpr Method kConfigMethods[] = {
    {"get", lua_entry<config_get>, "c:get(key) -> value", "The resolved value of a key."},
    {"set", lua_entry<config_set>, "c:set(key, value) -> c", "Overrides a key (validated)."},
    {"params", lua_entry<config_params>, "c:params() -> {key = value}",
     "Every key with its resolved value (what the store's params table records)."},
};

}  // namespace

Result<std::vector<eng::ConfigOverride>> script_config_overrides(std::span<char* const> args) {
  std::vector<eng::ConfigOverride> out;
  for (const char* a : args) {
    const std::string_view token(a);
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    const std::string_view key = token.substr(0, eq);
    const bool name = std::all_of(key.begin(), key.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
    });
    if (!name || std::isdigit(static_cast<unsigned char>(key[0]))) continue;  // a path, say
    out.push_back({std::string(key), std::string(token.substr(eq + 1)), std::string(token)});
  }
  eng::Config scratch;  // unknown keys and ill-typed values fail before the script runs
  ENG_RETURN_IF_ERROR(apply_overrides(scratch, out, "script argument"));
  return out;
}

namespace {

// sl.config.update(name, value): jax.config.update (engine/frontend/config.h).
Result<int> config_update(lua_State* L) {
  constexpr std::string_view fn = "sl.config.update";
  if (lua_type(L, 1) != LUA_TSTRING) return arg_error(L, 1, fn, "name", "string");
  eng::frontend::ConfigValue v;
  if (lua_isinteger(L, 2)) v.integer = lua_tointeger(L, 2);
  v.text = lua_type(L, 2) == LUA_TSTRING ? fmt::format("'{}'", lua_tostring(L, 2))
                                         : std::string(luaL_tolstring(L, 2, nullptr));
  ENG_RETURN_IF_ERROR(eng::frontend::config_update(lua_tostring(L, 1), v));
  return 0;
}

// sl.config called as a function: __call's first argument is the table itself.
int config_call(lua_State* L) {
  lua_remove(L, 1);
  return lua_entry<config_new>(L);
}

}  // namespace

void open_lua_config(lua_State* L, int sl) {
  define_type(L, {"Config", "A training configuration (MaxText key names).", lua_entry<config_tostring>,
                  nullptr, udata_gc<eng::Config>, kConfigMethods});
  sl = lua_absindex(L, sl);
  add_functions(L, sl, "sl", kConfigFunctions);
  // sl.config is also JAX's jax.config (`jax.` read as `sl.`): a callable table with update.
  lua_createtable(L, 0, 1);
  const Function update[] = {
      {"update", lua_entry<config_update>, "sl.config.update(name, value)",
       "jax.config.update: 'jax_num_cpu_devices' sets the number of local simulated devices\n"
       "  (sl.devices()) before any device is in use (an array, a trainer), as JAX's before its\n"
       "  backends start; other names are errors."}};
  add_functions(L, -1, "sl.config", update);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, config_call);
  lua_setfield(L, -2, "__call");
  lua_setmetatable(L, -2);
  set_doc(L, -1, "sl.config",  // help(sl.config): the constructor's doc
          fmt::format("{}\n  {}\n  sl.config.update(name, value): jax.config.update.",
                      kConfigFunctions[0].signature, kConfigFunctions[0].doc));
  lua_setfield(L, sl, "config");
}

}  // namespace shell
