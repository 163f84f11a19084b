// shell/lua_numpy_jax.cpp: the rest of JAX's jax.numpy and jax.nn names under sl.numpy and
// sl.nn (engine/frontend/numpy_jax.h; docs/frontend.md "JAX's numpy names"): array creation
// with dtype and out_sharding, elementwise math, reductions, shape moves, take, cumsum, and
// jax.nn's relu, softplus, one_hot and logsumexp. Keyword arguments are a trailing table
// (jnp.zeros((8, 4), dtype=jnp.float32) is np.zeros({8, 4}, {dtype = np.float32})).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "engine/frontend/creation.h"
#include "engine/frontend/numpy_jax.h"
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

Operand of(ArrayBox* a) {
  Operand o;
  o.array = a;
  return o;
}

int clamp_axis(int64_t a) { return static_cast<int>(std::clamp<int64_t>(a, -1000, 1000)); }

// Replaces the options table at idx by a shallow copy without `keys` (the ones this function
// reads itself), so that the shared readers (read_placement, read_axis) see only theirs; the
// caller's table is left as it was.
void drop_keys(lua_State* L, int idx, std::initializer_list<const char*> keys) {
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pushvalue(L, -2);  // key, value, key
    lua_insert(L, -2);     // key, key, value
    lua_rawset(L, -4);     // copy[key] = value; key stays for lua_next
  }
  for (const char* k : keys) {
    lua_pushnil(L);
    lua_setfield(L, -2, k);
  }
  lua_replace(L, idx);
}

// ---- creation ----------------------------------------------------------------------------

// np.linspace(start, stop [, num = 50 [, endpoint = true]] [, {num, endpoint, dtype,
// out_sharding}]): numpy's values, the last exactly stop when endpoint.
Result<int> linspace(lua_State* L) {
  constexpr std::string_view fn = "linspace";
  ENG_ASSIGN_OR_RETURN(double start, arg_number(L, 1, fn, "start"));
  ENG_ASSIGN_OR_RETURN(double stop, arg_number(L, 2, fn, "stop"));
  int64_t num = 50;
  bool endpoint = true;
  int opts = 3;
  if (lua_type(L, 3) == LUA_TNUMBER) {
    ENG_ASSIGN_OR_RETURN(num, arg_int(L, 3, fn, "num"));
    opts = 4;
    if (lua_type(L, 4) == LUA_TBOOLEAN) {
      endpoint = lua_toboolean(L, 4);
      opts = 5;
    }
  }
  if (lua_type(L, opts) == LUA_TTABLE) {  // num/endpoint keywords, then the placement keys
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> n, field_int(L, opts, "num", fn));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> e, field_bool(L, opts, "endpoint", fn));
    num = n.value_or(num);
    endpoint = e.value_or(endpoint);
    drop_keys(L, opts, {"num", "endpoint"});
  }
  if (num < 1 || num > fe::kMaxHostValues)
    return eng::invalid_argument("{}: num must be between 1 and {}, got {}", fn,
                                 fe::kMaxHostValues, num);
  ENG_ASSIGN_OR_RETURN(Placement p, read_placement(L, opts, fn));
  const std::vector<double> v = fe::linspace_values(start, stop, num, endpoint);
  return put_values(L, fn, v, eng::Shape{num}, p);
}

// np.eye(N [, M [, k]] [, {M, k, dtype, out_sharding}]): ones on the k-th diagonal.
Result<int> eye(lua_State* L) {
  constexpr std::string_view fn = "eye";
  ENG_ASSIGN_OR_RETURN(int64_t n, arg_int(L, 1, fn, "N"));
  int64_t m = n, k = 0;
  int opts = 2;
  if (lua_type(L, 2) == LUA_TNUMBER || (lua_isnil(L, 2) && lua_gettop(L) > 2)) {
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> mm, opt_int(L, 2, fn, "M"));
    m = mm.value_or(n);
    opts = 3;
    if (lua_type(L, 3) == LUA_TNUMBER) {
      ENG_ASSIGN_OR_RETURN(k, arg_int(L, 3, fn, "k"));
      opts = 4;
    }
  }
  if (lua_type(L, opts) == LUA_TTABLE) {
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> mm, field_int(L, opts, "M", fn));
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> kk, field_int(L, opts, "k", fn));
    m = mm.value_or(m);
    k = kk.value_or(k);
    drop_keys(L, opts, {"M", "k"});
  }
  ENG_ASSIGN_OR_RETURN(eng::Shape s, with_context(fn, eng::Shape::checked({n, m})));
  ENG_RETURN_IF_ERROR(fe::check_host_values(s, fn));
  ENG_ASSIGN_OR_RETURN(Placement p, read_placement(L, opts, fn));
  std::vector<double> v(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    if (i + k >= 0 && i + k < m) v[i * m + i + k] = 1.0;
  return put_values(L, fn, v, s, p);
}

