// shell/lua_sharding.cpp: Lua bindings for sharding inspection: sl.rules, sl.logical_to_mesh,
// sl.NamedSharding, sl.visualize, sl.typeof, and the values t:shardings/t:audit/t:visualize
// return (their Trainer methods are in lua_train.cpp).
#include "shell/lua_sharding.h"

#include <algorithm>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/frontend/vma.h"
#include "engine/sharding/logical_rules.h"
#include "engine/sharding/visualize.h"
#include "shell/lua_array.h"
#include "engine/train/inspect.h"
#include "engine/train/train_step.h"
#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/lua_types.h"

namespace shell {

// t:shardings()'s value: engine/train/inspect.h's table with the rules' resolution.
using ShardingView = eng::ShardingTableView;
template <>
struct LuaType<ShardingView> {
  static constexpr const char* kName = "ShardingTable";
};

// sl.typeof's value (jax.typeof's ShapedArray).
struct ShapedArrayType {
  eng::Shape shape;
  std::string dtype_name;     // "f32"
  eng::NamedSharding sharding;  // size-1 mesh axes dropped from the spec
  std::string text;           // "f32[8@X,4@Y]", "f32[3]{V:i}"
  std::vector<std::string> vma;  // inside shard_map: the varying manual axes
};
template <>
struct LuaType<ShapedArrayType> {
  static constexpr const char* kName = "ShapedArray";
};

namespace {

// Metatables of plain Lua tables this module returns (rows, rule lists, audit reports).
constexpr const char* kRowType = "ShardingRow";
constexpr const char* kRulesType = "LogicalAxisRules";
constexpr const char* kRuleType = "LogicalAxisRule";
constexpr const char* kAuditType = "AuditReport";

bool has_metatable(lua_State* L, int idx, const char* name) {
  if (!lua_getmetatable(L, idx)) return false;
  luaL_getmetatable(L, name);
  bool same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

void set_string(lua_State* L, const char* key, const std::string& v) {
  lua_pushlstring(L, v.data(), v.size());
  lua_setfield(L, -2, key);
}
void set_int(lua_State* L, const char* key, int64_t v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}
void push_ints(lua_State* L, const std::vector<int64_t>& xs) {
  lua_createtable(L, static_cast<int>(xs.size()), 0);
  for (size_t i = 0; i < xs.size(); ++i) {
    lua_pushinteger(L, xs[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
}

// A raw string field of the table at idx, or "" when absent or not a string.
std::string raw_string(lua_State* L, int idx, const char* key) {
  std::string out;
  if (push_field(L, idx, key) == LUA_TSTRING) out = lua_tostring(L, -1);
  lua_pop(L, 1);
  return out;
}

// ---- Rules ----------------------------------------------------------------------------

// One rule: {"embed", {"fsdp", "context"}}, {"layers", "stage"} or {"kv", {}}.
Result<eng::LogicalAxisRule> read_rule(lua_State* L, int idx, std::string_view fn, int n) {
  const std::string where = fmt::format("rule #{}", n);
  if (lua_type(L, idx) != LUA_TTABLE)
    return arg_error(L, idx, fn, where, "a table {logical, {mesh axes}}");
  eng::LogicalAxisRule r;
  lua_rawgeti(L, idx, 1);
  if (lua_type(L, -1) != LUA_TSTRING) {
    lua_pop(L, 1);
    return eng::invalid_argument("{}: {} expected a logical axis name first, e.g. {{\"embed\", {{\"fsdp\"}}}}",
                                 fn, where);
  }
  r.logical = lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_rawgeti(L, idx, 2);
  const int axes = lua_gettop(L);
  Status s;
  if (lua_type(L, axes) == LUA_TSTRING) {
    r.mesh_axes = {lua_tostring(L, axes)};
    r.bare = true;
  } else if (lua_type(L, axes) == LUA_TTABLE) {
    Result<std::vector<std::string>> list = arg_string_list(L, axes, fn, where + " mesh axes");
    if (list.ok()) r.mesh_axes = std::move(list).value();
    else s = list.status();
  } else {
    s = eng::invalid_argument("{}: {} ('{}') expected mesh axes (a string or a table of strings) second, got {}",
                              fn, where, r.logical, luaL_typename(L, axes));
  }
  lua_pop(L, 1);
  if (!s.ok()) return s;
  const std::vector<std::string>& known = eng::maxtext_mesh_axes();
  for (const std::string& a : r.mesh_axes)
    if (std::find(known.begin(), known.end(), a) == known.end()) {
      return eng::invalid_argument("{}: {} ('{}') names mesh axis '{}', which is not one of MaxText's mesh axes{}",
                                   fn, where, r.logical, a, did_you_mean_hint(a, known));
    }
  return r;
}

Result<eng::LogicalAxisRules> read_rules(lua_State* L, int idx, std::string_view fn,
                                         std::string_view name) {
  idx = lua_absindex(L, idx);
  ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, name));
  std::vector<eng::LogicalAxisRule> rules;
  const int n = static_cast<int>(lua_rawlen(L, idx));
  for (int i = 1; i <= n; ++i) {
    lua_rawgeti(L, idx, i);
    Result<eng::LogicalAxisRule> r = read_rule(L, lua_gettop(L), fn, i);
    lua_pop(L, 1);
    if (!r.ok()) return r.status();
    rules.push_back(std::move(r).value());
  }
  return eng::LogicalAxisRules(std::move(rules));
}

// The rules an argument stands for: nil = MaxText's defaults; a sl.rules() list = itself;
// any other list = overrides merged into the defaults (MaxText's logical_axis_rules).
Result<eng::LogicalAxisRules> resolve_rules(lua_State* L, int idx, std::string_view fn) {
  if (lua_isnoneornil(L, idx)) return eng::LogicalAxisRules::maxtext_default();
  ENG_ASSIGN_OR_RETURN(eng::LogicalAxisRules rules, read_rules(L, idx, fn, "rules"));
  if (has_metatable(L, idx, kRulesType)) return rules;
  return eng::LogicalAxisRules::maxtext_default().merged(rules);
}

void push_rules(lua_State* L, const eng::LogicalAxisRules& rules) {
  lua_createtable(L, rules.size(), 0);
  for (int i = 0; i < rules.size(); ++i) {
    lua_createtable(L, 2, 0);
    lua_pushstring(L, rules[i].logical.c_str());
    lua_rawseti(L, -2, 1);
    if (rules[i].bare && rules[i].mesh_axes.size() == 1) lua_pushstring(L, rules[i].mesh_axes[0].c_str());
    else push_strings(L, rules[i].mesh_axes);
    lua_rawseti(L, -2, 2);
    luaL_setmetatable(L, kRuleType);
    lua_rawseti(L, -2, i + 1);
  }
  luaL_setmetatable(L, kRulesType);
}

Result<int> rules(lua_State* L) {
  constexpr std::string_view fn = "sl.rules";
  eng::LogicalAxisRules out = eng::LogicalAxisRules::maxtext_default();
  if (!lua_isnoneornil(L, 1)) {
    ENG_ASSIGN_OR_RETURN(eng::LogicalAxisRules overrides, read_rules(L, 1, fn, "overrides"));
    bool replace = false;
    if (!lua_isnoneornil(L, 2)) {
      ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "options"));
      static const std::vector<std::string> kAllowed = {"replace"};
      ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kAllowed));
      ENG_ASSIGN_OR_RETURN(std::optional<bool> r, field_bool(L, 2, "replace", fn));
      replace = r.value_or(false);
    }
    out = out.merged(overrides, replace);
  }
  push_rules(L, out);
  return 1;
}

