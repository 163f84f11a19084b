// shell/lua_search.cpp: sl.search(cfg, {vary = {...}}): engine/train/search.h from Lua, with the
// progress bar `shardlab search` prints (shell/search.cpp) and a result table of every candidate.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/dist/dist.h"
#include "engine/train/config.h"
#include "engine/train/search.h"
#include "shell/bindings.h"
#include "shell/context.h"
#include "shell/interrupt.h"
#include "shell/lua_binding.h"
#include "shell/lua_types.h"
#include "shell/search.h"

namespace shell {
namespace {

constexpr std::string_view kFn = "sl.search";

// A value of a vary list as command-line text: 2, 0.5, "full", true.
Result<std::string> value_text(lua_State* L, int idx, const std::string& key, lua_Integer i) {
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) return fmt::format("{}", lua_tointeger(L, idx));
      return fmt::format("{}", lua_tonumber(L, idx));
    case LUA_TSTRING: return std::string(lua_tostring(L, idx));
    case LUA_TBOOLEAN: return std::string(lua_toboolean(L, idx) ? "true" : "false");
    default:
      return eng::invalid_argument("{}: vary.{}[{}] expected a number, string or boolean, got {}",
                                   kFn, key, i, luaL_typename(L, idx));
  }
}

// vary = {mesh = {"fsdp", "tensor"}, per_device_batch_size = {1, 2}, remat_policy = {...}}:
// the keys in sorted order (a Lua table has none of its own).
Result<eng::SearchSpace> read_vary(lua_State* L, int idx) {
  eng::SearchSpace space;
  std::vector<std::string> keys;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      lua_pop(L, 2);
      return eng::invalid_argument("{}: vary's keys are config keys or 'mesh' (strings)", kFn);
    }
    keys.emplace_back(lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  std::sort(keys.begin(), keys.end());
  for (const std::string& key : keys) {
    lua_pushstring(L, key.c_str());
    if (lua_rawget(L, idx) != LUA_TTABLE) {
      lua_pop(L, 1);
      return eng::invalid_argument("{}: vary.{} expected a list of values, e.g. {{1, 2, 4}}", kFn,
                                   key);
    }
    const int list = lua_gettop(L);
    const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, list));
    std::vector<std::string> values;
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_rawgeti(L, list, i);
      Result<std::string> v = value_text(L, -1, key, i);
      lua_pop(L, 1);
      if (!v.ok()) {
        lua_pop(L, 1);
        return v.status();
      }
      values.push_back(std::move(v).value());
    }
    lua_pop(L, 1);
    if (values.empty()) return eng::invalid_argument("{}: vary.{} is an empty list", kFn, key);
    if (key == "mesh") space.mesh_axes = std::move(values);
    else space.keys.emplace_back(key, std::move(values));
  }
  return space;
}

void set_number(lua_State* L, const char* key, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, key);
}
void set_integer(lua_State* L, const char* key, int64_t v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}
void set_string(lua_State* L, const char* key, const std::string& v) {
  lua_pushlstring(L, v.data(), v.size());
  lua_setfield(L, -2, key);
}
void set_bool(lua_State* L, const char* key, bool v) {
  lua_pushboolean(L, v ? 1 : 0);
  lua_setfield(L, -2, key);
}

