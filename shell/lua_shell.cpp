// shell/lua_shell.cpp: bindings about the shell itself: sl.pretty, sl.help, sl.timing, sl.version, sl.system, sl.db_path, who().
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/tensor/system_info.h"
#include "engine/train/trainer.h"
#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/interrupt.h"
#include "shell/lua_binding.h"
#include "shell/pretty.h"

namespace shell {
namespace {

Result<int> pretty_string(lua_State* L) {
  PrettyOptions o;
  if (lua_gettop(L) >= 2) {
    ENG_RETURN_IF_ERROR(arg_table(L, 2, "sl.pretty", "options"));
    static const std::vector<std::string> keys = {"depth", "color", "width", "rows"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, "sl.pretty", keys));
    ENG_ASSIGN_OR_RETURN(auto depth, field_int(L, 2, "depth", "sl.pretty"));
    ENG_ASSIGN_OR_RETURN(auto color, field_bool(L, 2, "color", "sl.pretty"));
    ENG_ASSIGN_OR_RETURN(auto width, field_int(L, 2, "width", "sl.pretty"));
    ENG_ASSIGN_OR_RETURN(auto rows, field_bool(L, 2, "rows", "sl.pretty"));
    if (depth && (*depth < 0 || *depth > kMaxPrettyDepth))
      return eng::invalid_argument("sl.pretty: depth {} is outside [0, {}]", *depth,
                                   kMaxPrettyDepth);
    o.rows = rows.value_or(false);
    o.max_depth = static_cast<int>(depth.value_or(o.max_depth));
    o.color = color.value_or(false);
    o.width = static_cast<int>(width.value_or(o.width));
  }
  if (lua_gettop(L) < 1) return arg_error(L, 1, "sl.pretty", "value", "a value");
  std::string s = pretty(L, 1, o);
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

// sl.help(value or "name"): the docstring of a binding, as `?name` shows it.
Result<int> help(lua_State* L) {
  std::string doc;
  if (lua_type(L, 1) == LUA_TSTRING) {
    lua_getfield(L, LUA_REGISTRYINDEX, "shardlab.doc");
    lua_pushvalue(L, 1);
    if (lua_rawget(L, -2) == LUA_TSTRING) doc = lua_tostring(L, -1);
    lua_pop(L, 2);
  }
  if (doc.empty()) doc = find_doc(L, 1);
  if (doc.empty()) return eng::not_found("sl.help: no help for {}", luaL_typename(L, 1));
  lua_pushlstring(L, doc.data(), doc.size());
  return 1;
}

Result<int> db_path(lua_State* L) {
  lua_pushstring(L, context(L).db_path.c_str());
  return 1;
}

// sl.system(): engine/tensor/system_info.h's pairs as a table.
Result<int> system(lua_State* L) {
  lua_newtable(L);
  for (const auto& [k, v] : eng::system_info()) {
    lua_pushstring(L, v.c_str());
    lua_setfield(L, -2, k.c_str());
  }
  return 1;
}

// sl.timing([on]): switches the REPL's per-command timer; returns the setting.
Result<int> timing(lua_State* L) {
  if (!lua_isnoneornil(L, 1)) {
    ENG_ASSIGN_OR_RETURN(bool on, arg_bool(L, 1, "sl.timing", "on"));
    context(L).timing = on;
  }
  lua_pushboolean(L, context(L).timing);
  return 1;
}

constexpr const char* kSystemGlobalsKey = "shardlab.system_globals";
// Globals the shell itself sets while running (REPL results, notebook output cache).
constexpr const char* kShellMadeGlobals[] = {"_", "_LAST", "_RESULTS", "Out", "arg"};

bool is_system_global(lua_State* L, int key_idx) {
  key_idx = lua_absindex(L, key_idx);
  if (lua_type(L, key_idx) != LUA_TSTRING) return true;
  std::string_view name = lua_tostring(L, key_idx);
  for (const char* g : kShellMadeGlobals)
    if (name == g) return true;
  bool system = false;
  lua_getfield(L, LUA_REGISTRYINDEX, kSystemGlobalsKey);
  if (lua_type(L, -1) == LUA_TTABLE) {
    lua_pushvalue(L, key_idx);
    system = lua_rawget(L, -2) != LUA_TNIL;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return system;
}

// who([all]): trepl's listing of the user's globals (name, type, value); `who(true)` adds the
// system ones (the standard library, sl, plot, who itself).
Result<int> who(lua_State* L) {
  bool all = lua_toboolean(L, 1);
  struct Entry {
    std::string name, type, value;
    bool operator<(const Entry& e) const { return name < e.name; }
  };
  std::vector<Entry> user, system;
  PrettyOptions o;
  o.max_depth = 1;
  o.width = 1 << 20;  // one line
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  int g = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, g) != 0) {
    int top = lua_gettop(L);
    bool sys = is_system_global(L, top - 1);
    if (lua_type(L, -2) == LUA_TSTRING && (all || !sys)) {
      std::string name = lua_tostring(L, -2);
      std::string type = luaL_typename(L, -1);
      if (luaL_getmetafield(L, -1, "__name") == LUA_TSTRING) type = lua_tostring(L, -1);
      lua_settop(L, top);
      std::string value;
      if (lua_type(L, -1) != LUA_TFUNCTION) {
        value = pretty(L, -1, o);
        size_t nl = value.find('\n');
        if (nl != std::string::npos) value = value.substr(0, nl) + " ...";
        if (value.size() > 60) value = value.substr(0, 57) + "...";
      }
      (sys ? system : user).push_back({name, type, value});
    }
    lua_settop(L, top - 1);
  }
  lua_settop(L, g - 1);
  auto print_group = [](const char* title, auto& names) {
    std::sort(names.begin(), names.end());
    size_t name_width = 0, type_width = 0;
    for (const Entry& e : names) {
      name_width = std::max(name_width, e.name.size());
      type_width = std::max(type_width, e.type.size());
    }
    std::string out = fmt::format("== {} ==\n", title);
    for (const Entry& e : names) {
      std::string line = fmt::format("  {:<{}}  {:<{}}  {}", e.name, name_width, e.type,
                                     type_width, e.value);
      out += line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
    }
    std::fputs(out.c_str(), stdout);
  };
  print_group("User globals", user);
  if (all) print_group("System globals", system);
  std::fflush(stdout);
  return 0;
}

constexpr Function kShellFunctions[] = {
    {"pretty", lua_entry<pretty_string>, "sl.pretty(x [, {depth=5, color=false, width=80, rows=false}]) -> string",
     "Renders a value as the REPL prints it: tables recursively with sorted keys (long arrays\n"
     "  and big tables summarised), objects through __tostring. rows=true shows sl.sql and\n"
     "  c:temps results as the REPL does, as aligned tables."},
    {"help", lua_entry<help>, "sl.help(x) -> string",
     "The docstring of a binding, a type or a value's type; `?x` in the REPL prints it."},
    {"db_path", lua_entry<db_path>, "sl.db_path() -> string",
     "Path of the metrics store (--db, else $SHARDLAB_DB, else ./shardlab.db)."},
    {"system", lua_entry<system>, "sl.system() -> table",
     "What this process runs on: cpu, cpu_flags, blas_core (OpenBLAS's kernels), blas_best (the\n"
     "  strongest this CPU runs), blas_env, simd (the engine's kernels), matmul_f32, matmul_bf16.\n"
     "  `shardlab --version` prints the same; every run records them as shardlab.* tags."},
    {"timing", lua_entry<timing>, "sl.timing([on]) -> boolean",
     "Switches the REPL's per-command timer (trepl's `[0.0123s]` after commands over 0.1 s,\n"
     "  only on a terminal); returns the current setting."},
};

}  // namespace

void open_lua_shell(lua_State* L, int sl) {
  add_functions(L, sl, "sl", kShellFunctions);
  lua_pushstring(L, "shardlab 0.1 (" LUA_RELEASE ")");
  lua_setfield(L, sl, "version");
  lua_pushcfunction(L, lua_entry<who>);
  set_doc(L, -1, "who",
          "who([all]) lists your globals with their types and values, as trepl's who();\n"
          "  who(true) adds the system ones (standard library, sl, plot).");
  lua_setglobal(L, "who");
}

void remember_system_globals(lua_State* L) {
  lua_newtable(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_pushboolean(L, 1);
    lua_rawset(L, -5);
  }
  lua_pop(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, kSystemGlobalsKey);
}

void fail_open_runs(lua_State* L, const std::string& error) {
  if (shell_interrupt_requested() || shell_terminate_requested()) return;  // KILLED, not FAILED
  for (const eng::Trainer* t : context(L).trainers) t->recorder().set_script_error(error);
}

}  // namespace shell