// __tostring of a rule list (base.yml, one per line) and of one rule.
Result<int> rules_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::LogicalAxisRules r, read_rules(L, 1, "LogicalAxisRules:__tostring", ""));
  lua_pushstring(L, r.to_string().c_str());
  return 1;
}
Result<int> rule_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::LogicalAxisRule r, read_rule(L, 1, "LogicalAxisRule:__tostring", 1));
  lua_pushstring(L, r.to_string().c_str());
  return 1;
}

// ---- sl.logical_to_mesh -------------------------------------------------------------------

// {"embed", false, "mlp"}: per-dim logical names; false or "" is None.
Result<eng::LogicalAxes> read_logical_axes(lua_State* L, int idx, std::string_view fn) {
  ENG_RETURN_IF_ERROR(arg_table(L, idx, fn, "names"));
  eng::LogicalAxes names;
  const int n = static_cast<int>(lua_rawlen(L, idx));
  for (int i = 1; i <= n; ++i) {
    const int t = lua_rawgeti(L, idx, i);
    if (t == LUA_TSTRING && lua_rawlen(L, -1) > 0) names.emplace_back(lua_tostring(L, -1));
    else if ((t == LUA_TSTRING) || (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)))
      names.emplace_back(std::nullopt);
    else {
      Status s = arg_error(L, -1, fn, fmt::format("names[{}]", i), "a logical axis name or false (None)");
      lua_pop(L, 1);
      return s;
    }
    lua_pop(L, 1);
  }
  return names;
}

Result<int> logical_to_mesh(lua_State* L) {
  constexpr std::string_view fn = "sl.logical_to_mesh";
  ENG_ASSIGN_OR_RETURN(eng::LogicalAxes names, read_logical_axes(L, 1, fn));
  ENG_ASSIGN_OR_RETURN(eng::Mesh * mesh, arg_udata<eng::Mesh>(L, 2, fn, "mesh"));
  ENG_ASSIGN_OR_RETURN(eng::LogicalAxisRules r, resolve_rules(L, 3, fn));
  Result<eng::PartitionSpec> p = eng::logical_to_mesh(names, *mesh, r);
  if (!p.ok()) return with_context(fn, p.status());
  push_udata(L, std::move(p).value());
  return 1;
}

