// shell/lua_numpy.cpp: sl.numpy (also sl.np): numpy-like ops on Arrays, each a sequence of the
// engine's ops (engine/frontend/numpy.h), eager or traced through `apply` (lua_array.h); the
// Array operators; sl.reshard and sl.with_sharding_constraint. Axes are 0-based, as in JAX.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/frontend/numpy.h"
#include "shell/lua_array.h"
#include "shell/lua_numpy.h"
#include "shell/lua_types.h"

namespace shell {
namespace {

namespace fe = eng::frontend;
namespace np = eng::frontend::np;
using Values = std::vector<eng::ValueId>;
using Ins = std::span<const eng::ValueId>;

}  // namespace

Result<Values> one(Result<eng::ValueId> r) {
  if (!r.ok()) return r.status();
  return Values{*r};
}

Result<int> binary(lua_State* L, std::string_view fn, const BinaryFn& f) {
  ENG_ASSIGN_OR_RETURN(Operand a, arg_operand(L, 1, fn, "x1"));
  ENG_ASSIGN_OR_RETURN(Operand b, arg_operand(L, 2, fn, "x2"));
  if (!a.array && !b.array) return arg_error(L, 1, fn, "x1", "Array (one operand at least)");
  // apply runs the op before it returns: f can be held by reference.
  return apply(L, fn, "", {a, b}, [&f](fe::Trace& tr, Ins x) { return one(f(tr, x[0], x[1])); });
}

namespace {

// c * x for a Lua number c (a static argument: one compilation per value of c).
Result<int> scaled(lua_State* L, std::string_view fn, ArrayBox* x, double c, bool divide = false) {
  Operand o;
  o.array = x;
  return apply(L, fn, fmt::format("c={}", c), {o}, [c, divide](fe::Trace& tr, Ins in) {
    return one(np::scale(tr, in[0], c, divide));
  });
}

Result<int> add(lua_State* L) { return binary(L, "add", np::add); }
Result<int> subtract(lua_State* L) { return binary(L, "subtract", np::subtract); }

Result<int> multiply(lua_State* L) {
  ArrayBox* a = to_udata<ArrayBox>(L, 1);
  ArrayBox* b = to_udata<ArrayBox>(L, 2);
  if (a && !b && lua_type(L, 2) == LUA_TNUMBER) return scaled(L, "multiply", a, lua_tonumber(L, 2));
  if (b && !a && lua_type(L, 1) == LUA_TNUMBER) return scaled(L, "multiply", b, lua_tonumber(L, 1));
  return binary(L, "multiply", np::multiply);
}

Result<int> unary_op(lua_State* L, const char* name) {
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, name, "x"));
  if (!x.array) return arg_error(L, 1, name, "x", "Array");
  return apply(L, name, "", {x},
               [name](fe::Trace& tr, Ins in) { return one(np::unary(tr, name, in[0])); });
}
Result<int> exp(lua_State* L) { return unary_op(L, "exp"); }
Result<int> log(lua_State* L) { return unary_op(L, "log"); }
Result<int> tanh(lua_State* L) { return unary_op(L, "tanh"); }
Result<int> reciprocal(lua_State* L) { return unary_op(L, "reciprocal"); }

// x1 / x2: by a number, one scale op; otherwise x1 * reciprocal(x2), broadcast.
Result<int> divide(lua_State* L) {
  constexpr std::string_view fn = "divide";
  ArrayBox* a = to_udata<ArrayBox>(L, 1);
  if (a && lua_type(L, 2) == LUA_TNUMBER) {
    const double c = lua_tonumber(L, 2);
    if (c == 0) return eng::invalid_argument("{}: division by zero", fn);
    return scaled(L, fn, a, 1.0 / c, /*divide=*/true);
  }
  ENG_ASSIGN_OR_RETURN(Operand x1, arg_operand(L, 1, fn, "x1"));
  ENG_ASSIGN_OR_RETURN(Operand x2, arg_operand(L, 2, fn, "x2"));
  if (!x1.array && !x2.array) return arg_error(L, 1, fn, "x1", "Array (one operand at least)");
  return apply(L, fn, "", {x1, x2},
               [](fe::Trace& tr, Ins in) { return one(np::divide(tr, in[0], in[1])); });
}