void push_candidate(lua_State* L, const eng::SearchCandidate& c) {
  lua_createtable(L, 0, 16);
  set_integer(L, "index", c.index + 1);
  set_string(L, "label", c.label());
  lua_createtable(L, 0, static_cast<int>(c.mesh.size()));
  for (const auto& [axis, size] : c.mesh) set_integer(L, axis.c_str(), size);
  lua_setfield(L, -2, "mesh");
  lua_createtable(L, 0, static_cast<int>(c.values.size()));
  for (const auto& [key, value] : c.values) set_string(L, key.c_str(), value);
  lua_setfield(L, -2, "values");
  set_bool(L, "planned", c.planned);
  set_bool(L, "fits", c.planned && c.predicted.fits);
  set_string(L, "limit", c.limit());
  if (c.rank > 0) set_integer(L, "rank", c.rank);
  if (!c.status.ok()) set_string(L, "error", c.status.message());
  if (c.planned) {
    const eng::Prediction& p = c.predicted;
    set_number(L, "step_time_s", p.step_time_s);
    set_number(L, "tokens_per_s_per_device", p.tokens_per_s_per_device);
    set_number(L, "tflops_per_s_per_device", p.tflops_per_s_per_device);
    set_number(L, "mfu", p.mfu);
    set_integer(L, "peak_bytes", p.peak_bytes);
    set_integer(L, "hbm_bytes", p.hbm_bytes);
    set_integer(L, "global_batch", c.global_batch);
    set_string(L, "bound", p.bound);
    set_number(L, "exposed_collective_s", p.exposed_collective_s);
  }
}

int result_tostring(lua_State* L) {
  if (lua_type(L, 1) == LUA_TTABLE) {
    lua_pushstring(L, "table");
    if (lua_rawget(L, 1) == LUA_TSTRING) return 1;
  }
  lua_pushstring(L, "search result");
  return 1;
}

// sl.search(config, {vary = {...}, rank = "tokens", top = 10, store = true, progress = true,
//                    prune = true})
Result<int> search_new(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(eng::Config * cfg, arg_udata<eng::Config>(L, 1, kFn, "config"));
  ENG_RETURN_IF_ERROR(arg_table(L, 2, kFn, "options"));
  static const std::vector<std::string> kAllowed = {"vary", "rank", "top", "store", "progress",
                                                    "prune"};
  ENG_RETURN_IF_ERROR(check_keys(L, 2, kFn, kAllowed));
  eng::SearchSpace space;
  if (push_field(L, 2, "vary") == LUA_TTABLE) {
    Result<eng::SearchSpace> s = read_vary(L, lua_gettop(L));
    lua_pop(L, 1);
    if (!s.ok()) return s.status();
    space = std::move(s).value();
  } else {
    lua_pop(L, 1);
    return eng::invalid_argument(
        "{}: options.vary expected a table, e.g. {{mesh = {{\"fsdp\", \"tensor\"}}, "
        "remat_policy = {{\"full\", \"minimal\"}}}}",
        kFn);
  }
  eng::SearchOptions options;
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> rank, field_string(L, 2, "rank", kFn));
  if (rank && *rank == "step_time") options.rank = eng::SearchRank::kStepTime;
  else if (rank && *rank != "tokens")
    return eng::invalid_argument("{}: rank '{}': \"tokens\" or \"step_time\"", kFn, *rank);
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> top, field_int(L, 2, "top", kFn));
  if (top && *top < 0) return eng::invalid_argument("{}: top must be >= 0, got {}", kFn, *top);
  ENG_ASSIGN_OR_RETURN(std::optional<bool> use_store, field_bool(L, 2, "store", kFn));
  ENG_ASSIGN_OR_RETURN(std::optional<bool> progress, field_bool(L, 2, "progress", kFn));
  ENG_ASSIGN_OR_RETURN(std::optional<bool> prune, field_bool(L, 2, "prune", kFn));
  options.prune_batch = prune.value_or(true);
  if (use_store.value_or(true) && eng::dist::process().index == 0) {
    Result<eng::MetricsStore*> store = context(L).open_store();
    if (!store.ok()) return with_context(kFn, store.status());
    options.store = *store;
  }
  const bool bar = progress.value_or(true) && isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  int64_t fitting = 0;
  // Called on pool threads one at a time: C++ only (Lua is single-threaded).
  options.progress = [&](int64_t done, int64_t total, const eng::SearchCandidate& c) {
    if (c.planned && c.predicted.fits) ++fitting;
    if (!bar) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fputs(search_progress_bar(done, total, fitting, s).c_str(), stderr);
    if (done == total) std::fputs("\n", stderr);
    std::fflush(stderr);
  };
  options.stop_requested = [] { return shell_interrupt_requested(); };
  ENG_ASSIGN_OR_RETURN(eng::SearchResult r,
                       with_context(kFn, eng::search_configs(*cfg, space, options)));
  if (r.interrupted) shell_take_interrupt(L);

  lua_createtable(L, 0, 14);
  lua_createtable(L, static_cast<int>(r.candidates.size()), 0);
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    push_candidate(L, r.candidates[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i) + 1);
  }
  const int candidates = lua_gettop(L);
  lua_createtable(L, static_cast<int>(r.ranking.size()), 0);
  for (size_t k = 0; k < r.ranking.size(); ++k) {
    lua_rawgeti(L, candidates, static_cast<lua_Integer>(r.ranking[k]) + 1);
    lua_rawseti(L, -2, static_cast<lua_Integer>(k) + 1);
  }
  lua_setfield(L, -3, "ranked");
  lua_setfield(L, -2, "candidates");
  if (!r.ranking.empty()) {
    lua_getfield(L, -1, "candidates");
    lua_rawgeti(L, -1, static_cast<lua_Integer>(r.ranking[0]) + 1);
    lua_setfield(L, -3, "best");
    lua_pop(L, 1);
  }
  set_integer(L, "mesh_splits", r.mesh_splits);
  set_integer(L, "meshes", r.meshes);
  set_integer(L, "planned", r.planned);
  set_integer(L, "fitting", r.fitting);
  set_integer(L, "failed", r.failed);
  set_bool(L, "interrupted", r.interrupted);
  set_number(L, "seconds", r.seconds);
  set_string(L, "topology", r.topology);
  if (!r.run_id.empty()) set_string(L, "run_id", r.run_id);
  set_string(L, "table", r.to_table(top.value_or(10)));
  set_string(L, "pareto_svg", r.pareto_svg());
  lua_createtable(L, static_cast<int>(r.pareto_front().size()), 0);
  lua_getfield(L, -2, "candidates");
  const std::vector<size_t> front = r.pareto_front();
  for (size_t k = 0; k < front.size(); ++k) {
    lua_rawgeti(L, -1, static_cast<lua_Integer>(front[k]) + 1);
    lua_rawseti(L, -3, static_cast<lua_Integer>(k) + 1);
  }
  lua_pop(L, 1);
  lua_setfield(L, -2, "pareto");
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, result_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_setmetatable(L, -2);
  return 1;
}

