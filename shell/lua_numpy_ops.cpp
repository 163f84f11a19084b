// shell/lua_numpy_ops.cpp: the second half of sl.numpy (engine/frontend/numpy_ops.h):
// comparisons and where, maximum/minimum, max/min/argmax/argmin, transpose and x.T, indexing
// (x[{...}]), einsum, broadcast_to, and sl.nn.softmax/log_softmax. Each goes through `apply`
// (lua_array.h): eager, compiled once per signature, or traced inside sl.jit.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/frontend/numpy_ops.h"
#include "shell/lua_array.h"
#include "shell/lua_numpy.h"
#include "shell/lua_types.h"

namespace shell {
namespace {

namespace fe = eng::frontend;
namespace np = eng::frontend::np;
using Values = std::vector<eng::ValueId>;
using Ins = std::span<const eng::ValueId>;
using Dir = eng::CompareDirection;

Operand of(ArrayBox* a) {
  Operand o;
  o.array = a;
  return o;
}

std::string spec_key(const std::optional<eng::PartitionSpec>& s) {
  return s ? "out=" + s->to_string() : "";
}

// Integers from a table at idx, or the integer arguments from idx on.
Result<std::vector<int>> read_ints(lua_State* L, int idx, std::string_view fn,
                                   std::string_view name) {
  std::vector<int> v;
  auto add = [&](int at, std::string_view what) -> Status {
    int ok = 0;
    const lua_Integer i = lua_tointegerx(L, at, &ok);
    if (!ok || lua_type(L, at) != LUA_TNUMBER)
      return eng::invalid_argument("{}: {} is not an integer", fn, what);
    v.push_back(static_cast<int>(std::clamp<lua_Integer>(i, -1000, 1000)));
    return eng::ok_status();
  };
  if (lua_type(L, idx) == LUA_TTABLE) {
    const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, idx));
    for (lua_Integer i = 1; i <= n && i <= 64; ++i) {
      lua_rawgeti(L, idx, i);
      Status s = add(lua_gettop(L), fmt::format("{}[{}]", name, i));
      lua_pop(L, 1);
      ENG_RETURN_IF_ERROR(s);
    }
    return v;
  }
  for (int i = idx; i <= lua_gettop(L) && i < idx + 64; ++i)
    ENG_RETURN_IF_ERROR(add(i, name));
  return v;
}

Result<int> comparison(lua_State* L, std::string_view fn, Dir d) {
  return binary(L, fn, [d](fe::Trace& tr, eng::ValueId a, eng::ValueId b) {
    return np::compare(tr, a, b, d);
  });
}
Result<int> equal(lua_State* L) { return comparison(L, "equal", Dir::kEq); }
Result<int> not_equal(lua_State* L) { return comparison(L, "not_equal", Dir::kNe); }
Result<int> less(lua_State* L) { return comparison(L, "less", Dir::kLt); }
Result<int> less_equal(lua_State* L) { return comparison(L, "less_equal", Dir::kLe); }
Result<int> greater(lua_State* L) { return comparison(L, "greater", Dir::kGt); }
Result<int> greater_equal(lua_State* L) { return comparison(L, "greater_equal", Dir::kGe); }

Result<int> maximum(lua_State* L) { return binary(L, "maximum", np::maximum); }
Result<int> minimum(lua_State* L) { return binary(L, "minimum", np::minimum); }

// np.where(condition, x, y)
Result<int> where(lua_State* L) {
  constexpr std::string_view fn = "where";
  std::vector<Operand> ops(3);
  const char* names[] = {"condition", "x", "y"};
  for (int i = 0; i < 3; ++i) {
    ENG_ASSIGN_OR_RETURN(ops[i], arg_operand(L, i + 1, fn, names[i]));
  }
  if (!ops[0].array && !ops[1].array && !ops[2].array)
    return arg_error(L, 1, fn, "condition", "Array (one operand at least)");
  return apply(L, fn, "", ops,
               [](fe::Trace& tr, Ins x) { return one(np::where(tr, x[0], x[1], x[2])); });
}

Result<int> max(lua_State* L) { return reduction(L, "max", np::max); }
Result<int> min(lua_State* L) { return reduction(L, "min", np::min); }