// sigmoid(x) = (tanh(x / 2) + 1) / 2; silu(x) = x * sigmoid(x) (jax.nn's).
Result<eng::ValueId> sigmoid_of(fe::Trace& tr, eng::ValueId x) {
  ENG_ASSIGN_OR_RETURN(eng::ValueId h, np::scale(tr, x, 0.5));
  ENG_ASSIGN_OR_RETURN(eng::ValueId t, np::unary(tr, "tanh", h));
  ENG_ASSIGN_OR_RETURN(eng::ValueId t2, np::scale(tr, t, 0.5));
  eng::ValueId half = tr.scalar(0.5, tr.info(x).dtype);
  return np::add(tr, t2, half);
}
Result<int> sigmoid(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, "sigmoid", "x"));
  Operand o;
  o.array = x;
  return apply(L, "sigmoid", "", {o},
               [](fe::Trace& tr, Ins in) { return one(sigmoid_of(tr, in[0])); });
}
Result<int> silu(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, "silu", "x"));
  Operand o;
  o.array = x;
  return apply(L, "silu", "", {o}, [](fe::Trace& tr, Ins in) -> Result<Values> {
    ENG_ASSIGN_OR_RETURN(eng::ValueId s, sigmoid_of(tr, in[0]));
    return one(np::multiply(tr, in[0], s));
  });
}

Result<int> negative(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, "negative", "x"));
  return scaled(L, "negative", a, -1.0);
}

Result<int> gelu(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, "gelu", "x"));
  return apply(L, "gelu", "", {x},
               [](fe::Trace& tr, Ins in) { return one(np::unary(tr, "gelu", in[0])); });
}

// np.matmul(a, b [, {out_sharding = sl.P(...)}])
Result<int> matmul(lua_State* L) {
  constexpr std::string_view fn = "matmul";
  ENG_ASSIGN_OR_RETURN(ArrayBox * a, arg_array(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(ArrayBox * b, arg_array(L, 2, fn, "b"));
  ENG_ASSIGN_OR_RETURN(const std::optional<eng::PartitionSpec> out, read_out_sharding(L, 3, fn));
  Operand oa, ob;
  oa.array = a;
  ob.array = b;
  return apply(L, fn, out ? "out=" + out->to_string() : "", {oa, ob},
               [out](fe::Trace& tr, Ins in) { return one(np::matmul(tr, in[0], in[1], out)); });
}

// Shape arguments: a table {2, -1} or integers reshape(x, 2, -1).
Result<std::vector<int64_t>> read_new_shape(lua_State* L, int idx, std::string_view fn) {
  if (lua_type(L, idx) == LUA_TTABLE) return read_shape_table(L, idx, fn);
  std::vector<int64_t> dims;
  for (int i = idx; i <= lua_gettop(L); ++i) {
    ENG_ASSIGN_OR_RETURN(int64_t d, arg_int(L, i, fn, "shape"));
    dims.push_back(d);
  }
  return dims;
}

Result<int> reshape(lua_State* L) {
  constexpr std::string_view fn = "reshape";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "a"));
  // reshape(a, {shape} [, {out_sharding = sl.P(...)}]) as jnp.reshape's out_sharding: a
  // reshard of the result.
  std::optional<eng::PartitionSpec> out;
  if (lua_type(L, 2) == LUA_TTABLE && !lua_isnoneornil(L, 3)) {
    ENG_ASSIGN_OR_RETURN(out, read_out_sharding(L, 3, fn));
    lua_settop(L, 2);
  }
  ENG_ASSIGN_OR_RETURN(std::vector<int64_t> dims, read_new_shape(L, 2, fn));
  return apply(L, fn, fmt::format("{}{}", fmt::join(dims, ","), out ? out->to_string() : ""), {x},
               [dims, out](fe::Trace& tr, Ins in) -> Result<Values> {
                 ENG_ASSIGN_OR_RETURN(eng::ValueId y, np::reshape(tr, in[0], dims));
                 if (!out) return Values{y};
                 return one(np::sharding_constraint(tr, y, *out, false));
               });
}

}  // namespace