// np.zeros_like / ones_like / full_like(a [, fill_value] [, dtype | {dtype, shape,
// out_sharding}]): a's shape, dtype and sharding unless given. A tracer's *_like is a constant
// of the trace, resharded to the tracer's sharding.
Result<int> filled_like(lua_State* L, std::string_view fn, std::optional<double> fill) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "a"));
  ENG_RETURN_IF_ERROR(check_live(*a, fn));
  int opts = 2;
  if (!fill) {
    ENG_ASSIGN_OR_RETURN(fill, arg_number(L, 2, fn, "fill_value"));
    opts = 3;
  }
  eng::Shape shape = a->shape;
  bool shape_given = false;
  if (lua_type(L, opts) == LUA_TTABLE) {
    push_field(L, opts, "shape");
    if (!lua_isnil(L, -1)) {
      ENG_ASSIGN_OR_RETURN(shape, read_dims(L, lua_gettop(L), fn));
      shape_given = true;
    }
    lua_pop(L, 1);
    drop_keys(L, opts, {"shape"});
  }
  ENG_ASSIGN_OR_RETURN(Placement p, read_placement(L, opts, fn));
  if (!p.dtype_given) p.dtype = a->dtype;
  bool spec_given = false;
  if (lua_type(L, opts) == LUA_TTABLE) {
    spec_given = push_field(L, opts, "out_sharding") != LUA_TNIL ||
                 push_field(L, opts, "sharding") != LUA_TNIL;
    lua_settop(L, opts);
  }
  ENG_RETURN_IF_ERROR(fe::check_host_values(shape, fn));
  const std::vector<double> host(static_cast<size_t>(shape.numel()), *fill);
  if (!a->is_tracer()) {
    if (!spec_given) p.sharding = shape_given ? eng::NamedSharding{a->data->array.sharding.mesh, {}}
                                              : a->data->array.sharding;
    return put_values(L, fn, host, shape, p);
  }
  const std::optional<eng::PartitionSpec> want =
      spec_given ? std::optional<eng::PartitionSpec>(p.sharding.spec) : std::nullopt;
  const eng::DType dtype = p.dtype;
  return apply(L, fn,
               fmt::format("{} {} {} {} {:a}", shape.to_string(), eng::dtype_name(dtype), shape_given,
                           want ? want->to_string() : "-", *fill),
               {of(a)}, [=](fe::Trace& tr, Ins in) -> Result<Values> {
                 ENG_ASSIGN_OR_RETURN(eng::ValueId c, tr.constant(host, shape, dtype));
                 eng::PartitionSpec spec;
                 if (want) {
                   spec = *want;
                 } else if (!shape_given) {
                   ENG_ASSIGN_OR_RETURN(spec, tr.sharding_of(in[0]));
                 }
                 if (spec == eng::PartitionSpec()) return Values{c};
                 return one(np::sharding_constraint(tr, c, spec, false));
               });
}
Result<int> zeros_like(lua_State* L) { return filled_like(L, "zeros_like", 0.0); }
Result<int> ones_like(lua_State* L) { return filled_like(L, "ones_like", 1.0); }
Result<int> full_like(lua_State* L) { return filled_like(L, "full_like", std::nullopt); }

// ---- elementwise ---------------------------------------------------------------------------

Result<int> unary_named(lua_State* L, const char* name) {
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, name, "x"));  // a number: an f32 scalar
  return apply(L, name, "", {x},
               [name](fe::Trace& tr, Ins in) { return one(np::unary(tr, name, in[0])); });
}
Result<int> sqrt(lua_State* L) { return unary_named(L, "sqrt"); }
Result<int> abs(lua_State* L) { return unary_named(L, "abs"); }
Result<int> sign(lua_State* L) { return unary_named(L, "sign"); }
Result<int> sin(lua_State* L) { return unary_named(L, "sin"); }
Result<int> cos(lua_State* L) { return unary_named(L, "cos"); }
Result<int> floor(lua_State* L) { return unary_named(L, "floor"); }
Result<int> log1p(lua_State* L) { return unary_named(L, "log1p"); }
Result<int> expm1(lua_State* L) { return unary_named(L, "expm1"); }