constexpr Function kSearchFunctions[] = {
    {"search", lua_entry<search_new>,
     "sl.search(config, {vary = {mesh = {axes}, key = {values}, ...}, rank = \"tokens\",\n"
     "  top = 10, store = true, progress = true, prune = true}) -> result",
     "Plans every combination shape-only for the config's compile_topology (as sl.plan) and ranks\n"
     "  those that fit: vary.mesh lists mesh axes whose ici split varies over a slice's devices\n"
     "  (every split the torus lays out; an axis not varied keeps its size, one at -1 fills);\n"
     "  every other vary key lists values of that config key (per_device_batch_size,\n"
     "  remat_policy, ...). rank: \"tokens\" (predicted tokens/s per device, the default) or\n"
     "  \"step_time\". A progress bar on a terminal; Ctrl-C stops after the candidates in flight.\n"
     "  The result prints as the best `top` with what limits each; r.best, r.ranked (best\n"
     "  first), r.candidates (every one: label, mesh, values, planned, fits, rank, step_time_s,\n"
     "  tokens_per_s_per_device, mfu, peak_bytes, hbm_bytes, global_batch, limit, error),\n"
     "  r.planned, r.fitting, r.failed, r.seconds, r.run_id; r.pareto (the candidates no other\n"
     "  beats on both peak memory and the measure) and r.pareto_svg (plot.save(r.pareto_svg,\n"
     "  \"front.svg\") writes it). One run in the store holds every\n"
     "  candidate's compile, prediction and search/* metrics (docs/train_compile.md)."},
};

}  // namespace

void open_lua_search(lua_State* L, int sl) { add_functions(L, sl, "sl", kSearchFunctions); }

}  // namespace shell