// ---- NamedSharding ------------------------------------------------------------------------

Result<int> named_sharding(lua_State* L) {
  constexpr std::string_view fn = "sl.NamedSharding";
  ENG_ASSIGN_OR_RETURN(eng::Mesh * mesh, arg_udata<eng::Mesh>(L, 1, fn, "mesh"));
  ENG_ASSIGN_OR_RETURN(eng::PartitionSpec * spec, arg_udata<eng::PartitionSpec>(L, 2, fn, "spec"));
  for (const auto& dim : spec->dims())
    for (const std::string& a : dim)
      if (!mesh->has_axis(a))
        return eng::invalid_argument("{}: spec {} names axis '{}', which is not in {}", fn,
                                     spec->to_string(), a, mesh->to_string());
  push_udata(L, eng::NamedSharding{*mesh, *spec});
  return 1;
}

Result<int> sharding_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::NamedSharding * s,
                       arg_udata<eng::NamedSharding>(L, 1, "NamedSharding:__tostring"));
  lua_pushstring(L, s->to_string().c_str());
  return 1;
}
Result<int> sharding_eq(lua_State* L) {
  auto *a = to_udata<eng::NamedSharding>(L, 1), *b = to_udata<eng::NamedSharding>(L, 2);
  lua_pushboolean(L, a && b && *a == *b);
  return 1;
}
Result<int> sharding_property(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::NamedSharding * s, arg_udata<eng::NamedSharding>(L, 1, "NamedSharding"));
  std::string key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (key == "mesh") push_udata(L, s->mesh);
  else if (key == "spec") push_udata(L, s->spec);
  else lua_pushnil(L);
  return 1;
}

// ---- Shapes and shardings from arguments ----------------------------------------------------

Result<eng::Shape> read_shape(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  if (lua_type(L, idx) != LUA_TTABLE) return arg_error(L, idx, fn, name, "a shape {d0, d1, ...}");
  std::vector<int64_t> dims;
  const int n = static_cast<int>(lua_rawlen(L, idx));
  for (int i = 1; i <= n; ++i) {
    lua_rawgeti(L, idx, i);
    int ok = 0;
    lua_Integer d = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &ok) : 0;
    std::string got = luaL_typename(L, -1);  // before lua_tostring turns a number into a string
    if (lua_type(L, -1) == LUA_TNUMBER || lua_type(L, -1) == LUA_TSTRING)
      got += fmt::format(" {}", lua_tostring(L, -1));
    lua_pop(L, 1);
    if (!ok || d < 1)
      return eng::invalid_argument(
          "{}: argument '{}' expected positive integer dims, dim {} is {}", fn, name, i - 1, got);
    dims.push_back(d);
  }
  return eng::Shape(std::move(dims));
}

Result<ShapedSharding> read_shaped_sharding(lua_State* L, std::string_view fn) {
  ShapedSharding out;
  if (array_type_parts(L, 1, &out.shape, &out.sharding, &out.dtype)) {  // an sl.array Array
    out.next = 2;
    return out;
  }
  const bool row = lua_type(L, 1) == LUA_TTABLE && has_metatable(L, 1, kRowType);
  if (row) {
    push_field(L, 1, "shape");
    Result<eng::Shape> shape = read_shape(L, lua_gettop(L), fn, "row.shape");
    lua_pop(L, 1);
    if (!shape.ok()) return shape.status();
    out.shape = std::move(shape).value();
    push_field(L, 1, "spec");
    eng::PartitionSpec* spec = to_udata<eng::PartitionSpec>(L, -1);
    push_field(L, 1, "mesh");
    eng::Mesh* mesh = to_udata<eng::Mesh>(L, -1);
    if (spec && mesh) out.sharding = eng::NamedSharding{*mesh, *spec};
    lua_pop(L, 2);
    if (!spec || !mesh) return arg_error(L, 1, fn, "row", "a row of t:shardings() with spec and mesh");
    out.dtype = raw_string(L, 1, "dtype");
    out.label = raw_string(L, 1, "path");
    out.next = 2;
    return out;
  }
  if (lua_type(L, 1) != LUA_TTABLE)
    return arg_error(L, 1, fn, {}, "a row of t:shardings() or a shape {d0, d1, ...}");
  ENG_ASSIGN_OR_RETURN(out.shape, read_shape(L, 1, fn, "shape"));
  if (eng::NamedSharding* s = to_udata<eng::NamedSharding>(L, 2)) {
    out.sharding = *s;
    out.next = 3;
  } else if (eng::PartitionSpec* p = to_udata<eng::PartitionSpec>(L, 2)) {
    ENG_ASSIGN_OR_RETURN(eng::Mesh * mesh, arg_udata<eng::Mesh>(L, 3, fn, "mesh"));
    out.sharding = eng::NamedSharding{*mesh, *p};
    out.next = 4;
  } else {
    return arg_error(L, 2, fn, "sharding", "NamedSharding or PartitionSpec (then a Mesh)");
  }
  Status v = out.sharding.validate(out.shape);
  ENG_RETURN_IF_ERROR(with_context(fn, v));
  return out;
}