Result<int> one_array(lua_State* L, std::string_view fn,
                      Result<eng::ValueId> (*f)(fe::Trace&, eng::ValueId)) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, fn, "x"));
  return apply(L, fn, "", {of(x)}, [f](fe::Trace& tr, Ins in) { return one(f(tr, in[0])); });
}
Result<int> square(lua_State* L) { return one_array(L, "square", np::square); }
Result<int> relu(lua_State* L) { return one_array(L, "relu", np::relu); }
Result<int> softplus(lua_State* L) { return one_array(L, "softplus", np::softplus); }

// np.power(x1, x2): x2 a number is static (x^2 is x * x), an Array exp(x2 * log(x1)).
Result<int> power(lua_State* L) {
  constexpr std::string_view fn = "power";
  if (lua_type(L, 2) == LUA_TNUMBER) {
    ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, fn, "x1"));
    const double p = lua_tonumber(L, 2);
    return apply(L, fn, fmt::format("p={}", p), {of(x)},
                 [p](fe::Trace& tr, Ins in) { return one(np::power(tr, in[0], p)); });
  }
  return binary(L, fn, [](fe::Trace& tr, eng::ValueId a, eng::ValueId b) {
    return np::power(tr, a, b);
  });
}

Result<int> logaddexp(lua_State* L) { return binary(L, "logaddexp", np::logaddexp); }

// np.allclose(a, b [, rtol [, atol]] [, {rtol, atol, equal_nan}]): a Lua boolean for
// concrete arrays (Python's print shows True, Lua's true); inside sl.jit the traced mask.
Result<int> allclose(lua_State* L) {
  constexpr std::string_view fn = "allclose";
  ENG_ASSIGN_OR_RETURN(Operand a, arg_operand(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(Operand b, arg_operand(L, 2, fn, "b"));
  if (!a.array && !b.array) return arg_error(L, 1, fn, "a", "Array (one operand at least)");
  double rtol = 1e-5, atol = 1e-8;
  int opts = 3;
  if (lua_type(L, 3) == LUA_TNUMBER) {
    rtol = lua_tonumber(L, 3);
    opts = 4;
    if (lua_type(L, 4) == LUA_TNUMBER) {
      atol = lua_tonumber(L, 4);
      opts = 5;
    }
  }
  if (!lua_isnoneornil(L, opts)) {
    ENG_RETURN_IF_ERROR(arg_table(L, opts, fn, "options"));
    static const std::vector<std::string> kKeys = {"rtol", "atol", "equal_nan"};
    ENG_RETURN_IF_ERROR(check_keys(L, opts, fn, kKeys));
    ENG_ASSIGN_OR_RETURN(std::optional<double> r, field_number(L, opts, "rtol", fn));
    ENG_ASSIGN_OR_RETURN(std::optional<double> t, field_number(L, opts, "atol", fn));
    rtol = r.value_or(rtol);
    atol = t.value_or(atol);
    lua_getfield(L, opts, "equal_nan");
    const bool equal_nan = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (equal_nan) return eng::invalid_argument("{}: equal_nan=true is not offered (NaN is never close)", fn);
  }
  if (!(rtol >= 0) || !(atol >= 0))
    return eng::invalid_argument("{}: rtol and atol must be >= 0 (got rtol={:g}, atol={:g})", fn,
                                 rtol, atol);
  ENG_ASSIGN_OR_RETURN(int n, apply(L, fn, fmt::format("{:a} {:a}", rtol, atol), {a, b},
                                    [rtol, atol](fe::Trace& tr, Ins in) {
                                      return one(np::allclose(tr, in[0], in[1], rtol, atol));
                                    }));
  ArrayBox* r = to_udata<ArrayBox>(L, -1);
  if (n != 1 || r == nullptr || r->is_tracer()) return n;
  ENG_ASSIGN_OR_RETURN(std::vector<double> v, fe::fetch(*r->data));
  lua_pop(L, 1);
  lua_pushboolean(L, v.size() == 1 && v[0] != 0);
  return 1;
}

// np.clip(a [, min [, max]] [, {min, max}]): min/max numbers, Arrays or nil.
Result<int> clip(lua_State* L) {
  constexpr std::string_view fn = "clip";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "arr"));
  if (lua_type(L, 2) == LUA_TTABLE && to_udata<ArrayBox>(L, 2) == nullptr) {
    static const std::vector<std::string> kKeys = {"min", "max"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kKeys));
    push_field(L, 2, "min");
    push_field(L, 2, "max");
    lua_remove(L, 2);
  }
  std::vector<Operand> ops = {of(a)};
  bool has[2] = {false, false};
  for (int i = 0; i < 2; ++i) {
    if (lua_isnoneornil(L, 2 + i)) continue;
    ENG_ASSIGN_OR_RETURN(Operand o, arg_operand(L, 2 + i, fn, i == 0 ? "min" : "max"));
    ops.push_back(o);
    has[i] = true;
  }
  const bool lo = has[0], hi = has[1];
  return apply(L, fn, fmt::format("{}{}", lo, hi), ops, [lo, hi](fe::Trace& tr, Ins in) {
    std::optional<eng::ValueId> l, h;
    if (lo) l = in[1];
    if (hi) h = in[lo ? 2 : 1];
    return one(np::clip(tr, in[0], l, h));
  });
}