// {axis=, keepdims=} or a bare axis number, at idx.
Result<std::pair<std::optional<int>, bool>> read_axis(lua_State* L, int idx, std::string_view fn) {
  std::optional<int> axis;
  bool keepdims = false;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    ENG_ASSIGN_OR_RETURN(int64_t a, arg_int(L, idx, fn, "axis"));
    axis = static_cast<int>(std::clamp<int64_t>(a, -1000, 1000));
  } else if (!lua_isnoneornil(L, idx)) {
    ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, "options"));
    static const std::vector<std::string> kKeys = {"axis", "keepdims"};
    ENG_RETURN_IF_ERROR(check_keys(L, idx, fn, kKeys));
    ENG_ASSIGN_OR_RETURN(std::optional<int64_t> a, field_int(L, idx, "axis", fn));
    if (a) axis = static_cast<int>(std::clamp<int64_t>(*a, -1000, 1000));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> k, field_bool(L, idx, "keepdims", fn));
    keepdims = k.value_or(false);
  }
  return std::make_pair(axis, keepdims);
}

// An axis name or a list of them, at idx.
Result<std::vector<std::string>> read_axis_names(lua_State* L, int idx, std::string_view fn) {
  if (lua_type(L, idx) == LUA_TSTRING) return std::vector<std::string>{lua_tostring(L, idx)};
  return arg_string_list(L, idx, fn, "axis_name");
}

Result<bool> read_bool_option(lua_State* L, int idx, std::string_view fn, const char* key) {
  if (lua_isnoneornil(L, idx)) return false;
  ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, "options"));
  const std::string keys[] = {key};
  ENG_RETURN_IF_ERROR(check_keys(L, idx, fn, keys));
  ENG_ASSIGN_OR_RETURN(std::optional<bool> v, field_bool(L, idx, key, fn));
  return v.value_or(false);
}

Result<int> reduction(lua_State* L, std::string_view fn,
                      Result<eng::ValueId> (*f)(fe::Trace&, eng::ValueId, std::optional<int>,
                                                bool)) {
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "a"));
  ENG_ASSIGN_OR_RETURN(auto ak, read_axis(L, 2, fn));
  // Named copies, not a structured binding: lambdas capture them (clang 14 cannot capture
  // a binding, a C++20 feature it lacks).
  const std::optional<int> axis = ak.first;
  const bool keepdims = ak.second;
  return apply(
      L, fn, fmt::format("axis={} keepdims={}", axis ? *axis : 9999, keepdims), {x},
      [f, axis, keepdims](fe::Trace& tr, Ins in) { return one(f(tr, in[0], axis, keepdims)); });
}

void add_array_methods(lua_State* L, int mt, std::span<const Method> methods) {
  lua_getfield(L, mt, "__methods");
  for (const Method& m : methods) {
    lua_pushcfunction(L, m.fn);
    lua_setfield(L, -2, m.name);
  }
  lua_pop(L, 1);
}

namespace {

Result<int> sum(lua_State* L) { return reduction(L, "sum", np::sum); }
Result<int> mean(lua_State* L) { return reduction(L, "mean", np::mean); }

// np.concatenate({a, b, ...} [, axis=0])
Result<int> concatenate(lua_State* L) {
  constexpr std::string_view fn = "concatenate";
  ENG_RETURN_IF_ERROR(arg_table(L, 1, fn, "arrays"));
  std::vector<Operand> ops;
  for (lua_Integer i = 1; i <= static_cast<lua_Integer>(lua_rawlen(L, 1)); ++i) {
    lua_rawgeti(L, 1, i);
    ArrayBox* a = to_udata<ArrayBox>(L, -1);
    lua_pop(L, 1);
    if (!a) return eng::invalid_argument("{}: arrays[{}] is not an Array", fn, i);
    Operand o;
    o.array = a;
    ops.push_back(o);
  }
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> axis, opt_int(L, 2, fn, "axis"));
  const int ax = static_cast<int>(std::clamp<int64_t>(axis.value_or(0), -1000, 1000));
  return apply(L, fn, fmt::format("axis={}", ax), ops, [ax](fe::Trace& tr, Ins in) {
    return one(np::concatenate(tr, std::vector<eng::ValueId>(in.begin(), in.end()), ax));
  });
}