// The engine numbers dims 0-based (C++, JAX); Lua users name them 1-based, so the grid's header
// lines ("showing dims 0 (down) and 2 (across) ...", "dim 1 is sharded too ...") are renumbered.
std::string one_based_header(const std::string& grid) {
  static const std::regex kDim(R"((^showing dims? |^dim | and )(\d+))");
  std::string out;
  for (size_t pos = 0; pos < grid.size();) {
    const size_t nl = grid.find('\n', pos);
    const size_t end = nl == std::string::npos ? grid.size() : nl + 1;
    std::string line = grid.substr(pos, end - pos);
    pos = end;
    if (line.rfind("showing dim", 0) != 0 && line.rfind("dim ", 0) != 0) {
      out += line;
      continue;
    }
    auto last = line.cbegin();
    for (std::sregex_iterator it(line.begin(), line.end(), kDim), e; it != e; ++it) {
      out.append(last, (*it)[2].first);
      out += std::to_string(std::stoll((*it)[2].str()) + 1);
      last = (*it)[2].second;
    }
    out.append(last, line.cend());
  }
  return out;
}

// {dims={i, j}, color=true}: 1-based dims, as Lua numbers things ({1, 2}: the first two dims).
Result<std::string> render(lua_State* L, const ShapedSharding& x, int opts, std::string_view fn) {
  int dim0 = -1, dim1 = -1;  // 0-based for the engine; -1: its default
  bool color = context(L).color;
  if (!lua_isnoneornil(L, opts)) {
    ENG_RETURN_IF_ERROR(arg_table(L, opts, fn, "options"));
    static const std::vector<std::string> kAllowed = {"dims", "color"};
    ENG_RETURN_IF_ERROR(check_keys(L, opts, fn, kAllowed));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> c, field_bool(L, opts, "color", fn));
    if (c) color = *c;
    const int t = push_field(L, opts, "dims");
    if (t != LUA_TNIL) {
      const int d = lua_gettop(L);
      int ok0 = 0, ok1 = 1;
      lua_Integer i0 = 0, i1 = 0;
      const int n = t == LUA_TTABLE ? static_cast<int>(lua_rawlen(L, d)) : 0;
      if (n >= 1) {
        lua_rawgeti(L, d, 1);
        i0 = lua_tointegerx(L, -1, &ok0);
        lua_pop(L, 1);
      }
      if (n == 2) {
        lua_rawgeti(L, d, 2);
        i1 = lua_tointegerx(L, -1, &ok1);
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
      if (n < 1 || n > 2 || !ok0 || !ok1)
        return eng::invalid_argument("{}: option 'dims' expected {{i}} or {{i, j}} (1-based dims)", fn);
      const int rank = x.shape.rank();
      auto bad = [rank](lua_Integer i) { return i < 1 || i > rank; };
      if (bad(i0) || (n == 2 && bad(i1)))
        return eng::invalid_argument("{}: option 'dims' {{{}{}}} out of range for rank {} (dims are 1-based: 1 to {})",
                                     fn, i0, n == 2 ? fmt::format(", {}", i1) : "", rank, rank);
      dim0 = static_cast<int>(i0 - 1);
      if (n == 2) dim1 = static_cast<int>(i1 - 1);
    }
  }
  Result<std::string> grid = eng::visualize_sharding(x.shape, x.sharding, dim0, dim1, color);
  if (!grid.ok()) return with_context(fn, grid.status());
  std::string title = x.label.empty() ? "" : x.label + "  ";
  title += eng::typeof_string(x.dtype, x.shape, &x.sharding.spec, &x.sharding.mesh);
  return title + "\n" + one_based_header(*grid);
}