// ---- reductions ------------------------------------------------------------------------------

Result<int> prod(lua_State* L) { return reduction(L, "prod", np::prod); }
Result<int> any(lua_State* L) { return reduction(L, "any", np::any); }
Result<int> all(lua_State* L) { return reduction(L, "all", np::all); }
Result<int> logsumexp(lua_State* L) { return reduction(L, "logsumexp", np::logsumexp); }

// np.var / np.std(a [, axis | {axis, keepdims, ddof}])
Result<int> moment(lua_State* L, std::string_view fn, bool root) {
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "a"));
  double ddof = 0;
  if (lua_type(L, 2) == LUA_TTABLE) {
    ENG_ASSIGN_OR_RETURN(std::optional<double> d, field_number(L, 2, "ddof", fn));
    ddof = d.value_or(0);
    drop_keys(L, 2, {"ddof"});
  }
  ENG_ASSIGN_OR_RETURN(auto ak, read_axis(L, 2, fn));
  // Named copies, not a structured binding: lambdas capture them (clang 14 cannot capture
  // a binding, a C++20 feature it lacks).
  const std::optional<int> axis = ak.first;
  const bool keepdims = ak.second;
  return apply(L, fn, fmt::format("axis={} keepdims={} ddof={}", axis ? *axis : 9999, keepdims, ddof),
               {x}, [=](fe::Trace& tr, Ins in) {
                 return one(root ? np::std_(tr, in[0], axis, keepdims, ddof)
                                 : np::var(tr, in[0], axis, keepdims, ddof));
               });
}
Result<int> var(lua_State* L) { return moment(L, "var", false); }
Result<int> std_(lua_State* L) { return moment(L, "std", true); }

// An optional axis at idx: a number, {axis = n}, or nil.
Result<std::optional<int>> read_opt_axis(lua_State* L, int idx, std::string_view fn) {
  if (lua_type(L, idx) == LUA_TTABLE) {
    static const std::vector<std::string> kKeys = {"axis"};
    ENG_RETURN_IF_ERROR(check_keys(L, idx, fn, kKeys));
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> a, field_int(L, idx, "axis", fn));
    if (!a) return std::optional<int>();
    return std::optional<int>(clamp_axis(*a));
  }
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> a, opt_int(L, idx, fn, "axis"));
  if (!a) return std::optional<int>();
  return std::optional<int>(clamp_axis(*a));
}

Result<int> cumsum(lua_State* L) {
  constexpr std::string_view fn = "cumsum";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(std::optional<int> axis, read_opt_axis(L, 2, fn));
  return apply(L, fn, fmt::format("axis={}", axis ? *axis : 9999), {of(a)},
               [axis](fe::Trace& tr, Ins in) { return one(np::cumsum(tr, in[0], axis)); });
}

// ---- shape moves ---------------------------------------------------------------------------

// The Arrays of the list at idx.
Result<std::vector<Operand>> read_arrays(lua_State* L, int idx, std::string_view fn) {
  ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, "arrays"));
  std::vector<Operand> ops;
  for (lua_Integer i = 1; i <= static_cast<lua_Integer>(lua_rawlen(L, idx)); ++i) {
    lua_rawgeti(L, idx, i);
    ArrayBox* a = to_udata<ArrayBox>(L, -1);
    lua_pop(L, 1);
    if (!a) return eng::invalid_argument("{}: arrays[{}] is not an Array", fn, i);
    ops.push_back(of(a));
  }
  return ops;
}