// sl.lax.slice_in_dim(x, start, stop [, axis=0]): x[start:stop] along axis (0-based, stop
// exclusive, negative from the end), as jax.lax.slice_in_dim.
Result<int> slice_in_dim(lua_State* L) {
  constexpr std::string_view fn = "slice_in_dim";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "operand"));
  ENG_ASSIGN_OR_RETURN(int64_t start, arg_int(L, 2, fn, "start_index"));
  ENG_ASSIGN_OR_RETURN(int64_t stop, arg_int(L, 3, fn, "limit_index"));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> axis, opt_int(L, 4, fn, "axis"));
  const int ax = static_cast<int>(std::clamp<int64_t>(axis.value_or(0), -1000, 1000));
  return apply(L, fn, fmt::format("{}:{}@{}", start, stop, ax), {x},
               [=](fe::Trace& tr, Ins in) { return one(np::slice(tr, in[0], ax, start, stop)); });
}

Result<int> astype(lua_State* L) {
  constexpr std::string_view fn = "astype";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "x"));
  ENG_ASSIGN_OR_RETURN(std::string name, arg_string(L, 2, fn, "dtype"));
  ENG_ASSIGN_OR_RETURN(eng::DType d, with_context(fn, eng::parse_dtype(name)));
  return apply(L, fn, std::string(eng::dtype_name(d)), {x},
               [d](fe::Trace& tr, Ins in) { return one(np::astype(tr, in[0], d)); });
}

Result<int> constraint(lua_State* L, std::string_view fn, bool assert_) {
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, fn, "x"));
  ENG_ASSIGN_OR_RETURN(eng::PartitionSpec * spec, arg_spec(L, 2, fn, "shardings"));
  Operand o;
  o.array = x;
  const eng::PartitionSpec s = *spec;
  return apply(L, fn, s.to_string(), {o}, [s, assert_](fe::Trace& tr, Ins in) {
    return one(np::sharding_constraint(tr, in[0], s, assert_));
  });
}
Result<int> reshard(lua_State* L) { return constraint(L, "reshard", false); }
Result<int> with_sharding_constraint(lua_State* L) {
  return constraint(L, "with_sharding_constraint", true);
}

// sl.nn.rmsnorm(x, scale [, eps=1e-5])
Result<int> rmsnorm(lua_State* L) {
  constexpr std::string_view fn = "rmsnorm";
  ENG_ASSIGN_OR_RETURN(ArrayBox * x, arg_array(L, 1, fn, "x"));
  ENG_ASSIGN_OR_RETURN(ArrayBox * scale, arg_array(L, 2, fn, "scale"));
  ENG_ASSIGN_OR_RETURN(std::optional<double> eps, opt_number(L, 3, fn, "eps"));
  const double e = eps.value_or(1e-5);
  Operand a, b;
  a.array = x;
  b.array = scale;
  return apply(L, fn, fmt::format("eps={}", e), {a, b},
               [e](fe::Trace& tr, Ins in) { return one(np::rmsnorm(tr, in[0], in[1], e)); });
}

// Concrete int32 labels of concrete logits must lie in [0, V) (the kernel gives NaN for one
// outside, as optax does; eagerly a bad label is an error naming it and V).
Status check_label_range(const ArrayBox& logits, const ArrayBox& labels, std::string_view fn) {
  if (labels.is_tracer() || !labels.data || labels.deleted || labels.dtype != eng::DType::kI32 ||
      logits.shape.rank() < 1)
    return eng::ok_status();
  const int64_t V = logits.shape.dim(-1);
  ENG_ASSIGN_OR_RETURN(std::vector<double> ids, fe::fetch(*labels.data));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= static_cast<double>(V))
      return eng::invalid_argument("{}: label {} at flat index {} is outside [0, {}) (the logits' "
                                   "last dim)",
                                   fn, static_cast<int64_t>(ids[i]), i, V);
  return eng::ok_status();
}

