// shell/lua_types.h: the LuaType<> names of engine value types shared by several binding files.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/train/trainer.h"
#include "engine/compile/predict.h"
#include "engine/mesh/mesh.h"
#include "engine/model/pipeline_schedule.h"
#include "engine/sharding/partition_spec.h"
#include "engine/train/config.h"
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
template <>
struct LuaType<eng::NamedSharding> {
  static constexpr const char* kName = "NamedSharding";
};

// The PartitionSpec at idx, or a NamedSharding's spec: JAX takes either where a spec is read
// (reshard, with_sharding_constraint, out_sharding, in/out_shardings, in/out_specs); its mesh is
// not read. nullptr for anything else.
inline eng::PartitionSpec* spec_at(lua_State* L, int idx) {
  if (auto* p = to_udata<eng::PartitionSpec>(L, idx)) return p;
  if (auto* s = to_udata<eng::NamedSharding>(L, idx)) return &s->spec;
  return nullptr;
}
// spec_at or an error naming the argument.
inline Result<eng::PartitionSpec*> arg_spec(lua_State* L, int idx, std::string_view fn,
                                            std::string_view name) {
  if (eng::PartitionSpec* p = spec_at(L, idx)) return p;
  return arg_error(L, idx, fn, name, "PartitionSpec (sl.P(...)) or NamedSharding");
}

// "Mesh('data': 2, 'fsdp': 2) (4 devices)": the axes of size > 1 only ("Mesh(1 device)" for none).
std::string mesh_label(const eng::Mesh& m);

template <>
struct LuaType<eng::Config> {
  static constexpr const char* kName = "Config";
};

// A compiled train_step (t:compile() makes it, lua_compiled.cpp binds it).
struct CompiledBox {
  std::shared_ptr<const eng::Executable> exe;
  std::string fn_name;  // "train_step"
  eng::CompileInfo cache;  // the cache lookup that produced exe (key, outcome, level, reason)
  std::optional<eng::PipelineShape> pipeline = std::nullopt;  // c:pipeline() (lua_pipeline.h)
  std::optional<eng::Prediction> predicted = std::nullopt;    // sl.plan's c.predicted
};
template <>
struct LuaType<CompiledBox> {
  static constexpr const char* kName = "Compiled";
};

}  // namespace shell