Result<int> stack(lua_State* L) {
  constexpr std::string_view fn = "stack";
  ENG_ASSIGN_OR_RETURN(std::vector<Operand> ops, read_arrays(L, 1, fn));
  ENG_ASSIGN_OR_RETURN(std::optional<int> axis, read_opt_axis(L, 2, fn));
  const int ax = axis.value_or(0);
  return apply(L, fn, fmt::format("axis={}", ax), ops, [ax](fe::Trace& tr, Ins in) {
    return one(np::stack(tr, Values(in.begin(), in.end()), ax));
  });
}

// The n results on top of the stack as one Lua list (JAX returns a list).
int pack_results(lua_State* L, int n) {
  lua_createtable(L, n, 0);
  lua_insert(L, -n - 1);
  for (int i = n; i >= 1; --i) lua_rawseti(L, -i - 1, i);
  return 1;
}

// np.split(ary, sections | {indices...} [, axis = 0 | {axis}]) -> {Array, ...}
Result<int> split(lua_State* L) {
  constexpr std::string_view fn = "split";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "ary"));
  std::vector<int64_t> indices;
  int64_t sections = 0;
  if (lua_type(L, 2) == LUA_TTABLE) {
    ENG_ASSIGN_OR_RETURN(indices, read_shape_table(L, 2, fn));
  } else {
    ENG_ASSIGN_OR_RETURN(sections, arg_int(L, 2, fn, "indices_or_sections"));
  }
  ENG_ASSIGN_OR_RETURN(std::optional<int> axis, read_opt_axis(L, 3, fn));
  const int ax = axis.value_or(0);
  ENG_ASSIGN_OR_RETURN(
      int n, apply(L, fn, fmt::format("{}|{}|axis={}", sections, fmt::join(indices, ","), ax),
                   {of(a)}, [=](fe::Trace& tr, Ins in) {
                     return sections > 0 ? np::split(tr, in[0], sections, ax)
                                         : np::split_at(tr, in[0], indices, ax);
                   }));
  return pack_results(L, n);
}

Result<int> expand_dims(lua_State* L) {
  constexpr std::string_view fn = "expand_dims";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(int64_t axis, arg_int(L, 2, fn, "axis"));
  const int ax = clamp_axis(axis);
  return apply(L, fn, fmt::format("axis={}", ax), {of(a)},
               [ax](fe::Trace& tr, Ins in) { return one(np::expand_dims(tr, in[0], ax)); });
}

Result<int> squeeze(lua_State* L) {
  constexpr std::string_view fn = "squeeze";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(std::optional<int> axis, read_opt_axis(L, 2, fn));
  return apply(L, fn, fmt::format("axis={}", axis ? *axis : 9999), {of(a)},
               [axis](fe::Trace& tr, Ins in) { return one(np::squeeze(tr, in[0], axis)); });
}

Result<int> swapaxes(lua_State* L) {
  constexpr std::string_view fn = "swapaxes";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(int64_t a1, arg_int(L, 2, fn, "axis1"));
  ENG_ASSIGN_OR_RETURN(int64_t a2, arg_int(L, 3, fn, "axis2"));
  const int x = clamp_axis(a1), y = clamp_axis(a2);
  return apply(L, fn, fmt::format("{},{}", x, y), {of(a)},
               [x, y](fe::Trace& tr, Ins in) { return one(np::swapaxes(tr, in[0], x, y)); });
}

// An integer or a list of integers at idx.
Result<std::vector<int64_t>> read_int_or_list(lua_State* L, int idx, std::string_view fn,
                                              std::string_view name) {
  if (lua_type(L, idx) == LUA_TTABLE) return read_shape_table(L, idx, fn);
  ENG_ASSIGN_OR_RETURN(int64_t v, arg_int(L, idx, fn, name));
  return std::vector<int64_t>{v};
}

Result<int> moveaxis(lua_State* L) {
  constexpr std::string_view fn = "moveaxis";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(std::vector<int64_t> src, read_int_or_list(L, 2, fn, "source"));
  ENG_ASSIGN_OR_RETURN(std::vector<int64_t> dst, read_int_or_list(L, 3, fn, "destination"));
  std::vector<int> s, d;
  for (int64_t v : src) s.push_back(clamp_axis(v));
  for (int64_t v : dst) d.push_back(clamp_axis(v));
  return apply(L, fn, fmt::format("{}>{}", fmt::join(s, ","), fmt::join(d, ",")), {of(a)},
               [s, d](fe::Trace& tr, Ins in) { return one(np::moveaxis(tr, in[0], s, d)); });
}