Result<int> visualize(lua_State* L) {
  constexpr std::string_view fn = "sl.visualize";
  ENG_ASSIGN_OR_RETURN(ShapedSharding x, read_shaped_sharding(L, fn));
  ENG_ASSIGN_OR_RETURN(std::string s, render(L, x, x.next, fn));
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

// sl.typeof's value (jax.typeof's ShapedArray): shape, dtype, ndim, size and the type's
// sharding (a NamedSharding whose spec drops size-1 mesh axes); prints as "f32[8@X,4@Y]".
// Equal to another type of the same text; `..` with a string concatenates its text.
Result<int> typeof_fn(lua_State* L) {
  constexpr std::string_view fn = "sl.typeof";
  ENG_ASSIGN_OR_RETURN(ShapedSharding x, read_shaped_sharding(L, fn));
  ShapedArrayType t{x.shape, x.dtype, x.sharding, "", {}};
  t.sharding.spec = eng::remove_size_one_mesh_axis(x.sharding.spec, x.sharding.mesh);
  // An Array's type names the mesh axes Explicit in scope only: the Auto axes' layout is the
  // compiler's (x.sharding has it), so on an Auto mesh the type's spec is all None, as JAX's.
  if (ArrayBox* a = to_udata<ArrayBox>(L, 1))
    t.sharding = eng::frontend::type_sharding_of(*a, t.sharding);
  t.text = eng::typeof_string(x.dtype, x.shape, &t.sharding.spec, &t.sharding.mesh);
  if (ArrayBox* a = to_udata<ArrayBox>(L, 1)) t.vma = eng::frontend::vma_of(*a);
  t.text += eng::frontend::vma_string(t.vma) + eng::frontend::unreduced_string(t.sharding);
  push_udata(L, std::move(t));
  return 1;
}

// A set of axis names (JAX's frozenset of a type's vma): a list whose == compares as sets.
Result<int> axis_set_eq(lua_State* L) {
  auto names = [&](int idx) {
    std::set<std::string> out;
    const lua_Integer n =
        lua_type(L, idx) == LUA_TTABLE ? static_cast<lua_Integer>(lua_rawlen(L, idx)) : 0;
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_rawgeti(L, idx, i);
      if (lua_type(L, -1) == LUA_TSTRING) out.insert(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
    return out;
  };
  lua_pushboolean(L, names(1) == names(2));
  return 1;
}
void push_axis_set(lua_State* L, const std::vector<std::string>& axes) {
  lua_createtable(L, static_cast<int>(axes.size()), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    lua_pushstring(L, axes[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  if (luaL_newmetatable(L, "AxisSet")) {
    lua_pushcfunction(L, lua_entry<axis_set_eq>);
    lua_setfield(L, -2, "__eq");
  }
  lua_setmetatable(L, -2);
}

Result<int> shaped_array_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ShapedArrayType * t, arg_udata<ShapedArrayType>(L, 1, "ShapedArray"));
  lua_pushstring(L, t->text.c_str());
  return 1;
}
Result<int> shaped_array_eq(lua_State* L) {
  auto *a = to_udata<ShapedArrayType>(L, 1), *b = to_udata<ShapedArrayType>(L, 2);
  lua_pushboolean(L, a && b && a->text == b->text);
  return 1;
}
// `"type: " .. sl.typeof(x)` (and the other order): the text, as print shows it.
Result<int> shaped_array_concat(lua_State* L) {
  std::string out;
  for (int i = 1; i <= 2; ++i) {
    if (ShapedArrayType* t = to_udata<ShapedArrayType>(L, i)) {
      out += t->text;
    } else if (lua_type(L, i) == LUA_TSTRING || lua_type(L, i) == LUA_TNUMBER) {
      out += lua_tostring(L, i);
    } else {
      return arg_error(L, i, "ShapedArray:__concat", {}, "a string or a number");
    }
  }
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}
Result<int> shaped_array_property(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ShapedArrayType * t, arg_udata<ShapedArrayType>(L, 1, "ShapedArray"));
  const std::string key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (key == "shape") {
    push_ints(L, t->shape.dims());
  } else if (key == "dtype") {
    Result<eng::DType> d = eng::parse_dtype(t->dtype_name);
    lua_pushstring(L, d.ok() ? std::string(eng::dtype_long_name(*d)).c_str() : t->dtype_name.c_str());
  } else if (key == "vma") {  // a set: equal to {'i'} however ordered
    push_axis_set(L, t->vma);
  } else if (key == "manual_axis_type" || key == "mat") {  // JAX's: .varying is the vma
    lua_createtable(L, 0, 1);
    push_axis_set(L, t->vma);
    lua_setfield(L, -2, "varying");
  } else if (key == "ndim") {
    lua_pushinteger(L, t->shape.rank());
  } else if (key == "size") {
    lua_pushinteger(L, t->shape.numel());
  } else if (key == "sharding") {
    push_udata(L, t->sharding);
  } else {
    lua_pushnil(L);
  }
  return 1;
}

// ---- Rows and tables ----------------------------------------------------------------------

// One dim's resolution as the row's `rules` field: {logical=, fired=, rule=, axes={...},
// skipped={{rule=, reason=}, ...}} (fired/rule nil when no rule settled the dim).
void push_resolution(lua_State* L, const eng::DimResolution& d,
                     const eng::LogicalAxisRules& rules) {
  lua_createtable(L, 0, 5);
  if (d.logical) set_string(L, "logical", *d.logical);
  if (d.fired >= 0) {
    set_int(L, "fired", d.fired + 1);
    set_string(L, "rule", rules[d.fired].to_string());
  }
  push_strings(L, d.axes);
  lua_setfield(L, -2, "axes");
  lua_createtable(L, static_cast<int>(d.skipped.size()), 0);
  for (size_t i = 0; i < d.skipped.size(); ++i) {
    lua_createtable(L, 0, 3);
    set_int(L, "rule", d.skipped[i].rule + 1);
    set_string(L, "text", rules[d.skipped[i].rule].to_string());
    set_string(L, "reason", d.skipped[i].reason);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setfield(L, -2, "skipped");
}

void push_row(lua_State* L, const eng::ShardingRow& r, const eng::Mesh& mesh,
              const std::vector<eng::DimResolution>* why = nullptr,
              const eng::LogicalAxisRules* rules = nullptr) {
  lua_createtable(L, 0, 13);
  set_string(L, "path", r.path);
  set_string(L, "role", r.role);
  set_string(L, "dtype", std::string(eng::dtype_name(r.dtype)));
  push_ints(L, r.shape.dims());
  lua_setfield(L, -2, "shape");
  set_string(L, "type", r.type);
  set_string(L, "logical", r.logical_string());
  push_udata(L, r.spec);
  lua_setfield(L, -2, "spec");
  set_string(L, "physical", r.physical_string());
  push_ints(L, r.local_shape.dims());
  lua_setfield(L, -2, "local_shape");
  set_int(L, "bytes", r.bytes_per_device);
  push_udata(L, mesh);
  lua_setfield(L, -2, "mesh");
  if (why != nullptr && rules != nullptr) {
    lua_createtable(L, static_cast<int>(why->size()), 0);
    for (size_t i = 0; i < why->size(); ++i) {
      push_resolution(L, (*why)[i], *rules);
      lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
    }
    lua_setfield(L, -2, "rules");
  }
  luaL_setmetatable(L, kRowType);
}

// A row prints as its MaxText debug_sharding block.
Result<int> row_tostring(lua_State* L) {
  if (lua_type(L, 1) != LUA_TTABLE) return arg_error(L, 1, "ShardingRow:__tostring", "", "ShardingRow");
  push_field(L, 1, "spec");
  eng::PartitionSpec* spec = to_udata<eng::PartitionSpec>(L, -1);
  std::string spec_text = spec ? spec->to_string() : "?";
  lua_pop(L, 1);
  push_field(L, 1, "bytes");
  const int64_t bytes = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
  lua_pop(L, 1);
  std::vector<std::string> local;
  if (push_field(L, 1, "local_shape") == LUA_TTABLE) {
    for (lua_Integer i = 1; lua_rawgeti(L, -1, i) == LUA_TNUMBER; ++i) {
      local.push_back(std::to_string(lua_tointeger(L, -1)));
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_pushstring(L, fmt::format("{}\n    Shape:     {}\n    Logical:   {}\n    Physical:  {}  {}\n"
                                "    Local:     ({}) per device, {} bytes",
                                raw_string(L, 1, "path"), raw_string(L, 1, "type"),
                                raw_string(L, 1, "logical"), raw_string(L, 1, "physical"),
                                spec_text, fmt::join(local, ", "), bytes)
                        .c_str());
  return 1;
}

Result<ShardingView*> arg_view(lua_State* L, std::string_view fn) {
  return arg_udata<ShardingView>(L, 1, fn);
}
Result<eng::ShardingTable*> arg_table_udata(lua_State* L, std::string_view fn) {
  ENG_ASSIGN_OR_RETURN(ShardingView * v, arg_view(L, fn));
  return &v->table;
}
void push_view_row(lua_State* L, const ShardingView& v, size_t i) {
  if (v.why.empty()) push_row(L, v.table.rows[i], v.table.mesh);
  else push_row(L, v.table.rows[i], v.table.mesh, &v.why[i], &v.rules);
}

Result<int> table_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ShardingView * v, arg_view(L, "ShardingTable:__tostring"));
  const std::string s = v->to_string();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}
Result<int> table_len(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::ShardingTable * t, arg_table_udata(L, "ShardingTable:__len"));
  lua_pushinteger(L, static_cast<lua_Integer>(t->rows.size()));
  return 1;
}
// rows[i] (1-based) is a row table; other keys are nil.
Result<int> table_property(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ShardingView * v, arg_view(L, "ShardingTable"));
  int ok = 0;
  lua_Integer i = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &ok) : 0;
  if (ok && i >= 1 && i <= static_cast<lua_Integer>(v->table.rows.size()))
    push_view_row(L, *v, static_cast<size_t>(i - 1));
  else
    lua_pushnil(L);
  return 1;
}
Result<int> table_dump(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::ShardingTable * t, arg_table_udata(L, "ShardingTable:dump"));
  lua_pushstring(L, t->debug_string().c_str());
  return 1;
}
Result<int> table_find(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(ShardingView * v, arg_view(L, "ShardingTable:find"));
  ENG_ASSIGN_OR_RETURN(std::string path, arg_string(L, 2, "ShardingTable:find", "path"));
  if (const eng::ShardingRow* r = v->table.find(path))
    push_view_row(L, *v, static_cast<size_t>(r - v->table.rows.data()));
  else
    lua_pushnil(L);
  return 1;
}
Result<int> table_bytes(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::ShardingTable * t, arg_table_udata(L, "ShardingTable:bytes"));
  lua_pushinteger(L, t->bytes_per_device());
  return 1;
}

