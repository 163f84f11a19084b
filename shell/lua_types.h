// shell/lua_types.h: the LuaType<> names of engine value types shared by several binding files.
#pragma once

#include "engine/mesh/mesh.h"
#include "engine/sharding/partition_spec.h"
#include "shell/lua_binding.h"

namespace shell {

template <>
struct LuaType<eng::Mesh> {
  static constexpr const char* kName = "Mesh";
};
template <>
struct LuaType<eng::PartitionSpec> {
  static constexpr const char* kName = "PartitionSpec";
};

}  // namespace shell
