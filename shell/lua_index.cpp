// shell/lua_index.cpp: traced indices and the % operator: Array's __mod (np.remainder,
// np.mod), np.pad, sl.lax.dynamic_slice_in_dim / dynamic_update_slice_in_dim, x[i] for an int32
// scalar Array i, and x.at[i]:set(v) / :add(v) / :get() (engine/frontend/numpy_jax.h).
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "engine/frontend/numpy_jax.h"
#include "shell/lua_array.h"
#include "shell/lua_numpy.h"
#include "shell/lua_types.h"

namespace shell {
namespace {

namespace fe = eng::frontend;
namespace np = eng::frontend::np;
using Ins = std::span<const eng::ValueId>;

constexpr const char* kAtType = "sl.at";         // x.at: indexing it makes a reference
constexpr const char* kAtRefType = "sl.at_ref";  // x.at[i]: :set, :add, :get
// The keys x.at and x.at[i] keep x and i under: light userdata, so no index a user writes
// (x.at[1]) finds them instead of reaching __index.
char g_array_key, g_index_key;

void set_private(lua_State* L, char* key, int value_idx) {  // table at -1
  value_idx = lua_absindex(L, value_idx);
  lua_pushlightuserdata(L, key);
  lua_pushvalue(L, value_idx);
  lua_rawset(L, -3);
}
void get_private(lua_State* L, int table_idx, char* key) {
  table_idx = lua_absindex(L, table_idx);
  lua_pushlightuserdata(L, key);
  lua_rawget(L, table_idx);
}

Operand of(ArrayBox* a) {
  Operand o;
  o.array = a;
  return o;
}

Result<int> remainder(lua_State* L) { return binary(L, "remainder", np::remainder); }

// An index: an int32 scalar Array (traced or not), or a Lua integer (static: part of the cache
// key, an int32 constant inside the op).
struct Index {
  ArrayBox* array = nullptr;
  int64_t value = 0;
  std::string key() const { return array ? "i=array" : fmt::format("i={}", value); }
};

Result<Index> read_index(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  Index i;
  i.array = to_udata<ArrayBox>(L, idx);
  if (i.array) return i;
  int ok = 0;
  const lua_Integer v = lua_tointegerx(L, idx, &ok);
  if (!ok || lua_type(L, idx) != LUA_TNUMBER)
    return arg_error(L, idx, fn, name, "int32 scalar Array or integer");
  i.value = v;
  return i;
}

// The start inside the op: the operand at `at` (an Array index) or the integer as a constant.
eng::ValueId start_of(fe::Trace& tr, const Index& i, Ins in, size_t at) {
  return i.array ? in[at] : tr.scalar(static_cast<double>(i.value), eng::DType::kI32);
}

Result<int> read_axis_arg(lua_State* L, int idx, std::string_view fn) {
  if (lua_isnoneornil(L, idx)) return 0;
  ENG_ASSIGN_OR_RETURN(int64_t axis, arg_int(L, idx, fn, "axis"));
  return static_cast<int>(std::clamp<int64_t>(axis, -1000, 1000));
}

// sl.lax.dynamic_slice_in_dim(operand, start_index, slice_size [, axis = 0]).
Result<int> dynamic_slice_in_dim(lua_State* L) {
  constexpr std::string_view fn = "dynamic_slice_in_dim";
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, fn, "operand"));
  ENG_ASSIGN_OR_RETURN(Index s, read_index(L, 2, fn, "start_index"));
  ENG_ASSIGN_OR_RETURN(int64_t size, arg_int(L, 3, fn, "slice_size"));
  ENG_ASSIGN_OR_RETURN(int axis, read_axis_arg(L, 4, fn));
  std::vector<Operand> ops = {of(x)};
  if (s.array) ops.push_back(of(s.array));
  return apply(L, fn, fmt::format("{}:{}:{}", s.key(), size, axis), ops,
               [s, size, axis](fe::Trace& tr, Ins in) {
                 const eng::ValueId start = start_of(tr, s, in, 1);
                 return one(np::dynamic_slice_in_dim(tr, in[0], start, size, axis));
               });
}

// sl.lax.dynamic_update_slice_in_dim(operand, update, start_index [, axis = 0]).
Result<int> dynamic_update_slice_in_dim(lua_State* L) {
  constexpr std::string_view fn = "dynamic_update_slice_in_dim";
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, fn, "operand"));
  ENG_ASSIGN_OR_RETURN(ArrayBox * u, arg_array(L, 2, fn, "update"));
  ENG_ASSIGN_OR_RETURN(Index s, read_index(L, 3, fn, "start_index"));
  ENG_ASSIGN_OR_RETURN(int axis, read_axis_arg(L, 4, fn));
  std::vector<Operand> ops = {of(x), of(u)};
  if (s.array) ops.push_back(of(s.array));
  return apply(L, fn, fmt::format("{}:{}", s.key(), axis), ops, [s, axis](fe::Trace& tr, Ins in) {
    return one(np::dynamic_update_slice_in_dim(tr, in[0], in[1], start_of(tr, s, in, 2), axis));
  });
}

