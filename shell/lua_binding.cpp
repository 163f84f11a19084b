// shell/lua_binding.cpp: argument checking, option tables, type registration and the docstring registry.
#include "shell/lua_binding.h"


#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>

#include <fmt/format.h>

#include "engine/base/limits.h"

namespace shell {
namespace {

constexpr const char* kDocTable = "shardlab.doc";       // registry: qualified name -> text
constexpr const char* kDocNameTable = "shardlab.docname";  // registry: value -> qualified name

// Pushes registry[name], creating an empty table there the first time.
void push_registry_table(lua_State* L, const char* name) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, name) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, name);
  }
}

std::string label(int idx, std::string_view name) {
  return name.empty() ? fmt::format("#{}", idx) : fmt::format("'{}'", name);
}

std::string got(lua_State* L, int idx) {
  if (lua_type(L, idx) == LUA_TNUMBER && !lua_isinteger(L, idx))
    return fmt::format("number ({})", lua_tonumber(L, idx));
  if (lua_type(L, idx) == LUA_TUSERDATA && luaL_getmetafield(L, idx, "__name") == LUA_TSTRING) {
    std::string n = lua_tostring(L, -1);
    lua_pop(L, 1);
    return n;
  }
  return luaL_typename(L, idx);
}


}  // namespace

