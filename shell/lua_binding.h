// shell/lua_binding.h: the framework every Lua binding uses: one error wrapper, argument helpers, userdata, docstrings.
//
// A binding is a C++ function that returns Result<int> (the number of values it pushed) and
// never raises a Lua error itself. lua_entry<fn> is the one place that turns an error Status
// into a Lua error, after fn's C++ frames (strings, vectors, ...) are destroyed: Lua is C and
// raises with longjmp, which would skip their destructors.
//
//   Result<int> mesh_devices(lua_State* L) {
//     ENG_ASSIGN_OR_RETURN(eng::Mesh* m, arg_udata<eng::Mesh>(L, 1, "Mesh:devices"));
//     lua_pushinteger(L, m->num_devices());
//     return 1;
//   }
//   constexpr Method kMeshMethods[] = {
//       {"devices", lua_entry<mesh_devices>, "m:devices() -> integer", "Number of devices."}};
//
// Inside a binding use only non-raising Lua calls: lua_type/lua_to*/lua_raw*/lua_push*/
// lua_createtable (these raise only on out-of-memory). Never luaL_check*, luaL_error,
// lua_error, lua_gettable/lua_getfield on user values (metamethods may raise), or lua_call
// (use lua_pcall). Register functions and types in the module's open function
// (shell/bindings.h), giving every one a docstring; `?name` in the REPL shows it.
#pragma once

#include <lua.hpp>

#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/base/status.h"

namespace shell {

using eng::Result;
using eng::Status;

// Pushes the message of a non-ok Status (no traceback; the caller's handler adds one).
void push_status(lua_State* L, const Status& s);

// Calls fn and turns any C++ exception it lets out (std::bad_alloc included) into an error
// Status naming the running Lua function: the one exception boundary between C++ and Lua.
Result<int> call_guarded(lua_State* L, Result<int> (*fn)(lua_State*)) noexcept;

// The same boundary for a protected main (the REPL's and the notebook runner's, run inside
// lua_pcall): a C++ exception that escapes body is printed to stderr and the main fails (0).
int call_guarded_main(lua_State* L, int (*body)(lua_State*)) noexcept;

// The single Lua error wrapper: calls Fn, raises its Status as a Lua error after unwinding.
// No C++ exception crosses it (Lua is C: an exception unwinding through its frames aborts).
template <Result<int> (*Fn)(lua_State*)>
int lua_entry(lua_State* L) {
  {
    Result<int> r = call_guarded(L, Fn);
    if (r.ok()) return r.value();
    push_status(L, r.status());
  }  // r and everything Fn built are destroyed here
  return lua_error(L);
}

using eng::with_context;  // engine/base/status.h: "fn: <message>"

// ---- Argument helpers: messages read "sl.mesh: argument 'data' expected integer, got string".
// `name` labels the argument: a key ("data") or empty for the position ("#2").
Status arg_error(lua_State* L, int idx, std::string_view fn, std::string_view name,
                 std::string_view expected);
Result<int64_t> arg_int(lua_State* L, int idx, std::string_view fn, std::string_view name = {});
Result<std::optional<int64_t>> opt_int(lua_State* L, int idx, std::string_view fn,
                                       std::string_view name = {});
Result<double> arg_number(lua_State* L, int idx, std::string_view fn, std::string_view name = {});
Result<std::optional<double>> opt_number(lua_State* L, int idx, std::string_view fn,
                                         std::string_view name = {});
Result<bool> arg_bool(lua_State* L, int idx, std::string_view fn, std::string_view name = {});
Result<std::string> arg_string(lua_State* L, int idx, std::string_view fn,
                               std::string_view name = {});
Result<std::optional<std::string>> opt_string(lua_State* L, int idx, std::string_view fn,
                                              std::string_view name = {});
Status arg_table(lua_State* L, int idx, std::string_view fn, std::string_view name = {});
// A Lua array of strings: {"data", "tensor"}.
Result<std::vector<std::string>> arg_string_list(lua_State* L, int idx, std::string_view fn,
                                                 std::string_view name = {});

// Pushes a Lua array of the strings: {"data", "fsdp"}.
void push_strings(lua_State* L, const std::vector<std::string>& xs);

// _G[name] = the value at idx, with raw access (no __newindex; never raises but on out-of-memory).
// Used for `_`, `_LAST` and the like by the REPL and notebooks.
void set_global_raw(lua_State* L, const char* name, int idx);

// ---- Option tables: f{data=2, mode="auto"}. Fields are read raw (no metamethods).
// Pushes t[key] (raw) and returns its Lua type; the caller pops it.
int push_field(lua_State* L, int table_idx, const char* key);
Result<std::optional<int64_t>> field_int(lua_State* L, int table_idx, const char* key,
                                         std::string_view fn);
Result<std::optional<double>> field_number(lua_State* L, int table_idx, const char* key,
                                           std::string_view fn);
Result<std::optional<std::string>> field_string(lua_State* L, int table_idx, const char* key,
                                                std::string_view fn);
Result<std::optional<bool>> field_bool(lua_State* L, int table_idx, const char* key,
                                       std::string_view fn);
// Every key of the table must be a string in `allowed`; otherwise
// "sl.mesh: unknown key 'dta' (did you mean 'data'?)".
Status check_keys(lua_State* L, int table_idx, std::string_view fn,
                  std::span<const std::string> allowed);
// The closest candidate within a small edit distance (at most a quarter of the word's length,
// and at least 1; a candidate containing a word of 4+ letters counts as distance 1), or "".
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates);
// The one wording of a suggestion: " (did you mean 'data'?)", or "" when nothing is close.
std::string did_you_mean_hint(std::string_view word, std::span<const std::string> candidates);