// ---- Audit -------------------------------------------------------------------------------

void push_report(lua_State* L, const eng::ReplicationReport& r) {
  lua_createtable(L, 0, 8);
  lua_pushboolean(L, r.exceeds);
  lua_setfield(L, -2, "exceeds");
  lua_pushnumber(L, r.fraction);
  lua_setfield(L, -2, "fraction");
  lua_pushnumber(L, r.tolerance);
  lua_setfield(L, -2, "tolerance");
  set_int(L, "unsharded_elements", r.unsharded_elements);
  set_int(L, "total_elements", r.total_elements);
  push_strings(L, r.target_axes);
  lua_setfield(L, -2, "target_axes");
  lua_createtable(L, static_cast<int>(r.offenders.size()), 0);
  for (size_t i = 0; i < r.offenders.size(); ++i) {
    const auto& o = r.offenders[i];
    lua_createtable(L, 0, 5);
    set_string(L, "path", o.path);
    set_int(L, "size", o.size);
    push_ints(L, o.shape.dims());
    lua_setfield(L, -2, "shape");
    set_string(L, "spec", o.spec);
    push_strings(L, o.unsharded_axes);
    lua_setfield(L, -2, "unsharded_axes");
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setfield(L, -2, "offenders");
  set_string(L, "summary", r.to_string());
  luaL_setmetatable(L, kAuditType);
}

Result<int> audit_tostring(lua_State* L) {
  if (lua_type(L, 1) != LUA_TTABLE) return arg_error(L, 1, "AuditReport:__tostring", "", "AuditReport");
  lua_pushstring(L, raw_string(L, 1, "summary").c_str());
  return 1;
}

constexpr Function kShardingFunctions[] = {
    {"rules", lua_entry<rules>, "sl.rules([overrides [, {replace=false}]]) -> LogicalAxisRules",
     "MaxText's logical_axis_rules (base.yml, 76 rules in priority order) as a list of\n"
     "  {logical, {mesh axes}}; prints in base.yml's form. With `overrides` ({{\"embed\", {\"fsdp\"}}, ...})\n"
     "  they are merged as MaxText merges logical_axis_rules: every default rule of a name that\n"
     "  appears in the overrides is removed and the overrides are appended (replace=true: the\n"
     "  overrides alone, MaxText's override_logical_axis_rules)."},
    {"logical_to_mesh", lua_entry<logical_to_mesh>,
     "sl.logical_to_mesh(names, mesh [, rules]) -> PartitionSpec",
     "MaxText's sharding.logical_to_mesh_axes: resolves per-dim logical names ({\"embed\", \"mlp\"};\n"
     "  false for None) by the rules (first applicable rule wins, partly conflicting rules skipped),\n"
     "  then drops size-1 mesh axes. `rules`: a sl.rules() list as is, or a plain list of\n"
     "  overrides merged into the defaults. Example on fsdp=4, tensor=2:\n"
     "  sl.logical_to_mesh({\"embed\", \"mlp\"}, m) prints P('fsdp', 'tensor')"},
    {"NamedSharding", lua_entry<named_sharding>, "sl.NamedSharding(mesh, spec) -> NamedSharding",
     "A mesh and a PartitionSpec together (jax.sharding.NamedSharding); prints JAX's form.\n"
     "  Fields: s.mesh, s.spec."},
    {"visualize", lua_entry<visualize>,
     "sl.visualize(row | shape, sharding | shape, spec, mesh [, {dims={i, j}, color=bool}]) -> string",
     "The device grid of one array, like jax.debug.visualize_array_sharding: one cell per\n"
     "  distinct block, labelled with the devices holding it (\"CPU 0,4\": replicas share a cell).\n"
     "  Takes a row of t:shardings(), or a shape {d0, ...} with a NamedSharding, or with a\n"
     "  PartitionSpec and a Mesh. Any rank: dims={i, j} (1-based: {1, 2} are the first two) picks the\n"
     "  shown dims (default: the sharded ones); color defaults to the terminal's. Returns the text (the REPL prints it)."},
    {"typeof", lua_entry<typeof_fn>, "sl.typeof(x | row | shape, sharding | shape, spec, mesh) -> ShapedArray",
     "jax.typeof: the type, printed with the sharding in it: \"f32[256@fsdp,704@tensor]\"\n"
     "  (size-1 axes dropped); .shape, .dtype, .sharding (.sharding.spec), tostring() for the text."},
};

constexpr const char* kNamedShardingProperties[] = {"mesh", "spec"};
constexpr const char* kShapedArrayProperties[] = {"shape", "dtype",    "ndim", "size",
                                                  "sharding", "vma", "manual_axis_type"};

constexpr Method kTableMethods[] = {
    {"dump", lua_entry<table_dump>, "tab:dump() -> string",
     "MaxText's debug_sharding dump: the non-trivial mesh axes, then per array its path and\n"
     "  Shape (jax.typeof), Logical and Physical lines."},
    {"find", lua_entry<table_find>, "tab:find(path) -> row | nil", "The row of one array by its path."},
    {"bytes", lua_entry<table_bytes>, "tab:bytes() -> integer",
     "Bytes per device of all listed arrays."},
};

}  // namespace