// sl.nn.softmax_cross_entropy_with_integer_labels(logits, labels)
Result<int> cross_entropy(lua_State* L) {
  constexpr std::string_view fn = "softmax_cross_entropy_with_integer_labels";
  ENG_ASSIGN_OR_RETURN(ArrayBox * logits, arg_array(L, 1, fn, "logits"));
  ENG_ASSIGN_OR_RETURN(ArrayBox * labels, arg_array(L, 2, fn, "labels"));
  ENG_RETURN_IF_ERROR(check_label_range(*logits, *labels, fn));
  Operand a, b;
  a.array = logits;
  b.array = labels;
  return apply(L, fn, "", {a, b}, [](fe::Trace& tr, Ins in) {
    return one(np::softmax_cross_entropy(tr, in[0], in[1]));
  });
}

// sl.nn.dot_product_attention(q, k, v, {is_causal = true})
Result<int> attention(lua_State* L) {
  constexpr std::string_view fn = "dot_product_attention";
  std::vector<Operand> ops(3);
  const char* names[] = {"query", "key", "value"};
  for (int i = 0; i < 3; ++i) {
    ENG_ASSIGN_OR_RETURN(ops[i].array, arg_array(L, i + 1, fn, names[i]));
  }
  ENG_ASSIGN_OR_RETURN(const bool causal, read_bool_option(L, 4, fn, "is_causal"));
  if (!causal)
    return eng::invalid_argument(
        "{}: only causal attention is in the engine's op set: pass {{is_causal = true}}", fn);
  return apply(L, fn, "causal", ops, [](fe::Trace& tr, Ins in) {
    return one(np::causal_attention(tr, in[0], in[1], in[2]));
  });
}

// ---- jax.lax collectives (inside sl.shard_map) -------------------------------------------

// {key = integer, tiled = bool} at idx.
Result<std::pair<int, bool>> read_dim_tiled(lua_State* L, int idx, std::string_view fn,
                                            const char* key) {
  int dim = 0;
  bool tiled = false;
  if (lua_isnoneornil(L, idx)) return std::make_pair(dim, tiled);
  ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, "options"));
  const std::vector<std::string> keys = {key, "tiled"};
  ENG_RETURN_IF_ERROR(check_keys(L, idx, fn, keys));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> d, field_int(L, idx, key, fn));
  ENG_ASSIGN_OR_RETURN(std::optional<bool> t, field_bool(L, idx, "tiled", fn));
  dim = static_cast<int>(std::clamp<int64_t>(d.value_or(0), -1000, 1000));
  return std::make_pair(dim, t.value_or(false));
}

Result<int> psum(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, "psum", "x"));
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, read_axis_names(L, 2, "psum"));
  return apply(L, "psum", fmt::format("{}", fmt::join(axes, ",")), {x},
               [axes](fe::Trace& tr, Ins in) { return one(np::psum(tr, in[0], axes)); });
}

Result<int> all_gather(lua_State* L) {
  constexpr std::string_view fn = "all_gather";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "x"));
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, read_axis_names(L, 2, fn));
  ENG_ASSIGN_OR_RETURN(auto at, read_dim_tiled(L, 3, fn, "axis"));
  const auto axis = at.first;  // copies: captured below (clang 14 cannot capture bindings)
  const bool tiled = at.second;
  return apply(L, fn, fmt::format("{} {} {}", fmt::join(axes, ","), axis, tiled), {x},
               [axes, axis, tiled](fe::Trace& tr, Ins in) {
    return one(np::all_gather(tr, in[0], axes, axis, tiled));
  });
}

Result<int> psum_scatter(lua_State* L) {
  constexpr std::string_view fn = "psum_scatter";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "x"));
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, read_axis_names(L, 2, fn));
  ENG_ASSIGN_OR_RETURN(auto at, read_dim_tiled(L, 3, fn, "scatter_dimension"));
  const auto dim = at.first;  // copies: captured below (clang 14 cannot capture bindings)
  const bool tiled = at.second;
  return apply(L, fn, fmt::format("{} {} {}", fmt::join(axes, ","), dim, tiled), {x},
               [axes, dim, tiled](fe::Trace& tr, Ins in) {
    return one(np::psum_scatter(tr, in[0], axes, dim, tiled));
  });
}