void push_strings(lua_State* L, const std::vector<std::string>& xs) {
  lua_createtable(L, static_cast<int>(xs.size()), 0);
  for (size_t i = 0; i < xs.size(); ++i) {
    lua_pushstring(L, xs[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
}

void set_global_raw(lua_State* L, const char* name, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  lua_pushstring(L, name);
  lua_pushvalue(L, idx);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void push_status(lua_State* L, const Status& s) {
  lua_pushlstring(L, s.message().data(), s.message().size());
}

namespace {
// "sl.trainer" for the running C function when it has a docstring, else the name Lua called it by.
std::string running_function(lua_State* L) {
  lua_Debug ar;
  if (!lua_getstack(L, 0, &ar)) return "shardlab";
  std::string out;
  if (lua_getinfo(L, "fn", &ar)) {
    push_registry_table(L, kDocNameTable);
    lua_pushvalue(L, -2);
    if (lua_rawget(L, -2) == LUA_TSTRING) out = lua_tostring(L, -1);
    lua_pop(L, 3);
  }
  if (out.empty() && ar.name != nullptr) out = ar.name;
  return out.empty() ? "shardlab" : out;
}
}  // namespace

Result<int> call_guarded(lua_State* L, Result<int> (*fn)(lua_State*)) noexcept {
  try {
    return fn(L);
  } catch (const std::bad_alloc&) {
    return eng::Status(eng::Code::kResourceExhausted,
                       running_function(L) + ": out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return eng::Status(eng::Code::kInternal,
                       fmt::format("{}: internal error: C++ exception: {}", running_function(L), e.what()));
  } catch (...) {
    return eng::Status(eng::Code::kInternal, running_function(L) + ": internal error: unknown C++ exception");
  }
}

int call_guarded_main(lua_State* L, int (*body)(lua_State*)) noexcept {
  try {
    return body(L);
  } catch (const std::bad_alloc&) {
    std::fputs("shardlab: out of memory (std::bad_alloc)\n", stderr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlab: internal error: C++ exception: %s\n", e.what());
  } catch (...) {
    std::fputs("shardlab: internal error: unknown C++ exception\n", stderr);
  }
  return 0;
}

std::string fmt_forged(const char* type) {
  return fmt::format("a real {0} (this userdata was given a {0}'s metatable)", type);
}

Status dead_udata_error(std::string_view fn, std::string_view name, int idx, const char* type) {
  return eng::failed_precondition("{}: argument {} is a {} that was already finalised (its __gc ran)", fn,
                                  label(idx, name), type);
}

int udata_gc_again(lua_State* L, const char* type) {
  return luaL_error(L, "%s.__gc: this %s was already finalised", type, type);
}

Status arg_error(lua_State* L, int idx, std::string_view fn, std::string_view name,
                 std::string_view expected) {
  return eng::invalid_argument("{}: argument {} expected {}, got {}", fn, label(idx, name),
                               expected, got(L, idx));
}

Result<int64_t> arg_int(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  int ok = 0;
  lua_Integer v = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &ok) : 0;
  if (!ok) return arg_error(L, idx, fn, name, "integer");
  return int64_t{v};
}

Result<std::optional<int64_t>> opt_int(lua_State* L, int idx, std::string_view fn,
                                       std::string_view name) {
  if (lua_isnoneornil(L, idx)) return std::optional<int64_t>();
  ENG_ASSIGN_OR_RETURN(int64_t v, arg_int(L, idx, fn, name));
  return std::optional<int64_t>(v);
}

Result<double> arg_number(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  if (lua_type(L, idx) != LUA_TNUMBER) return arg_error(L, idx, fn, name, "number");
  return double{lua_tonumber(L, idx)};
}

Result<std::optional<double>> opt_number(lua_State* L, int idx, std::string_view fn,
                                         std::string_view name) {
  if (lua_isnoneornil(L, idx)) return std::optional<double>();
  ENG_ASSIGN_OR_RETURN(double v, arg_number(L, idx, fn, name));
  return std::optional<double>(v);
}

Result<bool> arg_bool(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  if (lua_type(L, idx) != LUA_TBOOLEAN) return arg_error(L, idx, fn, name, "boolean");
  return lua_toboolean(L, idx) != 0;
}

Result<std::string> arg_string(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  if (lua_type(L, idx) != LUA_TSTRING) return arg_error(L, idx, fn, name, "string");
  size_t n = 0;
  const char* s = lua_tolstring(L, idx, &n);
  return std::string(s, n);
}

Result<std::optional<std::string>> opt_string(lua_State* L, int idx, std::string_view fn,
                                              std::string_view name) {
  if (lua_isnoneornil(L, idx)) return std::optional<std::string>();
  ENG_ASSIGN_OR_RETURN(std::string v, arg_string(L, idx, fn, name));
  return std::optional<std::string>(std::move(v));
}

Status arg_table(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  if (lua_type(L, idx) != LUA_TTABLE) return arg_error(L, idx, fn, name, "table");
  return eng::ok_status();
}

Result<std::vector<std::string>> arg_string_list(lua_State* L, int idx, std::string_view fn,
                                                 std::string_view name) {
  if (lua_type(L, idx) != LUA_TTABLE) return arg_error(L, idx, fn, name, "table of strings");
  idx = lua_absindex(L, idx);
  std::vector<std::string> out;
  lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, idx));
  for (lua_Integer i = 1; i <= n; ++i) {
    if (lua_rawgeti(L, idx, i) != LUA_TSTRING) {
      Status s = eng::invalid_argument("{}: argument {} expected table of strings, item {} is {}",
                                       fn, label(idx, name), i, got(L, -1));
      lua_pop(L, 1);
      return s;
    }
    out.emplace_back(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  return out;
}

int push_field(lua_State* L, int table_idx, const char* key) {
  table_idx = lua_absindex(L, table_idx);
  lua_pushstring(L, key);
  return lua_rawget(L, table_idx);
}

// Reads t[key] with a typed getter that uses the key as the argument's name.
template <typename T, typename Get>
Result<std::optional<T>> field(lua_State* L, int table_idx, const char* key, std::string_view fn,
                               Get get) {
  push_field(L, table_idx, key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return std::optional<T>();
  }
  Result<T> r = get(L, -1, fn, key);
  lua_pop(L, 1);
  if (!r.ok()) return r.status();
  return std::optional<T>(std::move(r).value());
}

Result<std::optional<int64_t>> field_int(lua_State* L, int t, const char* key, std::string_view fn) {
  return field<int64_t>(L, t, key, fn, arg_int);
}
Result<std::optional<double>> field_number(lua_State* L, int t, const char* key,
                                           std::string_view fn) {
  return field<double>(L, t, key, fn, arg_number);
}
Result<std::optional<std::string>> field_string(lua_State* L, int t, const char* key,
                                                std::string_view fn) {
  return field<std::string>(L, t, key, fn, arg_string);
}
Result<std::optional<bool>> field_bool(lua_State* L, int t, const char* key, std::string_view fn) {
  return field<bool>(L, t, key, fn, arg_bool);
}

namespace {
// Edits (insert, delete, replace, swap two neighbours) between a and b: "stpes" -> "steps" is 1.
size_t typo_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}
}  // namespace

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  std::string best;
  // typo_distance is quadratic: a word longer than any name is close to none (limits.h).
  if (static_cast<int64_t>(word.size()) > eng::kMaxNameLength) return best;
  size_t best_d = std::max<size_t>(1, word.size() / 4) + 1;  // the cut-off: "nope" is not "dtype"
  for (const std::string& c : candidates) {
    size_t d = typo_distance(word, c);
    if (word.size() >= 4 && c.find(word) != std::string::npos) d = std::min<size_t>(d, 1);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

std::string did_you_mean_hint(std::string_view word, std::span<const std::string> candidates) {
  std::string near = did_you_mean(word, candidates);
  return near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near);
}

Status check_keys(lua_State* L, int table_idx, std::string_view fn,
                  std::span<const std::string> allowed) {
  table_idx = lua_absindex(L, table_idx);
  lua_pushnil(L);
  while (lua_next(L, table_idx) != 0) {
    lua_pop(L, 1);  // value
    if (lua_type(L, -1) != LUA_TSTRING) {
      Status s = eng::invalid_argument("{}: keys must be strings, got {} key", fn, got(L, -1));
      lua_pop(L, 1);
      return s;
    }
    std::string key = lua_tostring(L, -1);
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      lua_pop(L, 1);
      return eng::invalid_argument("{}: unknown key '{}'{}", fn, key, did_you_mean_hint(key, allowed));
    }
  }
  return eng::ok_status();
}

void set_doc(lua_State* L, int value_idx, std::string_view qualified_name, std::string_view text) {
  value_idx = lua_absindex(L, value_idx);
  push_registry_table(L, kDocTable);
  lua_pushlstring(L, text.data(), text.size());
  lua_setfield(L, -2, std::string(qualified_name).c_str());
  lua_pop(L, 1);
  push_registry_table(L, kDocNameTable);
  lua_pushvalue(L, value_idx);
  lua_pushlstring(L, qualified_name.data(), qualified_name.size());
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void add_functions(lua_State* L, int table_idx, std::string_view prefix,
                   std::span<const Function> fns) {
  table_idx = lua_absindex(L, table_idx);
  for (const Function& f : fns) {
    lua_pushcfunction(L, f.fn);
    set_doc(L, -1, fmt::format("{}.{}", prefix, f.name), fmt::format("{}\n  {}", f.signature, f.doc));
    lua_setfield(L, table_idx, f.name);
  }
}

namespace {
// __index for types with properties: upvalue 1 the methods table, upvalue 2 the getter.
int index_with_properties(lua_State* L) {
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) == LUA_TFUNCTION) return 1;
  lua_pop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(2));
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_call(L, 2, 1);  // the getter is a lua_entry<>: it raises only after unwinding
  return 1;
}
}  // namespace