Result<int> tile(lua_State* L) {
  constexpr std::string_view fn = "tile";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "A"));
  ENG_ASSIGN_OR_RETURN(std::vector<int64_t> reps, read_int_or_list(L, 2, fn, "reps"));
  return apply(L, fn, fmt::format("{}", fmt::join(reps, ",")), {of(a)},
               [reps](fe::Trace& tr, Ins in) { return one(np::tile(tr, in[0], reps)); });
}

// np.roll(a, shift [, axis | {axis}]): shift an integer; no axis: of the flattened a.
Result<int> roll(lua_State* L) {
  constexpr std::string_view fn = "roll";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(int64_t shift, arg_int(L, 2, fn, "shift"));
  ENG_ASSIGN_OR_RETURN(std::optional<int> axis, read_opt_axis(L, 3, fn));
  return apply(L, fn, fmt::format("{},{}", shift, axis ? *axis : 9999), {of(a)},
               [shift, axis](fe::Trace& tr, Ins in) { return one(np::roll(tr, in[0], shift, axis)); });
}

// np.take(a, indices [, axis | {axis}]): indices an int32 Array, an integer or a list of
// integers (placed replicated on a's mesh).
Result<int> take(lua_State* L) {
  constexpr std::string_view fn = "take";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "a"));
  ENG_RETURN_IF_ERROR(check_live(*a, fn));
  ENG_ASSIGN_OR_RETURN(std::optional<int> axis, read_opt_axis(L, 3, fn));
  ArrayBox* idx = to_udata<ArrayBox>(L, 2);
  if (!idx) {
    std::vector<int64_t> ids;
    const bool scalar = lua_type(L, 2) != LUA_TTABLE;
    ENG_ASSIGN_OR_RETURN(ids, read_int_or_list(L, 2, fn, "indices"));
    if (ids.empty()) return eng::invalid_argument("{}: empty indices are not supported", fn);
    const eng::Mesh mesh = a->is_tracer() ? a->trace->mesh() : a->data->array.sharding.mesh;
    const eng::Shape s = scalar ? eng::Shape{} : eng::Shape{static_cast<int64_t>(ids.size())};
    ENG_ASSIGN_OR_RETURN(fe::ArrayRef r,
                         with_context(fn, fe::device_put(std::vector<double>(ids.begin(), ids.end()),
                                                         s, eng::DType::kI32, {mesh, {}})));
    push_concrete(L, std::move(r));
    lua_replace(L, 2);
    idx = to_udata<ArrayBox>(L, 2);
  }
  return apply(L, fn, fmt::format("axis={}", axis ? *axis : 9999), {of(a), of(idx)},
               [axis](fe::Trace& tr, Ins in) { return one(np::take(tr, in[0], in[1], axis)); });
}

// sl.nn.one_hot(x, num_classes [, {dtype = "float32", axis = -1}])
Result<int> one_hot(lua_State* L) {
  constexpr std::string_view fn = "one_hot";
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, fn, "x"));
  ENG_ASSIGN_OR_RETURN(int64_t n, arg_int(L, 2, fn, "num_classes"));
  eng::DType dtype = eng::DType::kF32;
  int axis = -1;
  if (!lua_isnoneornil(L, 3)) {
    ENG_RETURN_IF_ERROR(arg_table(L, 3, fn, "options"));
    static const std::vector<std::string> kKeys = {"dtype", "axis"};
    ENG_RETURN_IF_ERROR(check_keys(L, 3, fn, kKeys));
    ENG_ASSIGN_OR_RETURN(std::optional<std::string> dt, field_string(L, 3, "dtype", fn));
    if (dt) {
      ENG_ASSIGN_OR_RETURN(dtype, with_context(fn, eng::parse_dtype(*dt)));
    }
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> a, field_int(L, 3, "axis", fn));
    axis = clamp_axis(a.value_or(-1));
  }
  return apply(L, fn, fmt::format("{}|{}|{}", n, eng::dtype_name(dtype), axis), {of(x)},
               [=](fe::Trace& tr, Ins in) { return one(np::one_hot(tr, in[0], n, dtype, axis)); });
}

