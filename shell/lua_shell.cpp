// shell/lua_shell.cpp: bindings about the shell itself: sl.pretty, sl.help, sl.version, sl.db_path.
#include <cstdio>

#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/lua_binding.h"
#include "shell/pretty.h"

namespace shell {
namespace {

Result<int> pretty_string(lua_State* L) {
  PrettyOptions o;
  if (lua_gettop(L) >= 2) {
    ENG_RETURN_IF_ERROR(arg_table(L, 2, "sl.pretty", "options"));
    static const std::vector<std::string> keys = {"depth", "color", "width"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, "sl.pretty", keys));
    ENG_ASSIGN_OR_RETURN(auto depth, field_int(L, 2, "depth", "sl.pretty"));
    ENG_ASSIGN_OR_RETURN(auto color, field_bool(L, 2, "color", "sl.pretty"));
    ENG_ASSIGN_OR_RETURN(auto width, field_int(L, 2, "width", "sl.pretty"));
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

constexpr Function kShellFunctions[] = {
    {"pretty", lua_entry<pretty_string>, "sl.pretty(x [, {depth=5, color=false, width=80}]) -> string",
     "Renders a value as the REPL prints it: tables recursively with sorted keys,\n"
     "  objects through __tostring."},
    {"help", lua_entry<help>, "sl.help(x) -> string",
     "The docstring of a binding, a type or a value's type; `?x` in the REPL prints it."},
    {"db_path", lua_entry<db_path>, "sl.db_path() -> string",
     "Path of the metrics store (--db, else $SHARDLAB_DB, else ./shardlab.db)."},
};

}  // namespace

void open_lua_shell(lua_State* L, int sl) {
  add_functions(L, sl, "sl", kShellFunctions);
  lua_pushstring(L, "shardlab 0.1 (" LUA_RELEASE ")");
  lua_setfield(L, sl, "version");
}

}  // namespace shell