void define_type(lua_State* L, const TypeSpec& spec) {
  luaL_newmetatable(L, spec.name);  // sets __name
  int mt = lua_gettop(L);
  std::string doc = fmt::format("{}\n  {}", spec.name, spec.doc);
  if (!spec.methods.empty()) doc += "\nmethods:";
  lua_createtable(L, 0, static_cast<int>(spec.methods.size()));
  for (const Method& m : spec.methods) {
    lua_pushcfunction(L, m.fn);
    set_doc(L, -1, fmt::format("{}:{}", spec.name, m.name), fmt::format("{}\n  {}", m.signature, m.doc));
    lua_setfield(L, -2, m.name);
    doc += fmt::format("\n  {:<36} {}", m.signature, m.doc);
  }
  if (spec.property == nullptr) {
    lua_setfield(L, mt, "__index");
  } else {
    // Properties complete like fields: listed in the methods table with the value false.
    for (const char* name : spec.properties) {
      lua_getfield(L, -1, name);
      ENG_CHECK(lua_isnil(L, -1), "define_type {}: property '{}' shadows a method", spec.name, name);
      lua_pop(L, 1);
      lua_pushboolean(L, 0);
      lua_setfield(L, -2, name);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, mt, "__methods");  // tab completion follows this when __index is a function
    lua_pushcfunction(L, spec.property);
    lua_pushcclosure(L, index_with_properties, 2);
    lua_setfield(L, mt, "__index");
  }
  if (spec.tostring) lua_pushcfunction(L, spec.tostring), lua_setfield(L, mt, "__tostring");
  if (spec.eq) lua_pushcfunction(L, spec.eq), lua_setfield(L, mt, "__eq");
  if (spec.gc) lua_pushcfunction(L, spec.gc), lua_setfield(L, mt, "__gc");
  lua_pushstring(L, spec.name);  // getmetatable(v) is the name: the table (and __gc) stay hidden
  lua_setfield(L, mt, "__metatable");
  set_doc(L, mt, spec.name, doc);
  lua_pop(L, 1);
}

std::string find_doc(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  int top = lua_gettop(L);
  std::string out;
  push_registry_table(L, kDocNameTable);
  lua_pushvalue(L, idx);
  if (lua_rawget(L, -2) != LUA_TSTRING) {  // not a function: try the value's metatable
    lua_pop(L, 1);
    if (lua_getmetatable(L, idx)) lua_rawget(L, -2);
    else lua_pushnil(L);
  }
  if (lua_type(L, -1) == LUA_TSTRING) {
    std::string name = lua_tostring(L, -1);
    push_registry_table(L, kDocTable);
    if (lua_getfield(L, -1, name.c_str()) == LUA_TSTRING) out = lua_tostring(L, -1);
  }
  lua_settop(L, top);
  return out;
}

}  // namespace shell