constexpr Function kFunctions[] = {
    {"linspace", lua_entry<linspace>,
     "np.linspace(start, stop [, num=50 [, endpoint=true]] [, {num, endpoint, dtype, "
     "out_sharding}]) -> Array",
     "num evenly spaced values from start to stop (stop included when endpoint), float32."},
    {"eye", lua_entry<eye>, "np.eye(N [, M [, k]] [, {M, k, dtype, out_sharding}]) -> Array",
     "An (N, M) array with ones on the k-th diagonal."},
    {"zeros_like", lua_entry<zeros_like>,
     "np.zeros_like(a [, dtype | {dtype, shape, out_sharding}]) -> Array",
     "Zeros of a's shape, dtype and sharding (unless given)."},
    {"ones_like", lua_entry<ones_like>,
     "np.ones_like(a [, dtype | {dtype, shape, out_sharding}]) -> Array", "As zeros_like, ones."},
    {"full_like", lua_entry<full_like>,
     "np.full_like(a, fill_value [, dtype | {dtype, shape, out_sharding}]) -> Array",
     "As zeros_like, filled with fill_value."},
    {"square", lua_entry<square>, "np.square(x) -> Array", "x * x."},
    {"sqrt", lua_entry<sqrt>, "np.sqrt(x) -> Array", "The engine's sqrt op."},
    {"abs", lua_entry<abs>, "np.abs(x) -> Array", "|x| (the engine's abs op; abs'(0) = 0)."},
    {"sign", lua_entry<sign>, "np.sign(x) -> Array", "-1, 0 or 1 (the engine's sign op)."},
    {"sin", lua_entry<sin>, "np.sin(x) -> Array", "The engine's sin op."},
    {"cos", lua_entry<cos>, "np.cos(x) -> Array", "The engine's cos op."},
    {"floor", lua_entry<floor>, "np.floor(x) -> Array", "The engine's floor op (gradient 0)."},
    {"log1p", lua_entry<log1p>, "np.log1p(x) -> Array", "log(1 + x), accurate near 0."},
    {"expm1", lua_entry<expm1>, "np.expm1(x) -> Array", "exp(x) - 1, accurate near 0."},
    {"power", lua_entry<power>, "np.power(x1, x2) -> Array",
     "x1 ^ x2: a number x2 that is an integer by repeated multiplication (negative: its\n"
     "  reciprocal), 0.5 by sqrt, otherwise exp(x2 * log(x1)) (NaN for x1 < 0)."},
    {"clip", lua_entry<clip>, "np.clip(a [, min [, max]] [, {min=, max=}]) -> Array",
     "minimum(maximum(a, min), max); min and max numbers, Arrays or nil."},
    {"allclose", lua_entry<allclose>,
     "np.allclose(a, b [, rtol=1e-05 [, atol=1e-08]] [, {rtol, atol}]) -> boolean",
     "Whether |a - b| <= atol + rtol * |b| everywhere (broadcast; NaN is never close): a Lua\n"
     "  boolean, or inside sl.jit a traced scalar mask (1 or 0)."},
    {"logaddexp", lua_entry<logaddexp>, "np.logaddexp(x1, x2) -> Array",
     "log(exp(x1) + exp(x2)), computed stably."},
    {"prod", lua_entry<prod>, "np.prod(a [, axis | {axis=, keepdims=}]) -> Array",
     "Product over one axis or all (halving rounds of multiply)."},
    {"var", lua_entry<var>, "np.var(a [, axis | {axis=, keepdims=, ddof=0}]) -> Array",
     "Variance: mean((a - mean(a))^2) * n / (n - ddof)."},
    {"std", lua_entry<std_>, "np.std(a [, axis | {axis=, keepdims=, ddof=0}]) -> Array",
     "sqrt(var)."},
    {"any", lua_entry<any>, "np.any(a [, axis | {axis=, keepdims=}]) -> Array",
     "1 where some element is nonzero, else 0: a float mask (JAX returns bool)."},
    {"all", lua_entry<all>, "np.all(a [, axis | {axis=, keepdims=}]) -> Array",
     "1 where every element is nonzero, else 0: a float mask (JAX returns bool)."},
    {"cumsum", lua_entry<cumsum>, "np.cumsum(a [, axis | {axis=}]) -> Array",
     "Running sum along axis (of the flattened array without one)."},
    {"stack", lua_entry<stack>, "np.stack({a, b, ...} [, axis=0]) -> Array",
     "Arrays of one shape joined along a new axis."},
    {"split", lua_entry<split>,
     "np.split(ary, sections | {index, ...} [, axis=0]) -> {Array, ...}",
     "A list of pieces: equal sections (must divide), or cut at the indices."},
    {"expand_dims", lua_entry<expand_dims>, "np.expand_dims(a, axis) -> Array",
     "a with a new axis of size 1 at axis."},
    {"squeeze", lua_entry<squeeze>, "np.squeeze(a [, axis]) -> Array",
     "a without its size-1 axes (or the one given, which must have size 1)."},
    {"swapaxes", lua_entry<swapaxes>, "np.swapaxes(a, axis1, axis2) -> Array",
     "Two axes exchanged (one transpose)."},
    {"moveaxis", lua_entry<moveaxis>, "np.moveaxis(a, source, destination) -> Array",
     "Axes moved to new positions, the others in order (integers or lists)."},
    {"tile", lua_entry<tile>, "np.tile(A, reps) -> Array", "A repeated reps times per axis."},
    {"roll", lua_entry<roll>, "np.roll(a, shift [, axis]) -> Array",
     "a's elements shifted by shift along axis, wrapping around (negative: back); without\n"
     "  axis, of the flattened a in a's shape."},
    {"take", lua_entry<take>, "np.take(a, indices [, axis]) -> Array",
     "Elements (rows along axis) at int32 indices (an Array, integer or list; negative from\n"
     "  the end); without axis of the flattened a. An index out of range gives 0 (JAX: NaN)."},
};