Result<int> arg_reduction(lua_State* L, std::string_view fn,
                          Result<eng::ValueId> (*f)(fe::Trace&, eng::ValueId, std::optional<int>)) {
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(auto ak, read_axis(L, 2, fn));
  // Named copies, not a structured binding: lambdas capture them (clang 14 cannot capture
  // a binding, a C++20 feature it lacks).
  const std::optional<int> axis = ak.first;
  const bool keepdims = ak.second;
  return apply(L, fn, fmt::format("axis={} keepdims={}", axis ? *axis : 9999, keepdims), {x},
               [f, axis, keepdims](fe::Trace& tr, Ins in) -> Result<Values> {
                 const eng::Shape s = tr.info(in[0]).shape;
                 ENG_ASSIGN_OR_RETURN(eng::ValueId i, f(tr, in[0], axis));
                 if (!keepdims) return Values{i};
                 std::vector<int64_t> d(s.dims().begin(), s.dims().end());
                 if (axis)
                   d[*axis < 0 ? *axis + s.rank() : *axis] = 1;
                 else
                   d.assign(s.rank(), 1);
                 return one(np::reshape(tr, i, d));
               });
}
Result<int> argmax(lua_State* L) { return arg_reduction(L, "argmax", np::argmax); }
Result<int> argmin(lua_State* L) { return arg_reduction(L, "argmin", np::argmin); }

// np.transpose(a [, axes]) / x:transpose([axes | i, j, ...])
Result<int> transpose(lua_State* L) {
  constexpr std::string_view fn = "transpose";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "a"));
  std::vector<int> axes;
  if (!lua_isnoneornil(L, 2)) {
    ENG_ASSIGN_OR_RETURN(axes, read_ints(L, 2, fn, "axes"));
  }
  return apply(L, fn, fmt::format("{}", fmt::join(axes, ",")), {x},
               [axes](fe::Trace& tr, Ins in) { return one(np::transpose(tr, in[0], axes)); });
}

// np.einsum(subscripts, a [, b] [, {out_sharding = sl.P(...)}])
Result<int> einsum(lua_State* L) {
  constexpr std::string_view fn = "einsum";
  ENG_ASSIGN_OR_RETURN(std::string subscripts, arg_string(L, 1, fn, "subscripts"));
  std::vector<Operand> ops;
  int i = 2;
  for (; i <= lua_gettop(L) && to_udata<ArrayBox>(L, i); ++i)
    ops.push_back(of(to_udata<ArrayBox>(L, i)));
  if (ops.empty()) return arg_error(L, 2, fn, "operands", "Array");
  ENG_ASSIGN_OR_RETURN(auto out, read_out_sharding(L, i, fn));
  if (i < lua_gettop(L))
    return eng::invalid_argument("einsum: argument {} after the options table", i + 1);
  return apply(L, fn, subscripts + spec_key(out), ops,
               [subscripts, out](fe::Trace& tr, Ins in) {
                 return one(np::einsum(tr, subscripts, Values(in.begin(), in.end()), out));
               });
}

// np.broadcast_to(x, shape [, {out_sharding}])
Result<int> broadcast_to(lua_State* L) {
  constexpr std::string_view fn = "broadcast_to";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "array"));
  ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "shape"));
  ENG_ASSIGN_OR_RETURN(std::vector<int> d, read_ints(L, 2, fn, "shape"));
  ENG_ASSIGN_OR_RETURN(auto out, read_out_sharding(L, 3, fn));
  std::vector<int64_t> dims(d.begin(), d.end());
  for (int64_t v : dims)
    if (v < 0) return eng::invalid_argument("broadcast_to: negative dimension {} in the shape", v);
  return apply(L, fn, fmt::format("{}{}", fmt::join(dims, ","), spec_key(out)), {x},
               [dims, out](fe::Trace& tr, Ins in) -> Result<Values> {
                 ENG_ASSIGN_OR_RETURN(eng::ValueId y,
                                      np::broadcast_to(tr, in[0], eng::Shape(dims)));
                 if (!out) return Values{y};
                 return one(np::sharding_constraint(tr, y, *out, false));
               });
}

