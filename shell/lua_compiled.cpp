// shell/lua_compiled.cpp: Lua bindings for a compiled train_step (what t:compile() returns): Compiled.
#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/compile/hlo_text.h"
#include "shell/bindings.h"
#include "shell/lua_binding.h"
#include "shell/lua_pipeline.h"
#include "shell/lua_types.h"
#include "shell/pretty.h"

namespace shell {
namespace {

Result<CompiledBox*> arg_compiled(lua_State* L, std::string_view fn) {
  return arg_udata<CompiledBox>(L, 1, fn);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.{}f} {}", b, u == 0 ? 0 : 2, units[u]);
}

Result<int> compiled_tostring(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(CompiledBox * c, arg_compiled(L, "Compiled:__tostring"));
  const eng::MemoryAnalysis& m = c->exe->memory();
  lua_pushstring(L, fmt::format("Compiled({}: {} instructions, {}, peak {} per device, {:.3g} GFLOP per device)",
                                c->fn_name, c->exe->program().instrs().size(), mesh_label(c->exe->mesh()),
                                human_bytes(static_cast<double>(m.peak_bytes())),
                                c->exe->cost().flops / 1e9)
                        .c_str());
  return 1;
}

Result<int> compiled_hlo_text(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(CompiledBox * c, arg_compiled(L, "Compiled:as_text"));
  lua_pushstring(L, eng::hlo_text(c->exe->program(), c->exe->mesh()).c_str());
  return 1;
}

Result<int> compiled_text(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(CompiledBox * c, arg_compiled(L, "Compiled:text"));
  lua_pushstring(L, c->exe->program().to_text().c_str());
  return 1;
}


// The decoder layer a value belongs to: its remat region, else the layer of the nearest
// parameter it is computed from (breadth-first over producers, a bounded search); "" if none.
std::string layer_of(const eng::Program& p, eng::ValueId v) {
  if (p.value(v).remat_scope >= 0) return fmt::format("layers_{}", p.value(v).remat_scope);
  std::vector<eng::ValueId> queue = {v};
  std::set<eng::ValueId> seen = {v};
  for (size_t i = 0; i < queue.size() && i < 256; ++i) {
    const eng::ValueInfo& info = p.value(queue[i]);
    if (info.producer >= 0) {  // scanned layers: a stacked weight's slice, a stacked gradient
      const eng::Instr& in = p.instrs()[static_cast<size_t>(info.producer)];
      if (in.kind == eng::OpKind::kAddIndexInDim) return "layers";
      if (in.kind == eng::OpKind::kIndexInDim &&
          p.value(in.inputs[0]).name.find("/layers/") != std::string::npos)
        return fmt::format("layers_{}", in.attrs.start);
    }
    if (info.producer < 0) {
      const size_t at = info.name.find("/layers_");
      if (at != std::string::npos) return info.name.substr(at + 1, info.name.find('/', at + 1) - at - 1);
      continue;
    }
    for (eng::ValueId in : p.instrs()[static_cast<size_t>(info.producer)].inputs)
      if (seen.insert(in).second) queue.push_back(in);
  }
  return "";
}

Result<int> compiled_temps(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(CompiledBox * c, arg_compiled(L, "Compiled:temps"));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> n, opt_int(L, 2, "Compiled:temps", "n"));
  if (n && *n < 0) return eng::invalid_argument("Compiled:temps: n must be >= 0, got {}", *n);
  const eng::Program& p = c->exe->program();
  std::vector<eng::TempInfo> temps = c->exe->largest_temps(
      static_cast<int>(std::min<int64_t>(n.value_or(10), std::numeric_limits<int>::max())));
  lua_createtable(L, static_cast<int>(temps.size()), 0);
  for (size_t i = 0; i < temps.size(); ++i) {
    const eng::TempInfo& t = temps[i];
    const eng::ValueInfo& v = p.value(t.value);
    lua_createtable(L, 0, 9);
    std::string name = eng::value_name(t.value);
    if (!v.checkpoint_name.empty()) name += " (" + v.checkpoint_name + ")";
    lua_pushstring(L, name.c_str());
    lua_setfield(L, -2, "name");
    lua_pushstring(L, v.type_string().c_str());
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, t.bytes);
    lua_setfield(L, -2, "bytes");
    lua_pushstring(L, human_bytes(static_cast<double>(t.bytes)).c_str());
    lua_setfield(L, -2, "size");
    lua_pushstring(L, eng::producer_description(p, t.value).c_str());  // "rmsnorm (remat)"
    lua_setfield(L, -2, "op");
    lua_pushinteger(L, t.first_instr);
    lua_setfield(L, -2, "first");
    lua_pushinteger(L, t.last_instr);
    lua_setfield(L, -2, "last");
    lua_pushstring(L, layer_of(p, t.value).c_str());
    lua_setfield(L, -2, "layer");
    lua_pushinteger(L, t.offset);
    lua_setfield(L, -2, "offset");
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  static const std::vector<std::string> kColumns = {"name", "type", "size", "bytes", "first",
                                                    "last", "op", "layer", "offset"};
  set_rows_metatable(L, -1, kColumns);
  return 1;
}