Result<std::string> render_sharding(lua_State* L, const ShapedSharding& x, int opts,
                                    std::string_view fn) {
  return render(L, x, opts, fn);
}

void push_audit_report(lua_State* L, const eng::ReplicationReport& r) { push_report(L, r); }

void push_sharding_table(lua_State* L, eng::ShardingTable table) {
  push_udata(L, ShardingView{std::move(table), {}, {}, false});
}

void push_sharding_table(lua_State* L, eng::ShardingTable table, const eng::LogicalAxisRules& rules,
                         bool show_skipped) {
  push_udata(L, eng::ShardingTableView::explained(std::move(table), rules, show_skipped));
}

Result<int> push_trainer_sharding_table(lua_State* L, eng::ShardingTable table,
                                        const eng::Config& config, int opts_idx,
                                        std::string_view fn) {
  bool skipped = false;
  if (!lua_isnoneornil(L, opts_idx)) {
    if (lua_type(L, opts_idx) != LUA_TTABLE)
      return arg_error(L, opts_idx, fn, "options", "a table {skipped = true}");
    static const std::string kAllowed[] = {"skipped"};
    ENG_RETURN_IF_ERROR(check_keys(L, opts_idx, fn, kAllowed));
    ENG_ASSIGN_OR_RETURN(std::optional<bool> s, field_bool(L, opts_idx, "skipped", fn));
    skipped = s.value_or(false);
  }
  Result<eng::CompileOptions> o = eng::compile_options_from_config(config);
  if (!o.ok()) return with_context(fn, o.status());
  push_sharding_table(L, std::move(table), o->rules, skipped);
  return 1;
}

