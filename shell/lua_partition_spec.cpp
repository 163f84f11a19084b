// shell/lua_partition_spec.cpp: Lua bindings for partition specs: sl.P and PartitionSpec.
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

Result<int> partition_spec(lua_State* L) {
  std::vector<eng::PartitionSpec::DimAxes> dims;
  for (int i = 1; i <= lua_gettop(L); ++i) {
    ENG_ASSIGN_OR_RETURN(eng::PartitionSpec::DimAxes d, spec_entry(L, i));
    dims.push_back(std::move(d));
  }
  push_udata(L, eng::PartitionSpec(std::move(dims)));
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
     "  Example: sl.P(\"fsdp\", nil, {\"data\", \"tensor\"}) prints P('fsdp', None, ('data', 'tensor'))"},
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