// ---- Userdata: a C++ value type T lives inside a Lua full userdata with metatable
// LuaType<T>::kName. Specialise LuaType for each bound type:
//   template <> struct LuaType<eng::Mesh> { static constexpr const char* kName = "Mesh"; };
// The userdata is checked by its bytes, not only by its metatable: it starts with a header
// naming its type (debug.setmetatable can give any userdata a Mesh's metatable) and saying
// whether __gc already ran (Lua code can call __gc itself). A finalised userdata is a clear
// error for every method; a second __gc raises. Metatables are protected (__metatable), so
// getmetatable(m) gives the type's name, not the table with __gc in it.
template <typename T>
struct LuaType;

struct UdataHeader {
  const void* type;  // &LuaType<T>::kName: one address per bound type
  bool alive;        // false once __gc has destroyed the value
};
template <typename T>
struct UdataBox {
  UdataHeader header;
  T value;
};
template <typename T>
const void* udata_tag() {
  return &LuaType<T>::kName;
}

// The header of the userdata at idx if it is a bound userdata of type T (alive or not).
template <typename T>
UdataBox<T>* to_udata_box(lua_State* L, int idx) {
  if (lua_type(L, idx) != LUA_TUSERDATA || lua_rawlen(L, idx) != sizeof(UdataBox<T>)) return nullptr;
  auto* box = static_cast<UdataBox<T>*>(lua_touserdata(L, idx));
  return box->header.type == udata_tag<T>() ? box : nullptr;
}

// Pushes a new userdata holding value (with `user_values` Lua values attached to it).
template <typename T>
T* push_udata(lua_State* L, T value, int user_values = 0) {
  void* mem = lua_newuserdatauv(L, sizeof(UdataBox<T>), user_values);
  auto* box = new (mem) UdataBox<T>{UdataHeader{udata_tag<T>(), true}, std::move(value)};
  luaL_setmetatable(L, LuaType<T>::kName);
  return &box->value;
}
template <typename T>
T* to_udata(lua_State* L, int idx) {  // nullptr if idx is not a live T
  UdataBox<T>* box = to_udata_box<T>(L, idx);
  return box && box->header.alive ? &box->value : nullptr;
}
// "a real Mesh (this userdata was given a Mesh's metatable)": what a forged userdata lacks.
std::string fmt_forged(const char* type);
// "Mesh:devices: argument #1 is a Mesh that was already finalised (its __gc ran)".
Status dead_udata_error(std::string_view fn, std::string_view name, int idx, const char* type);
template <typename T>
Result<T*> arg_udata(lua_State* L, int idx, std::string_view fn, std::string_view name = {}) {
  if (T* p = to_udata<T>(L, idx)) return p;
  if (to_udata_box<T>(L, idx)) return dead_udata_error(fn, name, idx, LuaType<T>::kName);
  if (luaL_testudata(L, idx, LuaType<T>::kName))  // our metatable on someone else's userdata
    return arg_error(L, idx, fn, name, fmt_forged(LuaType<T>::kName));
  return arg_error(L, idx, fn, name, LuaType<T>::kName);
}
int udata_gc_again(lua_State* L, const char* type);  // raises: __gc called twice
template <typename T>
int udata_gc(lua_State* L) {
  UdataBox<T>* box = to_udata_box<T>(L, 1);
  if (box == nullptr) return 0;  // not ours: nothing to destroy
  if (!box->header.alive) return udata_gc_again(L, LuaType<T>::kName);
  box->header.alive = false;  // first: methods called from a destructor see a dead value
  box->value.~T();
  return 0;
}

// ---- Registration (called from a module's open function, inside the protected main).
struct Function {
  const char* name;       // key in the target table: "mesh"
  lua_CFunction fn;       // usually lua_entry<...>
  const char* signature;  // "sl.mesh{data=2, fsdp=-1, ...} -> Mesh"
  const char* doc;        // what it does; may be several lines
};
using Method = Function;  // signature "m:devices() -> integer"

struct TypeSpec {
  const char* name;                // metatable name and __name: "Mesh"
  const char* doc;                 // shown by ?Mesh and ?<a Mesh value>
  lua_CFunction tostring;          // __tostring (JAX's printed form), or nullptr
  lua_CFunction eq;                // __eq, or nullptr
  lua_CFunction gc;                // __gc: udata_gc<T>
  std::span<const Method> methods; // reachable through __index, so they tab-complete
  // Optional read-only fields (c.memory): when set, __index looks up methods first, then
  // calls property(L) with (self, key) on the stack; it pushes the value (or nil).
  // `properties` names them for tab completion.
  lua_CFunction property = nullptr;
  std::span<const char* const> properties = {};
};

// table[name] = fn for each function, with docs under "<prefix>.<name>" (prefix "sl").
void add_functions(lua_State* L, int table_idx, std::string_view prefix,
                   std::span<const Function> fns);
// Creates the metatable for a type, its methods table (__index) and their docs "Type:method".
void define_type(lua_State* L, const TypeSpec& spec);
// Registers a docstring for the value at value_idx (a function or a type's metatable) under
// a qualified name; `sl.doc[name]` holds the text.
void set_doc(lua_State* L, int value_idx, std::string_view qualified_name, std::string_view text);
// The help text for the value at idx: its signature and doc, or for a userdata its type's doc
// and methods. Empty if nothing is registered. Does not raise.
std::string find_doc(lua_State* L, int idx);

}  // namespace shell
