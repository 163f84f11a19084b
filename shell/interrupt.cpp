// shell/interrupt.cpp: protected calls with tracebacks, and Ctrl-C turned into "interrupted!" (lua.c's docall).
#include "shell/interrupt.h"

#include <atomic>
#include <csignal>
#include <cstdio>

namespace shell {
namespace {

std::atomic<bool> g_interrupted{false};  // set by SIGINT while a chunk runs
std::atomic<bool> g_taken{false};        // a binding took an interrupt during this chunk
lua_State* volatile g_running = nullptr; // the state running a chunk (for the signal handler)

// Raised at the next Lua instruction after Ctrl-C, never inside C++ code.
void stop_hook(lua_State* L, lua_Debug*) {
  lua_sethook(L, nullptr, 0, 0);
  luaL_error(L, "interrupted!");
}

void on_sigint(int sig) {
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process (lua.c)
  g_interrupted.store(true);
  if (g_running) lua_sethook(g_running, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

// lua.c's msghandler: the message (or the object's __tostring) plus a traceback.
int msghandler(lua_State* L) {
  const char* msg = lua_tostring(L, 1);
  if (msg == nullptr) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

}  // namespace

bool shell_interrupt_requested() { return g_interrupted.load(std::memory_order_relaxed); }
void shell_clear_interrupt() { g_interrupted.store(false); }

bool shell_interrupt_was_taken() { return g_taken.exchange(false); }

void shell_take_interrupt(lua_State* L) {
  g_interrupted.store(false);
  g_taken.store(true);
  if (g_running == nullptr) return;
  lua_sethook(L, nullptr, 0, 0);
  if (L != g_running) lua_sethook(g_running, nullptr, 0, 0);
  std::signal(SIGINT, on_sigint);  // re-armed: on_sigint made the next Ctrl-C fatal
}

int docall(lua_State* L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  shell_clear_interrupt();
  g_taken.store(false);
  g_running = L;
  auto previous = std::signal(SIGINT, on_sigint);
  int status = lua_pcall(L, narg, nres, base);
  std::signal(SIGINT, previous == SIG_ERR ? SIG_DFL : previous);
  g_running = nullptr;
  lua_sethook(L, nullptr, 0, 0);  // Ctrl-C may have come after the last Lua instruction
  lua_remove(L, base);
  return status;
}

int report(lua_State* L, int status, const char* progname) {
  if (status != LUA_OK) {
    const char* msg = lua_tostring(L, -1);
    if (msg == nullptr) msg = "(error object is not a string)";
    if (progname) std::fprintf(stderr, "%s: ", progname);
    std::fprintf(stderr, "%s\n", msg);
    std::fflush(stderr);
    lua_pop(L, 1);
  }
  return status;
}

}  // namespace shell