void push_memory(lua_State* L, const eng::MemoryAnalysis& m) {
  lua_createtable(L, 0, 6);
  auto put = [&](const char* k, int64_t v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
  };
  put("argument_bytes", m.argument_bytes);
  put("output_bytes", m.output_bytes);
  put("temp_bytes", m.temp_bytes);
  put("alias_bytes", m.alias_bytes);
  put("host_temp_bytes", m.host_temp_bytes);
  put("peak_bytes", m.peak_bytes());
  lua_pushstring(L, m.to_string().c_str());
  lua_setfield(L, -2, "summary");
}

void push_cost(lua_State* L, const eng::Executable& exe) {
  const eng::CostAnalysis& c = exe.cost();
  lua_createtable(L, 0, 4);
  lua_pushnumber(L, c.flops);
  lua_setfield(L, -2, "flops");
  lua_pushnumber(L, c.bytes_accessed);
  lua_setfield(L, -2, "bytes_accessed");
  lua_createtable(L, 0, static_cast<int>(c.collective_bytes.size()));
  for (const auto& [axis, bytes] : c.collective_bytes) {
    lua_pushnumber(L, bytes);
    lua_setfield(L, -2, axis.c_str());
  }
  lua_setfield(L, -2, "collective_bytes");
  push_collective_rows(L, exe.program());  // lua_pipeline.h
  lua_setfield(L, -2, "collectives");
}

// {outcome = "hit"|"miss", level = "tracing"|"executable"|"persistent", reason = <kind>,
//  explanation = <JAX's text>, key = "jit_train_step-<hex>", compile_s = <s>}
void push_cache_info(lua_State* L, const eng::CompileInfo& c) {
  lua_createtable(L, 0, 6);
  lua_pushstring(L, c.outcome.c_str());
  lua_setfield(L, -2, "outcome");
  lua_pushstring(L, c.level.c_str());
  lua_setfield(L, -2, "level");
  lua_pushstring(L, c.reason_kind.c_str());
  lua_setfield(L, -2, "reason");
  lua_pushstring(L, c.reason_text.c_str());
  lua_setfield(L, -2, "explanation");
  lua_pushstring(L, c.key_name.c_str());
  lua_setfield(L, -2, "key");
  lua_pushnumber(L, c.compile_s);
  lua_setfield(L, -2, "compile_s");
}

// c.predicted: a table of the prediction's fields that prints as its table.
int prediction_tostring(lua_State* L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  return 1;
}

void push_prediction(lua_State* L, const eng::Prediction& p) {
  lua_createtable(L, 0, 16);
  auto num = [&](const char* k, double v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
  };
  lua_pushstring(L, p.topology.c_str());
  lua_setfield(L, -2, "topology");
  lua_pushinteger(L, p.num_slices);
  lua_setfield(L, -2, "num_slices");
  num("step_time_s", p.step_time_s);
  num("tflops_per_device", p.tflops_per_device);
  num("tflops_per_s_per_device", p.tflops_per_s_per_device);
  num("tokens_per_s_per_device", p.tokens_per_s_per_device);
  num("mfu", p.mfu);
  num("mxu_flops_per_s", p.mxu_flops_per_s);                // the matrix unit's rate used
  num("mxu_sustained_fraction", p.mxu_sustained_fraction);  // 0: at peak (none measured)
  lua_pushboolean(L, p.fits);
  lua_setfield(L, -2, "fits");
  lua_pushinteger(L, p.peak_bytes);
  lua_setfield(L, -2, "peak_bytes");
  lua_pushinteger(L, p.hbm_bytes);
  lua_setfield(L, -2, "hbm_bytes");
  lua_pushinteger(L, p.hbm_bytes - p.peak_bytes);  // negative when it does not fit
  lua_setfield(L, -2, "headroom_bytes");
  lua_pushstring(L, p.bound.c_str());
  lua_setfield(L, -2, "bound");
  num("compute_s", p.compute_s);
  num("collective_s", p.collective_s);
  num("exposed_collective_s", p.exposed_collective_s);
  lua_pushinteger(L, p.host_temp_bytes);
  lua_setfield(L, -2, "host_temp_bytes");
  lua_createtable(L, 0, 4);  // host offload's moves (count 0: none)
  num("seconds", p.host_transfers.seconds);
  num("exposed_seconds", p.host_transfers.exposed_seconds);
  num("bytes", p.host_transfers.bytes);
  lua_pushinteger(L, p.host_transfers.count);
  lua_setfield(L, -2, "count");
  lua_setfield(L, -2, "host_transfers");
  lua_createtable(L, 0, static_cast<int>(p.compute.size()));  // breakdown.compute[class]
  lua_createtable(L, 0, static_cast<int>(p.compute.size()));
  for (const eng::PredictedCompute& c : p.compute) {
    lua_createtable(L, 0, 4);
    num("seconds", c.seconds);
    num("flops", c.flops);
    num("bytes", c.bytes);
    lua_pushinteger(L, c.count);
    lua_setfield(L, -2, "count");
    lua_setfield(L, -2, c.op_class.c_str());
  }
  lua_setfield(L, -2, "compute");
  lua_createtable(L, 0, static_cast<int>(p.collectives.size()));
  for (const eng::PredictedCollectives& c : p.collectives) {
    lua_createtable(L, 0, 4);
    num("seconds", c.seconds);
    num("exposed_seconds", c.exposed_seconds);
    num("bytes", c.bytes);
    lua_pushinteger(L, c.count);
    lua_setfield(L, -2, "count");
    lua_setfield(L, -2, c.axes.c_str());
  }
  lua_setfield(L, -2, "collectives");
  lua_setfield(L, -2, "breakdown");
  lua_createtable(L, 0, 1);
  lua_pushstring(L, p.to_table().c_str());
  lua_pushcclosure(L, prediction_tostring, 1);
  lua_setfield(L, -2, "__tostring");
  lua_setmetatable(L, -2);
}