// sl.nn.softmax(x [, axis = -1 | {axis =}])
Result<int> softmax_like(lua_State* L, std::string_view fn,
                         Result<eng::ValueId> (*f)(fe::Trace&, eng::ValueId, int)) {
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "x"));
  ENG_ASSIGN_OR_RETURN(auto ak, read_axis(L, 2, fn));
  const int axis = ak.first.value_or(-1);
  return apply(L, fn, fmt::format("axis={}", axis), {x},
               [f, axis](fe::Trace& tr, Ins in) { return one(f(tr, in[0], axis)); });
}
Result<int> softmax(lua_State* L) { return softmax_like(L, "softmax", np::softmax); }
Result<int> log_softmax(lua_State* L) { return softmax_like(L, "log_softmax", np::log_softmax); }

// One index item at the top of the stack (see array_getitem).
Result<np::IndexItem> read_item(lua_State* L, lua_Integer k) {
  np::IndexItem it;
  const int top = lua_gettop(L);
  switch (lua_type(L, top)) {
    case LUA_TNUMBER: {
      int ok = 0;
      it.kind = np::IndexItem::kInteger;
      it.index = lua_tointegerx(L, top, &ok);
      if (ok) return it;
      break;
    }
    case LUA_TSTRING: {
      const std::string s = lua_tostring(L, top);
      if (s == "...") it.kind = np::IndexItem::kEllipsis;
      if (s == "newaxis") it.kind = np::IndexItem::kNewAxis;
      if (s == "..." || s == "newaxis") return it;
      break;
    }
    case LUA_TTABLE: {  // {start, stop, step}, each nil or an integer
      std::optional<int64_t>* parts[] = {&it.start, &it.stop, &it.step};
      bool ok = true;
      for (int p = 0; p < 3; ++p) {
        lua_rawgeti(L, top, p + 1);
        int isint = 0;
        const lua_Integer v = lua_tointegerx(L, -1, &isint);
        if (isint && lua_type(L, -1) == LUA_TNUMBER) *parts[p] = v;
        ok = ok && (isint || lua_isnil(L, -1));
        lua_pop(L, 1);
      }
      if (ok) return it;
      break;
    }
    default: break;
  }
  return eng::invalid_argument(
      "index: item {} is {}: use an integer, a slice {{start, stop [, step]}} (each may be nil; "
      "{{}} is ':'), \"...\" or \"newaxis\"",
      k, luaL_typename(L, top));
}

}  // namespace

// x[i] or x[{i, {start, stop, step}, "...", "newaxis"}]: numpy's basic indexing, 0-based.
Result<int> array_getitem(lua_State* L) {
  constexpr std::string_view fn = "index";
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, fn, "x"));
  std::vector<np::IndexItem> items;
  if (lua_type(L, 2) == LUA_TTABLE) {
    const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, 2));
    for (lua_Integer k = 1; k <= n && k <= 64; ++k) {
      lua_rawgeti(L, 2, k);
      Result<np::IndexItem> it = read_item(L, k);
      lua_pop(L, 1);
      if (!it.ok()) return it.status();
      items.push_back(*it);
    }
  } else {
    lua_pushvalue(L, 2);
    Result<np::IndexItem> it = read_item(L, 1);
    lua_pop(L, 1);
    if (!it.ok()) return it.status();
    items.push_back(*it);
  }
  std::string key;
  for (const np::IndexItem& it : items)
    key += fmt::format("{}:{}:{}:{}:{};", static_cast<int>(it.kind), it.index,
                       it.start.value_or(-(1 << 30)), it.stop.value_or(-(1 << 30)),
                       it.step.value_or(-(1 << 30)));
  return apply(L, fn, key, {of(x)},
               [items](fe::Trace& tr, Ins in) { return one(np::index(tr, in[0], items)); });
}

Result<int> array_transposed(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, "Array.T", "x"));
  return apply(L, "transpose", "", {of(x)},
               [](fe::Trace& tr, Ins in) { return one(np::transpose(tr, in[0], {})); });
}

