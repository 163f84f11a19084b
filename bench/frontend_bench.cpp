// bench/frontend_bench.cpp: what the Lua front-end (docs/frontend.md) costs over the engine.
// Medians of wall-clock times, one process, one device (issue 13's performance bullet):
//   1. kern::matmul on 1024 x 1024 x 1024 called directly (the floor);
//   2. the same matmul jitted through engine/frontend (Compiled::run: output buffer, executor);
//   3. the same from Lua: f(a, b) of sl.jit (signature, cache lookup, run, the result Array);
//   4. eager dispatch of small ops from Lua (x + y and x * 3 on 8 x 8): per call.
//
//   build/bench/frontend_bench [--reps N]
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <lua.hpp>
#include <string>
#include <vector>

#include "engine/base/clock.h"
#include "engine/base/thread_pool.h"
#include "engine/frontend/numpy.h"
#include "engine/tensor/blas.h"
#include "engine/tensor/kernels.h"
#include "shell/bindings.h"
#include "shell/context.h"

namespace {

using namespace eng;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int64_t kN = 1024;

double bench_kern_matmul(int reps) {
  std::vector<float> a(kN * kN), b(kN * kN), c(kN * kN);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.1f, b[i] = 0.5f;
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = now_seconds();
    kern::matmul(false, false, kN, kN, kN, 1.0f, a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);
    if (r > 0) t.push_back(now_seconds() - t0);  // the first warms caches and the pool
  }
  return median(t);
}

Result<double> bench_compiled_matmul(int reps) {
  ENG_ASSIGN_OR_RETURN(const Mesh mesh, Mesh::create({"X"}, {1}, AxisType::kExplicit));
  frontend::Trace tr("mm", mesh);
  const ValueId x = tr.input("a", Shape{kN, kN}, DType::kF32, PartitionSpec());
  const ValueId w = tr.input("b", Shape{kN, kN}, DType::kF32, PartitionSpec());
  ENG_ASSIGN_OR_RETURN(ValueId y, frontend::np::matmul(tr, x, w));
  ENG_ASSIGN_OR_RETURN(auto c, frontend::Compiled::create(std::move(tr), {y}, {"mm", {}}));
  std::vector<double> host(kN * kN, 0.5);
  ENG_ASSIGN_OR_RETURN(frontend::ArrayRef a, frontend::device_put(host, Shape{kN, kN}, DType::kF32,
                                                                  {mesh, PartitionSpec()}));
  const std::vector<frontend::ArrayRef> ins = {a, a};
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = now_seconds();
    ENG_ASSIGN_OR_RETURN(std::vector<frontend::ArrayRef> out, c->run(ins));
    if (r > 0) t.push_back(now_seconds() - t0);
  }
  return median(t);
}

// Seconds per call of the global Lua function `name`, timed around each call.
double time_lua_call(lua_State* L, const char* name, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    lua_getglobal(L, name);
    const double t0 = now_seconds();
    if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
      fmt::print(stderr, "{}: {}\n", name, lua_tostring(L, -1));
      std::exit(1);
    }
    if (r > 0) t.push_back(now_seconds() - t0);
  }
  return median(t);
}

constexpr const char* kSetup = R"(
  sl.set_mesh(sl.make_mesh({1}, {"X"}))
  local np = sl.numpy
  local a, b = sl.full({1024, 1024}, 0.5), sl.full({1024, 1024}, 0.5)
  local f = sl.jit(function(x, w) return np.matmul(x, w) end, {name = "bench_mm"})
  function jit_matmul() local c = f(a, b) end
  local x, y = sl.ones({8, 8}), sl.ones({8, 8})
  function eager_add_1000() for i = 1, 1000 do local z = x + y end end
  function eager_scale_1000() for i = 1, 1000 do local z = x * 3 end end
  function eager_exp_1000() for i = 1, 1000 do local z = np.exp(x) end end
)";

lua_State* open_lua(shell::ShellContext* ctx) {
  lua_State* L = luaL_newstate();
  luaL_openlibs(L);
  lua_pushcfunction(L, [](lua_State* l) -> int {
    shell::open_shardlab(l, static_cast<shell::ShellContext*>(lua_touserdata(l, 1)));
    return 0;
  });
  lua_pushlightuserdata(L, ctx);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK || luaL_dostring(L, kSetup) != LUA_OK) {
    fmt::print(stderr, "setup: {}\n", lua_tostring(L, -1));
    std::exit(1);
  }
  return L;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      fmt::print(stderr, "usage: frontend_bench [--reps N]\n");
      return 2;
    }
  }
  const BlasInfo& blas = blas_info();
  fmt::print("BLAS: {} ({} BLAS thread); pool threads: {}; medians of {} runs\n", blas.core,
             blas.num_threads, default_pool().num_threads(), reps);
  const double kern_s = bench_kern_matmul(reps);
  Result<double> compiled_s = bench_compiled_matmul(reps);
  if (!compiled_s.ok()) {
    fmt::print(stderr, "{}\n", compiled_s.status().message());
    return 1;
  }
  shell::ShellContext ctx;
  ctx.db_path = ":memory:";
  lua_State* L = open_lua(&ctx);
  const double lua_s = time_lua_call(L, "jit_matmul", reps);
  const double add_s = time_lua_call(L, "eager_add_1000", reps) / 1000;
  const double scale_s = time_lua_call(L, "eager_scale_1000", reps) / 1000;
  const double exp_s = time_lua_call(L, "eager_exp_1000", reps) / 1000;
  lua_close(L);
  fmt::print("matmul 1024x1024x1024, 1 device:\n");
  fmt::print("  kern::matmul directly        {:8.2f} ms\n", kern_s * 1e3);
  fmt::print("  jitted (Compiled::run)       {:8.2f} ms  ({:.3f}x kern)\n", *compiled_s * 1e3,
             *compiled_s / kern_s);
  fmt::print("  jitted from Lua, f(a, b)     {:8.2f} ms  ({:.3f}x kern)\n", lua_s * 1e3,
             lua_s / kern_s);
  fmt::print("eager dispatch from Lua, 8x8 f32, 1 device (per call):\n");
  fmt::print("  x + y                        {:8.2f} us\n", add_s * 1e6);
  fmt::print("  x * 3                        {:8.2f} us\n", scale_s * 1e6);
  fmt::print("  np.exp(x)                    {:8.2f} us\n", exp_s * 1e6);
  return 0;
}