// sl.lax.ppermute(x, axis_name, {{src, dst}, ...})
Result<int> ppermute(lua_State* L) {
  constexpr std::string_view fn = "ppermute";
  ENG_ASSIGN_OR_RETURN(Operand x, arg_operand(L, 1, fn, "x"));
  ENG_ASSIGN_OR_RETURN(std::string axis, arg_string(L, 2, fn, "axis_name"));
  ENG_RETURN_IF_ERROR(arg_table(L, 3, fn, "perm"));
  std::vector<std::pair<int64_t, int64_t>> perm;
  const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, 3));
  for (lua_Integer i = 1; i <= n && i <= 1 << 20; ++i) {
    lua_rawgeti(L, 3, i);
    int ok0 = 0, ok1 = 0;
    lua_Integer a = 0, b = 0;
    if (lua_type(L, -1) == LUA_TTABLE) {
      lua_rawgeti(L, -1, 1);
      a = lua_tointegerx(L, -1, &ok0);
      lua_rawgeti(L, -2, 2);
      b = lua_tointegerx(L, -1, &ok1);
      lua_pop(L, 2);
    }
    lua_pop(L, 1);
    if (!ok0 || !ok1)
      return eng::invalid_argument("{}: perm[{}] is not a pair {{src, dst}}", fn, i);
    perm.emplace_back(a, b);
  }
  std::string key = axis;  // the eager cache's key (a shard_map run eagerly dispatches it)
  for (const auto& [a, b] : perm) key += fmt::format(" {}>{}", a, b);
  return apply(L, fn, key, {x}, [axis, perm](fe::Trace& tr, Ins in) {
    return one(np::ppermute(tr, in[0], axis, perm));
  });
}

Result<int> axis_index(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(std::string axis, arg_string(L, 1, "axis_index", "axis_name"));
  return apply(L, "axis_index", axis, {},
               [axis](fe::Trace& tr, Ins) { return one(np::axis_index(tr, axis)); });
}

// sl.lax.axis_size(axis_name | {names}) -> integer, inside sl.shard_map (a static number, as
// JAX's Python int).
Result<int> axis_size(lua_State* L) {
  constexpr std::string_view fn = "axis_size";
  ENG_ASSIGN_OR_RETURN(std::vector<std::string> axes, read_axis_names(L, 1, fn));
  std::shared_ptr<fe::Trace> tr = session(L).active_trace();
  if (tr == nullptr)
    return eng::invalid_argument("{}: unbound axis name '{}': axis sizes are known inside "
                                 "sl.shard_map", fn, axes.empty() ? "" : axes[0]);
  ENG_ASSIGN_OR_RETURN(int64_t n, np::axis_size(*tr, axes));
  lua_pushinteger(L, n);
  return 1;
}

// ---- operators --------------------------------------------------------------------------

Result<int> op_div(lua_State* L) { return divide(L); }  // also number / Array
Result<int> op_unm(lua_State* L) { return negative(L); }