namespace {

constexpr Function kFunctions[] = {
    {"equal", lua_entry<equal>, "np.equal(x1, x2) -> Array",
     "x1 == x2 elementwise, broadcast: a float32 mask (1 or 0; JAX returns bool, the engine has\n"
     "  no bool dtype). Lua's == on Arrays cannot return an Array: use this."},
    {"not_equal", lua_entry<not_equal>, "np.not_equal(x1, x2) -> Array", "x1 != x2 (a mask)."},
    {"less", lua_entry<less>, "np.less(x1, x2) -> Array", "x1 < x2 (a mask)."},
    {"less_equal", lua_entry<less_equal>, "np.less_equal(x1, x2) -> Array", "x1 <= x2 (a mask)."},
    {"greater", lua_entry<greater>, "np.greater(x1, x2) -> Array", "x1 > x2 (a mask)."},
    {"greater_equal", lua_entry<greater_equal>, "np.greater_equal(x1, x2) -> Array",
     "x1 >= x2 (a mask)."},
    {"where", lua_entry<where>, "np.where(condition, x, y) -> Array",
     "x where condition is nonzero, else y; all three broadcast (the engine's select op)."},
    {"maximum", lua_entry<maximum>, "np.maximum(x1, x2) -> Array",
     "Elementwise max, broadcast; NaN propagates."},
    {"minimum", lua_entry<minimum>, "np.minimum(x1, x2) -> Array", "Elementwise min, broadcast."},
    {"max", lua_entry<max>, "np.max(a [, axis | {axis=, keepdims=}]) -> Array",
     "Max over one axis (0-based) or all: log2(n) rounds of compare + select over halves."},
    {"min", lua_entry<min>, "np.min(a [, axis | {axis=, keepdims=}]) -> Array", "As np.max."},
    {"argmax", lua_entry<argmax>, "np.argmax(a [, axis | {axis=, keepdims=}]) -> Array",
     "int32 index of the first maximum (of the flattened array without axis)."},
    {"argmin", lua_entry<argmin>, "np.argmin(a [, axis | {axis=, keepdims=}]) -> Array",
     "int32 index of the first minimum."},
    {"transpose", lua_entry<transpose>, "np.transpose(a [, axes]) -> Array",
     "Axes permuted (default reversed; also x.T): the engine's transpose op."},
    {"einsum", lua_entry<einsum>,
     "np.einsum(subscripts, a [, b] [, {out_sharding = sl.P(...)}]) -> Array",
     "Einstein summation over one or two operands (\"ij,jk->ik\", \"bij,bjk->bik\", \"ij->ji\"):\n"
     "  transposes, reshapes and the engine's matmul (one per batch element)."},
    {"broadcast_to", lua_entry<broadcast_to>,
     "np.broadcast_to(array, shape [, {out_sharding}]) -> Array", "numpy broadcasting to shape."},
};

constexpr Function kNnFunctions[] = {
    {"softmax", lua_entry<softmax>, "sl.nn.softmax(x [, axis = -1]) -> Array",
     "exp(x - max) / sum(exp(x - max)) over axis (jax.nn.softmax)."},
    {"log_softmax", lua_entry<log_softmax>, "sl.nn.log_softmax(x [, axis = -1]) -> Array",
     "(x - max) - log(sum(exp(x - max))) over axis (jax.nn.log_softmax)."},
};

constexpr Method kMethods[] = {
    {"max", lua_entry<max>, "x:max([axis]) -> Array", "np.max(x, axis)."},
    {"min", lua_entry<min>, "x:min([axis]) -> Array", "np.min(x, axis)."},
    {"argmax", lua_entry<argmax>, "x:argmax([axis]) -> Array", "np.argmax(x, axis)."},
    {"argmin", lua_entry<argmin>, "x:argmin([axis]) -> Array", "np.argmin(x, axis)."},
    {"transpose", lua_entry<transpose>, "x:transpose([axes]) -> Array", "np.transpose(x, axes)."},
};

}  // namespace

void open_lua_numpy_ops(lua_State* L, int np_table, int mt) {
  np_table = lua_absindex(L, np_table);
  add_functions(L, np_table, "sl.numpy", kFunctions);
  lua_pushstring(L, "newaxis");  // np.newaxis in an index: x[{np.newaxis, {}}]
  lua_setfield(L, np_table, "newaxis");
  add_array_methods(L, mt, kMethods);
}

void open_lua_nn_ops(lua_State* L, int nn_table) {
  add_functions(L, lua_absindex(L, nn_table), "sl.nn", kNnFunctions);
}

}  // namespace shell