// np.pad(array, pad_width [, mode = "constant"]): pad_width an integer (every side), one
// {before, after} pair or {{before, after}} (every dim), or one pair per dim; zeros.
Result<int> pad(lua_State* L) {
  constexpr std::string_view fn = "pad";
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, fn, "array"));
  if (!lua_isnoneornil(L, 3) &&
      !(lua_type(L, 3) == LUA_TSTRING && std::string(lua_tostring(L, 3)) == "constant"))
    return eng::invalid_argument("pad: only mode \"constant\" (zeros) is supported");
  const int rank = x->shape.rank();
  auto integer = [&](int idx, std::string_view what) -> Result<int64_t> {
    int ok = 0;
    const lua_Integer v = lua_tointegerx(L, idx, &ok);
    if (!ok || lua_type(L, idx) != LUA_TNUMBER)
      return eng::invalid_argument("pad: {} is not an integer", what);
    return static_cast<int64_t>(v);
  };
  std::vector<std::pair<int64_t, int64_t>> widths;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    ENG_ASSIGN_OR_RETURN(int64_t w, integer(2, "pad_width"));
    widths.assign(rank, {w, w});
  } else if (lua_type(L, 2) == LUA_TTABLE) {
    lua_rawgeti(L, 2, 1);
    const bool one_pair = lua_type(L, -1) == LUA_TNUMBER;
    lua_pop(L, 1);
    const lua_Integer n = one_pair ? 1 : static_cast<lua_Integer>(lua_rawlen(L, 2));
    for (lua_Integer d = 1; d <= n && d <= 64; ++d) {
      if (!one_pair) lua_rawgeti(L, 2, d);
      else lua_pushvalue(L, 2);
      const int t = lua_gettop(L);
      const std::string what = fmt::format("pad_width[{}]", d);
      if (lua_type(L, t) != LUA_TTABLE || lua_rawlen(L, t) != 2) {
        lua_settop(L, t - 1);
        return eng::invalid_argument("pad: {} is not a pair {{before, after}}", what);
      }
      lua_rawgeti(L, t, 1);
      lua_rawgeti(L, t, 2);
      Result<int64_t> lo = integer(t + 1, what), hi = integer(t + 2, what);
      lua_settop(L, t - 1);
      if (!lo.ok()) return lo.status();
      if (!hi.ok()) return hi.status();
      widths.emplace_back(*lo, *hi);
    }
    if (widths.size() == 1) widths.assign(rank, widths[0]);  // numpy's ((before, after),)
  } else {
    return arg_error(L, 2, fn, "pad_width", "integer or {{before, after}, ...}");
  }
  std::string key;
  for (const auto& [lo, hi] : widths) key += fmt::format("{},{};", lo, hi);
  return apply(L, fn, key, {of(x)},
               [widths](fe::Trace& tr, Ins in) { return one(np::pad(tr, in[0], widths)); });
}

// x.at: a table holding x; x.at[i] a table holding x and i (JAX's _IndexUpdateHelper and
// _IndexUpdateRef). Neither raises: what is wrong with i is said by :set / :add / :get.
int at_index(lua_State* L) {
  get_private(L, 1, &g_array_key);
  lua_createtable(L, 0, 2);
  set_private(L, &g_array_key, -2);
  set_private(L, &g_index_key, 2);
  luaL_setmetatable(L, kAtRefType);
  return 1;
}