constexpr Function kNumpyFunctions[] = {
    {"add", lua_entry<add>, "np.add(x1, x2) -> Array",
     "x1 + x2 with numpy broadcasting (also x1 + x2)."},
    {"subtract", lua_entry<subtract>, "np.subtract(x1, x2) -> Array", "x1 - x2 (also x1 - x2)."},
    {"multiply", lua_entry<multiply>, "np.multiply(x1, x2) -> Array",
     "Elementwise product with broadcasting (also x1 * x2); by a number: one scale op."},
    {"divide", lua_entry<divide>, "np.divide(x1, x2) -> Array",
     "x1 / x2 (also x1 / x2): by a number one scale op, else x1 * reciprocal(x2), broadcast."},
    {"exp", lua_entry<exp>, "np.exp(x) -> Array", "e^x (the engine's exp op)."},
    {"log", lua_entry<log>, "np.log(x) -> Array", "Natural logarithm (the engine's log op)."},
    {"tanh", lua_entry<tanh>, "np.tanh(x) -> Array", "tanh (the engine's tanh op)."},
    {"reciprocal", lua_entry<reciprocal>, "np.reciprocal(x) -> Array", "1 / x (the engine's op)."},
    {"negative", lua_entry<negative>, "np.negative(x) -> Array", "-x (also -x)."},
    {"matmul", lua_entry<matmul>, "np.matmul(a, b [, {out_sharding = sl.P(...)}]) -> Array",
     "numpy.matmul for a of rank >= 1 and b of rank 1 or 2 (the engine's matmul has no batch\n"
     "  dims). out_sharding: the result's sharding (explicit mode asks for it when ambiguous)."},
    {"dot", lua_entry<matmul>, "np.dot(a, b [, {out_sharding}]) -> Array", "As np.matmul."},
    {"reshape", lua_entry<reshape>, "np.reshape(a, shape [, {out_sharding}]) -> Array",
     "numpy.reshape (shape a table or integers; one dim may be -1); out_sharding (with a\n"
     "  table shape): the result's sharding, as jnp.reshape's."},
    {"sum", lua_entry<sum>, "np.sum(a [, axis | {axis=, keepdims=}]) -> Array",
     "Sum over one axis (0-based, negative from the end) or all; float32."},
    {"mean", lua_entry<mean>, "np.mean(a [, axis | {axis=, keepdims=}]) -> Array",
     "Mean, as np.sum."},
    {"concatenate", lua_entry<concatenate>, "np.concatenate({a, b, ...} [, axis=0]) -> Array",
     "Arrays joined along an existing axis."},
    {"astype", lua_entry<astype>, "np.astype(x, dtype) -> Array",
     "x converted to dtype (\"float32\", \"bfloat16\", \"int32\")."},
};

constexpr Function kNnFunctions[] = {
    {"gelu", lua_entry<gelu>, "sl.nn.gelu(x) -> Array",
     "jax.nn.gelu (approximate=True): the engine's gelu op."},
    {"sigmoid", lua_entry<sigmoid>, "sl.nn.sigmoid(x) -> Array", "(tanh(x / 2) + 1) / 2."},
    {"silu", lua_entry<silu>, "sl.nn.silu(x) -> Array", "x * sigmoid(x)."},
    {"rmsnorm", lua_entry<rmsnorm>, "sl.nn.rmsnorm(x, scale [, eps=1e-5]) -> Array",
     "x / sqrt(mean(x^2, last axis) + eps) * scale: the engine's fused rmsnorm (x rank >= 2)."},
    {"softmax_cross_entropy_with_integer_labels", lua_entry<cross_entropy>,
     "sl.nn.softmax_cross_entropy_with_integer_labels(logits, labels) -> Array",
     "optax's: -log softmax(logits)[label] per row (labels int32, logits' shape without the\n"
     "  last dim); the engine's fused, stable softmax cross-entropy."},
    {"dot_product_attention", lua_entry<attention>,
     "sl.nn.dot_product_attention(q, k, v, {is_causal = true}) -> Array",
     "Causal attention over (B, T, N, H) arrays, scale 1/sqrt(H): the engine's fused\n"
     "  (flash-style) attention op. Only is_causal = true is in the op set."},
};