Result<int> compiled_property(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(CompiledBox * c, arg_compiled(L, "Compiled"));
  std::string key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (key == "memory") push_memory(L, c->exe->memory());
  else if (key == "cost") push_cost(L, *c->exe);
  else if (key == "key") lua_pushstring(L, c->cache.key.c_str());  // the compile-cache key (hex)
  else if (key == "cache") push_cache_info(L, c->cache);
  else if (key == "name") lua_pushstring(L, c->fn_name.c_str());
  else if (key == "instructions")
    lua_pushinteger(L, static_cast<lua_Integer>(c->exe->program().instrs().size()));
  else if (key == "mesh") push_udata(L, c->exe->mesh());
  else if (key == "predicted" && c->predicted) push_prediction(L, *c->predicted);
  else lua_pushnil(L);
  return 1;
}

Result<int> compiled_pipeline(lua_State* L) {  // lua_pipeline.cpp
  ENG_ASSIGN_OR_RETURN(CompiledBox * c, arg_compiled(L, "Compiled:pipeline"));
  return push_compiled_pipeline(L, *c);
}

constexpr Method kCompiledMethods[] = {
    {"text", lua_entry<compiled_text>, "c:text() -> string",
     "The compiled (per-device) program as jaxpr-like text."},
    {"as_text", lua_entry<compiled_hlo_text>, "c:as_text() -> string",
     "The compiled (per-device) program in XLA's HLO text syntax, as JAX's Compiled.as_text():\n"
     "  XLA's opcodes (dot, add, all-reduce with its replica groups, ...), the engine's other ops\n"
     "  as custom-calls; the same program c:text() prints jaxpr-style (engine/compile/hlo_text.h)."},
    {"temps", lua_entry<compiled_temps>,
     "c:temps([n]) -> rows {name, type, size, bytes, first, last, op, layer, offset}",
     "The n largest temporaries (default 10), printed as a table: the value's name in c:text()\n"
     "  (with its checkpoint_name), type, size, live range (first..last instruction), producing op,\n"
     "  decoder layer (layers_N, for values of a layer's remat region; layers for a stacked\n"
     "  scan_layers gradient) and arena offset."},
    {"pipeline", lua_entry<compiled_pipeline>, "c:pipeline() -> Pipeline",
     "The pipeline schedule this program runs, as t:pipeline() gives it (no measurement)."},
};
constexpr const char* kCompiledProperties[] = {"memory", "cost", "key",          "cache",
                                               "name",   "mesh", "instructions", "predicted"};

}  // namespace

void open_lua_compiled(lua_State* L, int) {
  define_type(L, {"Compiled",
                  "A compiled train_step. Fields: c.memory (argument/output/temp/alias/peak bytes per\n"
                  "  device, and MaxText's summary line), c.cost (flops, bytes_accessed,\n"
                  "  collective_bytes per mesh axis, collectives: rows per op and mesh axes), c.key\n"
                  "  (program fingerprint), c.cache (the cache lookup: outcome, level, reason,\n"
                  "  explanation, key, compile_s), c.name, c.mesh, c.instructions (per-device program),\n"
                  "  c.predicted (sl.plan's predicted step on named hardware; nil otherwise).",
                  lua_entry<compiled_tostring>, nullptr, udata_gc<CompiledBox>, kCompiledMethods,
                  lua_entry<compiled_property>, kCompiledProperties});
}

}  // namespace shell
