// shell/lua_jit.h: the Jitted userdata shared by shell/lua_jit.cpp (tracing, caching and
// calling transformed functions) and shell/lua_jit_api.cpp (sl.jit, sl.grad, sl.vmap, ...:
// the constructors that read their options). Internal to the shell.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/frontend/trace.h"
#include "shell/lua_binding.h"
#include "shell/lua_jit_tree.h"

namespace shell {

namespace fe = eng::frontend;

enum class Transform : uint8_t { kNone, kGrad, kValueAndGrad, kVmap };

// One compiled signature of a jitted function.
struct JitEntry {
  std::shared_ptr<fe::Compiled> compiled;
  std::vector<Tree> out_tree;  // per Lua return value: its structure over the results
};

struct JitBox {
  std::string name;  // the Lua function's name, or "fn"
  std::vector<std::optional<eng::PartitionSpec>> in_specs;
  std::vector<std::optional<eng::PartitionSpec>> out_specs;
  std::set<int> static_argnums;  // 0-based, as JAX's (negative: from the end)
  std::set<int> donate_argnums;  // jax.jit's donate_argnums
  Transform transform = Transform::kNone;
  std::vector<int> argnums = {0};              // grad: which inputs (0-based)
  bool has_aux = false;                        // grad: f returns (loss, aux)
  std::vector<std::optional<int>> in_axes;     // vmap: per argument (nullopt: not mapped)
  std::optional<eng::ShardMode> mode;          // sl.auto_axes / sl.explicit_axes: the mode inside
  std::vector<std::string> mode_axes;          // ... the axes they name (empty: all)
  std::map<std::string, JitEntry> cache;       // signature -> compiled
  std::vector<std::vector<std::string>> seen;  // per compile, in order: its arg types
  std::string last_miss;             // the last miss's explanation
  std::set<std::string> hit_logged;  // signatures whose first hit has a row
  bool manual = false;  // sl.shard_map: f sees per-device blocks (of in_specs) on `mesh`
  eng::Mesh mesh;
};
template <>
struct LuaType<JitBox> {
  static constexpr const char* kName = "Jitted";
};

// What f:lower(...) returns: the traced and compiled program of one signature.
struct LoweredBox {
  std::shared_ptr<fe::Compiled> compiled;
};
template <>
struct LuaType<LoweredBox> {
  static constexpr const char* kName = "Lowered";
};

// Defines the Jitted type (callable; :lower, :cache_info) and the Lowered type.
void define_jit_types(lua_State* L);

}  // namespace shell