constexpr Function kLaxFunctions[] = {
    {"psum", lua_entry<psum>, "sl.lax.psum(x, axis_name | {names}) -> Array",
     "Inside sl.shard_map: the sum over the devices along the named axes (an all-reduce)."},
    {"all_gather", lua_entry<all_gather>,
     "sl.lax.all_gather(x, axis_name [, {axis = 0, tiled = false}]) -> Array",
     "Inside sl.shard_map: every member's block, stacked along a new axis (tiled: concatenated\n"
     "  along axis)."},
    {"psum_scatter", lua_entry<psum_scatter>,
     "sl.lax.psum_scatter(x, axis_name [, {scatter_dimension = 0, tiled = false}]) -> Array",
     "Inside sl.shard_map: the sum over the group, member r keeping block r (a reduce-scatter)."},
    {"ppermute", lua_entry<ppermute>, "sl.lax.ppermute(x, axis_name, {{src, dst}, ...}) -> Array",
     "Inside sl.shard_map: x sent from src to dst along the axis (shifts: cyclic, or partial with\n"
     "  zeros where nothing arrives)."},
    {"axis_index", lua_entry<axis_index>, "sl.lax.axis_index(axis_name) -> Array",
     "Inside sl.shard_map: this device's index along the axis (int32)."},
    {"axis_size", lua_entry<axis_size>, "sl.lax.axis_size(axis_name | {names}) -> integer",
     "Inside sl.shard_map: the number of devices along the named axes (jax.lax.axis_size)."},
    {"with_sharding_constraint", lua_entry<with_sharding_constraint>,
     "sl.lax.with_sharding_constraint(x, spec) -> Array", "sl.with_sharding_constraint's name in "
     "jax.lax."},
    {"slice_in_dim", lua_entry<slice_in_dim>,
     "sl.lax.slice_in_dim(x, start, stop [, axis=0]) -> Array",
     "x[start:stop] along axis (0-based; stop exclusive), as jax.lax.slice_in_dim."},
};

constexpr Function kShardingFunctions[] = {
    {"reshard", lua_entry<reshard>, "sl.reshard(x, spec) -> Array",
     "x with sharding spec (jax.sharding.reshard): the compiler inserts the collectives."},
    {"with_sharding_constraint", lua_entry<with_sharding_constraint>,
     "sl.with_sharding_constraint(x, spec) -> Array",
     "A hint in auto mode (the compiler reshards); an assert in explicit mode (JAX's error when\n"
     "  x's sharding differs: use sl.reshard)."},
};

constexpr Method kNumpyMethods[] = {
    {"reshape", lua_entry<reshape>, "x:reshape(shape) -> Array", "np.reshape(x, shape)."},
    {"sum", lua_entry<sum>, "x:sum([axis]) -> Array", "np.sum(x, axis)."},
    {"mean", lua_entry<mean>, "x:mean([axis]) -> Array", "np.mean(x, axis)."},
    {"astype", lua_entry<astype>, "x:astype(dtype) -> Array", "np.astype(x, dtype)."},
    {"matmul", lua_entry<matmul>, "x:matmul(w [, {out_sharding}]) -> Array", "np.matmul(x, w)."},
};

}  // namespace

void open_lua_numpy(lua_State* L, int sl, int mt) {
  mt = lua_absindex(L, mt);
  lua_newtable(L);
  add_functions(L, lua_gettop(L), "sl.numpy", kNumpyFunctions);
  open_lua_numpy_ops(L, lua_gettop(L), mt);
  lua_pushvalue(L, -1);
  lua_setfield(L, sl, "np");
  lua_setfield(L, sl, "numpy");
  lua_newtable(L);
  add_functions(L, lua_gettop(L), "sl.nn", kNnFunctions);
  open_lua_nn_ops(L, lua_gettop(L));
  lua_setfield(L, sl, "nn");
  lua_getfield(L, sl, "numpy");
  lua_getfield(L, sl, "nn");
  open_lua_numpy_jax(L, sl, -2, -1);
  lua_pop(L, 2);
  lua_newtable(L);
  add_functions(L, lua_gettop(L), "sl.lax", kLaxFunctions);
  lua_getfield(L, sl, "numpy");
  open_lua_index(L, -1, -2, mt);
  lua_pop(L, 1);
  lua_setfield(L, sl, "lax");
  add_functions(L, sl, "sl", kShardingFunctions);
  // Methods on Array (the methods table define_type made) and the operators.
  add_array_methods(L, mt, kNumpyMethods);
  const std::pair<const char*, lua_CFunction> ops[] = {{"__add", lua_entry<add>},
                                                       {"__sub", lua_entry<subtract>},
                                                       {"__mul", lua_entry<multiply>},
                                                       {"__div", lua_entry<op_div>},
                                                       {"__unm", lua_entry<op_unm>}};
  for (const auto& [name, f] : ops) {
    lua_pushcfunction(L, f);
    lua_setfield(L, mt, name);
  }
}

}  // namespace shell
