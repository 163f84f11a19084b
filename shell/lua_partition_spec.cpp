// shell/lua_partition_spec.cpp: Lua bindings for partition specs: sl.P and PartitionSpec.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/sharding/partition_spec.h"
#include "shell/bindings.h"
#include "shell/lua_binding.h"
#include "shell/lua_types.h"

namespace shell {
namespace {

// One sl.P argument: nil -> None, "axis", or {"a", "b"} -> ('a', 'b').
Result<eng::PartitionSpec::DimAxes> spec_entry(lua_State* L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL: return eng::PartitionSpec::DimAxes{};
    case LUA_TSTRING: return eng::PartitionSpec::DimAxes{lua_tostring(L, idx)};
    case LUA_TTABLE: return arg_string_list(L, idx, "sl.P");
    default: return arg_error(L, idx, "sl.P", {}, "string, table of strings or nil");
  }
}

// JAX's keyword argument `unreduced={'Y'}` as a trailing table {unreduced = {"Y"}}: the axes
// along which each device holds a summand of the value (a set: order does not matter).
Result<std::vector<std::string>> spec_unreduced(lua_State* L, int idx) {
  static const std::vector<std::string> kKeys = {"unreduced"};
  ENG_RETURN_IF_ERROR(check_keys(L, idx, "sl.P", kKeys));
  const int t = push_field(L, idx, "unreduced");
  Result<std::vector<std::string>> axes =
      t == LUA_TSTRING ? Result<std::vector<std::string>>(std::vector<std::string>{lua_tostring(L, -1)})
                       : arg_string_list(L, lua_gettop(L), "sl.P", "unreduced");
  lua_pop(L, 1);
  if (!axes.ok()) return axes.status();
  std::sort(axes->begin(), axes->end());
  if (std::adjacent_find(axes->begin(), axes->end()) != axes->end())
    return eng::invalid_argument("sl.P: unreduced names axis '{}' twice",
                                 *std::adjacent_find(axes->begin(), axes->end()));
  return axes;
}

Result<int> partition_spec(lua_State* L) {
  std::vector<eng::PartitionSpec::DimAxes> dims;
  std::vector<std::string> unreduced;
  int n = lua_gettop(L);
  bool keywords = false;  // a last table with no list part and an `unreduced` key
  if (n >= 1 && lua_type(L, n) == LUA_TTABLE && lua_rawlen(L, n) == 0) {
    lua_pushstring(L, "unreduced");  // raw: never a user's __index (lua_binding.h)
    keywords = lua_rawget(L, n) != LUA_TNIL;
    lua_pop(L, 1);
  }
  if (keywords) {
    ENG_ASSIGN_OR_RETURN(unreduced, spec_unreduced(L, n));
    --n;
  }
  for (int i = 1; i <= n; ++i) {
    ENG_ASSIGN_OR_RETURN(eng::PartitionSpec::DimAxes d, spec_entry(L, i));
    dims.push_back(std::move(d));
  }
  push_udata(L, eng::PartitionSpec(std::move(dims), std::move(unreduced)));
  return 1;
}


Result<int> spec_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::PartitionSpec * p,
                       arg_udata<eng::PartitionSpec>(L, 1, "PartitionSpec:__tostring"));
  lua_pushstring(L, p->to_string().c_str());
  return 1;
}
Result<int> spec_eq(lua_State* L) {
  auto *a = to_udata<eng::PartitionSpec>(L, 1), *b = to_udata<eng::PartitionSpec>(L, 2);
  lua_pushboolean(L, a && b && *a == *b);
  return 1;
}
Result<int> spec_rank(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::PartitionSpec * p, arg_udata<eng::PartitionSpec>(L, 1, "PartitionSpec:rank"));
  lua_pushinteger(L, p->rank());
  return 1;
}
Result<int> spec_dims(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::PartitionSpec * p, arg_udata<eng::PartitionSpec>(L, 1, "PartitionSpec:dims"));
  lua_createtable(L, p->rank(), 0);
  for (int i = 0; i < p->rank(); ++i) {
    push_strings(L, p->dim(i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

constexpr Function kSpecFunctions[] = {
    {"P", lua_entry<partition_spec>, "sl.P(dim, ...) -> PartitionSpec",
     "A PartitionSpec, one argument per tensor dim: nil (None, replicated), \"axis\", or a\n"
     "  table {\"data\", \"tensor\"} (split over several axes, major first).\n"
     "  Example: sl.P(\"fsdp\", nil, {\"data\", \"tensor\"}) prints P('fsdp', None, ('data', 'tensor')).\n"
     "  A trailing {unreduced = {\"Y\"}} is JAX's unreduced={'Y'}: each device holds a summand\n"
     "  along Y (sl.device_put places the value on Y's first member, zeros on the others);\n"
     "  sl.reshard to a spec without it sums them (an all-reduce)."},
};

constexpr Method kSpecMethods[] = {
    {"rank", lua_entry<spec_rank>, "p:rank() -> integer", "Number of dims the spec names."},
    {"dims", lua_entry<spec_dims>, "p:dims() -> {{string}}",
     "Mesh axes per dim ({} for None)."},
};

}  // namespace

void open_lua_partition_spec(lua_State* L, int sl) {
  define_type(L, {"PartitionSpec", "How each tensor dim maps to mesh axes; prints P(...) like JAX.",
                  lua_entry<spec_tostring>, lua_entry<spec_eq>, udata_gc<eng::PartitionSpec>,
                  kSpecMethods});
  add_functions(L, sl, "sl", kSpecFunctions);
}

}  // namespace shell
