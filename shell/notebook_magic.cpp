// shell/notebook_magic.cpp: the REPL's IPython-style magics: %run FILE (notebook cells) and %timeit expr (synced timing).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "shell/context.h"
#include "shell/interrupt.h"
#include "shell/notebook.h"

namespace shell {

void magic_run(lua_State* L, const std::vector<std::string>& words);  // notebook.cpp

namespace {

int lua_clock(lua_State* L) {
  lua_pushnumber(L, std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
  return 1;
}

// Builds timer(n) -> seconds for n calls of f, each synchronised: a result with a wait method
// (StepHandle, or anything like it) is waited on, as `%timeit f(x).block_until_ready()` in JAX.
constexpr const char* kTimerSource = R"(
local f, clock = ...
local function index(v, k) return v[k] end
return function(n)
  local t0 = clock()
  for _ = 1, n do
    local r = f()
    local tr = type(r)
    if tr == "userdata" or tr == "table" then
      local ok, w = pcall(index, r, "wait")
      if ok and type(w) == "function" then w(r) end
    end
  end
  return clock() - t0
end
)";

// IPython's _format_time: three significant digits in s, ms, µs or ns.
std::string format_time(double s) {
  static const char* kUnits[] = {"s", "ms", "µs", "ns"};
  int order = 3;
  if (s > 0) {
    int e = static_cast<int>(std::floor(std::log10(s)));
    int q = e >= 0 ? e / 3 : -((-e + 2) / 3);  // Python's floor division
    order = std::clamp(-q, 0, 3);
  }
  return fmt::format("{:.3g} {}", s * std::pow(1000.0, order), kUnits[order]);
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

// Calls timer(n) (on the stack top) under docall; returns seconds or a negative value on error
// (the error is reported).
double call_timer(lua_State* L, int timer, int64_t n) {
  lua_pushvalue(L, timer);
  lua_pushinteger(L, n);
  int status = docall(L, 1, 1);
  if (status != LUA_OK) {
    report(L, status, nullptr);
    return -1;
  }
  double t = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return t;
}

void magic_timeit(lua_State* L, std::string_view args) {
  int64_t loops = 0, runs = 7;
  std::string rest(args);
  for (;;) {  // -n N / -r R before the expression
    size_t b = rest.find_first_not_of(' ');
    rest = b == std::string::npos ? "" : rest.substr(b);
    if (rest.rfind("-n ", 0) != 0 && rest.rfind("-r ", 0) != 0) break;
    char opt = rest[1];
    char* end = nullptr;
    long long v = std::strtoll(rest.c_str() + 3, &end, 10);
    if (end == rest.c_str() + 3 || v < 1) {
      std::fprintf(stderr, "%%timeit: -%c expects a positive integer\n", opt);
      return;
    }
    (opt == 'n' ? loops : runs) = v;
    rest = end;
  }
  if (rest.empty()) {
    std::fprintf(stderr, "usage: %%timeit [-n LOOPS] [-r RUNS] expr\n");
    return;
  }
  const int top = lua_gettop(L);
  std::string ret = "return " + rest + ";";
  int status = luaL_loadbuffer(L, ret.data(), ret.size(), "=timeit");
  if (status != LUA_OK) {
    lua_pop(L, 1);
    status = luaL_loadbuffer(L, rest.data(), rest.size(), "=timeit");  // a statement
  }
  if (status != LUA_OK) {
    report(L, status, nullptr);
    return;
  }
  int f = lua_gettop(L);
  if (luaL_loadbuffer(L, kTimerSource, std::strlen(kTimerSource), "=timeit") != LUA_OK) {
    report(L, LUA_ERRSYNTAX, nullptr);
    lua_settop(L, top);
    return;
  }
  lua_pushvalue(L, f);
  lua_pushcfunction(L, lua_clock);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {  // only builds a closure: fails only on out-of-memory
    report(L, LUA_ERRMEM, nullptr);
    lua_settop(L, top);
    return;
  }
  const int timer = lua_gettop(L);

  const int64_t compiles_before = context(L).compiles();
  const double first = call_timer(L, timer, 1);  // warm-up, and compilation if it compiles
  const bool compiled = context(L).compiles() > compiles_before;
  if (first < 0) return lua_settop(L, top);
  if (loops == 0) {  // IPython's autorange: 1, 2, 5, 10, ... until one run takes >= 0.2 s
    bool done = false;
    for (int64_t base = 1; !done; base *= 10) {
      for (int64_t n : {base, 2 * base, 5 * base}) {
        double t = call_timer(L, timer, n);
        if (t < 0) return lua_settop(L, top);
        loops = n;
        done = t >= 0.2 || n >= 100000000;
        if (done) break;
      }
    }
  }
  std::vector<double> per_loop;
  for (int64_t r = 0; r < runs; ++r) {
    double t = call_timer(L, timer, loops);
    if (t < 0) return lua_settop(L, top);
    per_loop.push_back(t / static_cast<double>(loops));
  }
  double mean = 0, var = 0;
  for (double t : per_loop) mean += t / static_cast<double>(per_loop.size());
  for (double t : per_loop) var += (t - mean) * (t - mean) / static_cast<double>(per_loop.size());
  std::printf("%s ± %s per loop (mean ± std. dev. of %lld run%s, %s loop%s each)\n", format_time(mean).c_str(),
              format_time(std::sqrt(var)).c_str(), static_cast<long long>(runs), runs == 1 ? "" : "s",
              with_commas(loops).c_str(), loops == 1 ? "" : "s");
  std::printf("first call: %s (%snot in the mean)\n", format_time(first).c_str(),
              compiled ? "includes compilation; " : "");
  std::fflush(stdout);

  lua_createtable(L, 0, 6);  // _ = the numbers, for scripts and tests
  lua_pushnumber(L, mean), lua_setfield(L, -2, "mean");
  lua_pushnumber(L, std::sqrt(var)), lua_setfield(L, -2, "std");
  lua_pushnumber(L, first), lua_setfield(L, -2, "first");
  lua_pushboolean(L, compiled), lua_setfield(L, -2, "compiled");
  lua_pushinteger(L, runs), lua_setfield(L, -2, "runs");
  lua_pushinteger(L, loops), lua_setfield(L, -2, "loops");
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
  lua_pushstring(L, "_");
  lua_pushvalue(L, -3);
  lua_rawset(L, -3);
  lua_settop(L, top);
}

}  // namespace

void run_magic(lua_State* L, std::string_view line) {
  std::istringstream in{std::string(line)};
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) return;
  if (words[0] == "%run") return magic_run(L, words);
  if (words[0] == "%timeit") return magic_timeit(L, line.substr(line.find("%timeit") + 7));
  std::fprintf(stderr, "unknown magic '%s' (try %%run FILE.lua or %%timeit expr)\n", words[0].c_str());
}

}  // namespace shell