constexpr Function kNnFunctions[] = {
    {"relu", lua_entry<relu>, "sl.nn.relu(x) -> Array", "max(x, 0) (gradient 0 at 0, as JAX's)."},
    {"softplus", lua_entry<softplus>, "sl.nn.softplus(x) -> Array", "log(1 + exp(x)), stably."},
    {"one_hot", lua_entry<one_hot>,
     "sl.nn.one_hot(x, num_classes [, {dtype=\"float32\", axis=-1}]) -> Array",
     "1 where x equals the class index, else 0, along a new axis."},
    {"logsumexp", lua_entry<logsumexp>,
     "sl.nn.logsumexp(a [, axis | {axis=, keepdims=}]) -> Array",
     "log(sum(exp(a))) over one axis or all, with the max subtracted first."},
};

}  // namespace

void open_lua_numpy_jax(lua_State* L, int sl, int np_table, int nn_table) {
  sl = lua_absindex(L, sl);
  np_table = lua_absindex(L, np_table);
  nn_table = lua_absindex(L, nn_table);
  add_functions(L, np_table, "sl.numpy", kFunctions);
  add_functions(L, nn_table, "sl.nn", kNnFunctions);
  // sl.zeros, sl.ones, sl.full and sl.arange are jnp's (dtype and out_sharding included);
  // jnp.empty gives zeros too.
  const std::pair<const char*, const char*> aliases[] = {
      {"zeros", "zeros"}, {"ones", "ones"}, {"full", "full"}, {"arange", "arange"},
      {"empty", "zeros"}};
  for (const auto& [name, from] : aliases) {
    lua_getfield(L, sl, from);
    lua_setfield(L, np_table, name);
  }
  // jax.debug.visualize_array_sharding and the jax.sharding namespace, so that JAX's tutorials
  // run with `jax.` read as `sl.` (tests/frontend/tutorial_sharding_test.lua): sl.sharding
  // holds PartitionSpec and falls back to sl's own names (NamedSharding, AxisType, auto_axes).
  lua_createtable(L, 0, 1);
  lua_getfield(L, sl, "visualize");
  lua_setfield(L, -2, "visualize_array_sharding");
  lua_setfield(L, sl, "debug");
  if (lua_getfield(L, sl, "sharding") == LUA_TNIL) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_getfield(L, sl, "P");
    lua_setfield(L, -2, "PartitionSpec");
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, sl);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    lua_setfield(L, sl, "sharding");
  } else {
    lua_pop(L, 1);
  }
  // jnp.nan, jnp.inf, jnp.pi, jnp.e: Python floats in JAX, Lua numbers here.
  const std::pair<const char*, double> constants[] = {
      {"nan", std::numeric_limits<double>::quiet_NaN()},
      {"inf", std::numeric_limits<double>::infinity()},
      {"pi", 3.141592653589793},
      {"e", 2.718281828459045}};
  for (const auto& [name, v] : constants) {
    lua_pushnumber(L, v);
    lua_setfield(L, np_table, name);
  }
  // jnp.float32 and friends: the dtype names every dtype argument takes.
  for (const char* dt : {"float32", "bfloat16", "int32"}) {
    lua_pushstring(L, dt);
    lua_setfield(L, np_table, dt);
  }
}

}  // namespace shell