// x.at[i]:set(v) / :add(v) / :get(): x[i] replaced, incremented, or read. i an integer or an
// int32 scalar Array (traced or not): negative from the end; out of range the update is
// dropped and get clips the index, as JAX's defaults.
Result<int> at_op(lua_State* L, std::string_view fn, int mode) {  // 0 get, 1 set, 2 add
  if (lua_type(L, 1) != LUA_TTABLE)
    return arg_error(L, 1, fn, "self", "x.at[i] (call it as x.at[i]:" + std::string(fn) + "(...))");
  get_private(L, 1, &g_array_key);
  get_private(L, 1, &g_index_key);
  const int xi = lua_gettop(L) - 1, ki = lua_gettop(L);
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, xi, fn, "x"));
  if (lua_type(L, ki) == LUA_TTABLE || lua_type(L, ki) == LUA_TSTRING)
    return eng::invalid_argument(
        "{}: x.at[...] takes one integer or int32 scalar Array index (no slices or tuples)", fn);
  ENG_ASSIGN_OR_RETURN(Index i, read_index(L, ki, fn, "index"));
  if (x->shape.rank() == 0)
    return eng::invalid_argument("{}: a scalar array cannot be indexed", fn);
  if (!i.array) {
    const int64_t n = x->shape[0];
    if (mode != 0 && (i.value < -n || i.value >= n)) {
      lua_pushvalue(L, xi);  // JAX drops an out-of-range update
      return 1;
    }
    if (i.value < 0) i.value += n;
    i.value = std::clamp<int64_t>(i.value, 0, n - 1);  // get: clipped, as JAX's
  }
  std::vector<Operand> ops = {of(x)};
  if (mode != 0) {
    ENG_ASSIGN_OR_RETURN(Operand v, arg_operand(L, 2, fn, "values"));
    ops.push_back(v);
  }
  const size_t at = ops.size();
  if (i.array) ops.push_back(of(i.array));
  return apply(L, fn, i.key(), ops, [i, mode, at](fe::Trace& tr, Ins in) {
    const eng::ValueId s = start_of(tr, i, in, at);
    if (mode == 0) return one(np::dynamic_index(tr, in[0], s));
    return one(np::at_update(tr, in[0], s, in[1], mode == 2, /*drop_out_of_range=*/i.array != nullptr));
  });
}
Result<int> at_get(lua_State* L) { return at_op(L, "get", 0); }
Result<int> at_set(lua_State* L) { return at_op(L, "set", 1); }
Result<int> at_add(lua_State* L) { return at_op(L, "add", 2); }

constexpr Function kNumpy[] = {
    {"remainder", lua_entry<remainder>, "np.remainder(x1, x2) -> Array",
     "x1 mod x2 with the sign of x2 (Python's %; also x1 % x2 and np.mod): int32 (x % 0 = 0, as\n"
     "  JAX's) or float; broadcast."},
    {"mod", lua_entry<remainder>, "np.mod(x1, x2) -> Array", "np.remainder."},
    {"pad", lua_entry<pad>, "np.pad(array, pad_width [, \"constant\"]) -> Array",
     "Zeros around array: pad_width an integer, {before, after}, or one pair per dim\n"
     "  ({{0, 0}, {0, 2}})."},
};

constexpr Function kLax[] = {
    {"dynamic_slice_in_dim", lua_entry<dynamic_slice_in_dim>,
     "sl.lax.dynamic_slice_in_dim(operand, start_index, slice_size [, axis=0]) -> Array",
     "operand[start : start + slice_size] along axis; start an integer or an int32 scalar Array\n"
     "  (traced inside sl.jit / sl.shard_map): negative from the end, then clamped so the slice\n"
     "  fits, as JAX's."},
    {"dynamic_update_slice_in_dim", lua_entry<dynamic_update_slice_in_dim>,
     "sl.lax.dynamic_update_slice_in_dim(operand, update, start_index [, axis=0]) -> Array",
     "operand with update written at start along axis (start as dynamic_slice_in_dim's)."},
};

}  // namespace

Result<int> array_index_by_array(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, "index", "x"));
  ENG_ASSIGN_OR_RETURN(ArrayBox * i, arg_array(L, 2, "index", "index"));
  return apply(L, "index", "", {of(x), of(i)},
               [](fe::Trace& tr, Ins in) { return one(np::dynamic_index(tr, in[0], in[1])); });
}

int array_at(lua_State* L) {
  lua_createtable(L, 0, 1);
  set_private(L, &g_array_key, 1);
  luaL_setmetatable(L, kAtType);
  return 1;
}

void open_lua_index(lua_State* L, int np_table, int lax_table, int mt) {
  np_table = lua_absindex(L, np_table);
  lax_table = lua_absindex(L, lax_table);
  mt = lua_absindex(L, mt);
  add_functions(L, np_table, "sl.numpy", kNumpy);
  add_functions(L, lax_table, "sl.lax", kLax);
  lua_pushcfunction(L, lua_entry<remainder>);
  lua_setfield(L, mt, "__mod");
  luaL_newmetatable(L, kAtType);
  lua_pushcfunction(L, at_index);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_newmetatable(L, kAtRefType);
  constexpr std::pair<const char*, lua_CFunction> kMethods[] = {
      {"get", lua_entry<at_get>}, {"set", lua_entry<at_set>}, {"add", lua_entry<at_add>}};
  lua_createtable(L, 0, 3);
  for (const auto& [name, f] : kMethods) {
    lua_pushcfunction(L, f);
    lua_setfield(L, -2, name);
  }
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

}  // namespace shell
