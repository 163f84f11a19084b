// shell/notebook_magic.cpp: the REPL's IPython-style magics: %run FILE (notebook cells), %timeit expr (synced timing), %time stmt (one run) and %hist (this session's input).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <fmt/format.h>

#include "shell/context.h"
#include "shell/interrupt.h"
#include "shell/lua_binding.h"
#include "shell/notebook.h"
#include "shell/pretty.h"

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

// Loads `text` as an expression (`return text;`) or else as a statement, as %timeit does.
// Pushes the function, or reports the syntax error and pushes nothing.
bool load_expr_or_statement(lua_State* L, const std::string& text, const char* chunk) {
  const std::string ret = "return " + text + ";";
  int status = luaL_loadbuffer(L, ret.data(), ret.size(), chunk);
  if (status != LUA_OK) {
    lua_pop(L, 1);
    status = luaL_loadbuffer(L, text.data(), text.size(), chunk);
  }
  if (status == LUA_OK) return true;
  report(L, status, nullptr);
  return false;
}

// User and system CPU seconds of this process so far (all threads: the engine's workers too).
std::pair<double, double> cpu_seconds() {
  rusage u = {};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return {s(u.ru_utime), s(u.ru_stime)};
}

// IPython's %time: runs the statement once; prints CPU and wall time, then its values (which
// become `_`). A result with a wait method (StepHandle) is waited on inside the timing, as in
// %timeit.
constexpr const char* kWaitSource = R"(
local r = ...
local tr = type(r)
if tr == "userdata" or tr == "table" then
  local ok, w = pcall(function() return r.wait end)
  if ok and type(w) == "function" then w(r) end
end
)";

void magic_time(lua_State* L, std::string_view args) {
  const size_t b = args.find_first_not_of(' ');
  const std::string stmt = b == std::string_view::npos ? "" : std::string(args.substr(b));
  if (stmt.empty()) {
    std::fprintf(stderr, "usage: %%time stmt\n");
    return;
  }
  const int top = lua_gettop(L);
  if (!load_expr_or_statement(L, stmt, "=time")) return lua_settop(L, top);
  const auto cpu0 = cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  int status = docall(L, 0, LUA_MULTRET);
  if (status == LUA_OK && lua_gettop(L) > top) {
    luaL_loadbuffer(L, kWaitSource, std::strlen(kWaitSource), "=time");
    lua_pushvalue(L, top + 1);
    status = docall(L, 1, 0);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const auto cpu1 = cpu_seconds();
  if (status != LUA_OK) {
    report(L, status, nullptr);
    return lua_settop(L, top);
  }
  const double user = cpu1.first - cpu0.first, sys = cpu1.second - cpu0.second;
  std::printf("CPU times: user %s, sys: %s, total: %s\nWall time: %s\n", format_time(user).c_str(),
              format_time(sys).c_str(), format_time(user + sys).c_str(), format_time(wall).c_str());
  if (lua_gettop(L) > top) {
    PrettyOptions o;
    o.color = context(L).color;
    o.rows = true;
    std::string out;
    for (int i = top + 1; i <= lua_gettop(L); ++i) out += (i > top + 1 ? "\t" : "") + pretty(L, i, o);
    std::printf("%s\n", out.c_str());
    set_global_raw(L, "_", top + 1);
  }
  std::fflush(stdout);
  lua_settop(L, top);
}

constexpr const char* kInputKey = "shardlab.session_input";  // registry: this session's inputs

// Pushes the registry's list of this session's inputs, creating it on first use.
void push_inputs(lua_State* L) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, kInputKey) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, kInputKey);
}

// IPython's %hist -n: this session's inputs (not the history file's older sessions), numbered
// from 1; a multi-line chunk is one entry, its later lines indented under the first.
void magic_hist(lua_State* L) {
  push_inputs(L);
  const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, -1));
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, -1, i);
    std::string text = lua_tostring(L, -1) ? lua_tostring(L, -1) : "";
    lua_pop(L, 1);
    for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', nl + 7))
      text.replace(nl, 1, "\n      ");
    std::printf("%4lld: %s\n", static_cast<long long>(i), text.c_str());
  }
  lua_pop(L, 1);
  std::fflush(stdout);
}

}  // namespace

void note_input(lua_State* L, const std::string& chunk) {
  push_inputs(L);
  lua_pushlstring(L, chunk.data(), chunk.size());
  lua_rawseti(L, -2, static_cast<lua_Integer>(lua_rawlen(L, -2)) + 1);
  lua_pop(L, 1);
}

void run_magic(lua_State* L, std::string_view line) {
  std::istringstream in{std::string(line)};
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) return;
  if (words[0] == "%run") return magic_run(L, words);
  if (words[0] == "%timeit") return magic_timeit(L, line.substr(line.find("%timeit") + 7));
  if (words[0] == "%time") return magic_time(L, line.substr(line.find("%time") + 5));
  if (words[0] == "%hist" || words[0] == "%history") {
    if (words.size() == 1) return magic_hist(L);
    std::fprintf(stderr, "usage: %s (takes no arguments)\n", words[0].c_str());
    return;
  }
  std::fprintf(stderr, "unknown magic '%s' (try %%run FILE.lua, %%timeit expr, %%time stmt or %%hist)\n",
               words[0].c_str());
}

}  // namespace shell