Result<eng::LogicalAxisRules> rules_from_table(lua_State* L, int idx, std::string_view fn) {
  return read_rules(L, idx, fn, "logical_axis_rules");
}

void open_lua_sharding(lua_State* L, int sl) {
  define_type(L, {"NamedSharding", "A mesh with a PartitionSpec (jax.sharding.NamedSharding).",
                  lua_entry<sharding_tostring>, lua_entry<sharding_eq>,
                  udata_gc<eng::NamedSharding>, {},
                  lua_entry<sharding_property>, kNamedShardingProperties});
  define_type(L, {"ShapedArray",
                  "An array's type (jax.typeof): shape, dtype, ndim, size, sharding (a\n"
                  "  NamedSharding; size-1 mesh axes dropped from its spec); inside sl.shard_map\n"
                  "  .vma (also .manual_axis_type.varying: a set of axis names). Prints as\n"
                  "  f32[8@X,4@Y], f32[3]{V:i};\n"
                  "  `..` concatenates that text; tostring() gives it as a string.",
                  lua_entry<shaped_array_tostring>, lua_entry<shaped_array_eq>,
                  udata_gc<ShapedArrayType>, {}, lua_entry<shaped_array_property>,
                  kShapedArrayProperties});
  luaL_getmetatable(L, "ShapedArray");
  lua_pushcfunction(L, lua_entry<shaped_array_concat>);
  lua_setfield(L, -2, "__concat");
  lua_pop(L, 1);
  define_type(L, {"ShardingTable",
                  "The arrays of a trainer's state and how each is split: rows[i] (path, role, dtype,\n"
                  "  shape, type, logical, spec, physical, local_shape, bytes, mesh); #rows; ipairs.\n"
                  "  Prints one aligned line per array.",
                  lua_entry<table_tostring>, nullptr, udata_gc<ShardingView>, kTableMethods,
                  lua_entry<table_property>});
  luaL_getmetatable(L, "ShardingTable");
  lua_pushcfunction(L, lua_entry<table_len>);
  lua_setfield(L, -2, "__len");
  lua_pop(L, 1);
  define_type(L, {kRowType,
                  "One array of t:shardings(): path, role, dtype, shape, type (jax.typeof form),\n"
                  "  logical, spec (PartitionSpec), physical, local_shape, bytes (per device), mesh.",
                  lua_entry<row_tostring>, nullptr, nullptr, {}});
  define_type(L, {kRulesType, "A logical_axis_rules list: {logical, {mesh axes}} per rule, priority order.",
                  lua_entry<rules_tostring>, nullptr, nullptr, {}});
  define_type(L, {kRuleType, "One logical axis rule: {logical, {mesh axes}}.",
                  lua_entry<rule_tostring>, nullptr, nullptr, {}});
  define_type(L, {kAuditType,
                  "MaxText's assert_params_sufficiently_sharded as a report: exceeds, fraction,\n"
                  "  tolerance, target_axes, offenders ({path, size, shape, spec, unsharded_axes},\n"
                  "  largest first), summary.",
                  lua_entry<audit_tostring>, nullptr, nullptr, {}});
  add_functions(L, sl, "sl", kShardingFunctions);
}

}  // namespace shell
