// shell/interrupt.cpp: protected calls with tracebacks, Ctrl-C turned into "interrupted!" (lua.c's
// docall), and SIGTERM turned into a prompt, clean end of the shell.
#include "shell/interrupt.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>

#include "engine/dist/dist.h"

namespace shell {
namespace {

std::atomic<bool> g_interrupted{false};  // set by SIGINT while a chunk runs (and by SIGTERM)
std::atomic<bool> g_terminate{false};    // set by SIGTERM; never cleared
int g_wake[2] = {-1, -1};                // self-pipe: SIGTERM writes a byte to g_wake[1]
static_assert(std::atomic<bool>::is_always_lock_free, "flags set by signal handlers");
std::atomic<bool> g_taken{false};        // a binding took an interrupt during this chunk
lua_State* volatile g_running = nullptr; // the state running a chunk (for the signal handler)
std::string g_last_error;                // report()'s last message (main thread only)
bool g_process_interrupt = false;        // under mpirun: SIGUSR1 is Ctrl-C (install_terminate_handler)
void (*g_fatal_cleanup)() = nullptr;     // set_fatal_interrupt_cleanup

// Raised at the next Lua instruction after Ctrl-C, never inside C++ code.
void stop_hook(lua_State* L, lua_Debug*) {
  lua_sethook(L, nullptr, 0, 0);
  luaL_error(L, "interrupted!");
}

// After SIGTERM: raised at every Lua instruction (a count hook never runs inside C code, so
// bindings and error handlers are not unwound by it), until the chunk has ended.
void terminate_hook(lua_State* L, lua_Debug*) { luaL_error(L, "terminated (SIGTERM)"); }

void on_sigalrm(int) {  // the watchdog: the shell did not end in time
  if (g_fatal_cleanup) g_fatal_cleanup();
  std::signal(SIGTERM, SIG_DFL);
  std::raise(SIGTERM);
}

void on_sigterm(int) {
  const int saved_errno = errno;
  std::signal(SIGTERM, SIG_DFL);  // a second SIGTERM ends the process at once
  g_terminate.store(true);
  g_interrupted.store(true);
  if (g_running) lua_sethook(g_running, terminate_hook, LUA_MASKCOUNT, 1);
  if (g_wake[1] >= 0) {
    const char byte = 1;
    (void)!write(g_wake[1], &byte, 1);
  }
  std::signal(SIGALRM, on_sigalrm);
  alarm(kTerminateGraceSeconds);
  errno = saved_errno;
}

// Under mpirun, between chunks: a Ctrl-C that comes late (the line just ended) is dropped. A
// handler rather than SIG_IGN, which a `$ cmd` child would inherit.
void on_idle_sigusr1(int) {}

// The second SIGUSR1 of a chunk: restore what must be restored (process 0's terminal), then
// end the process by SIGUSR1's default action, as a second SIGINT does.
void on_fatal_sigusr1(int) {
  if (g_fatal_cleanup) g_fatal_cleanup();
  std::signal(SIGUSR1, SIG_DFL);
  std::raise(SIGUSR1);
}

void on_sigint(int sig) {
  // A second Ctrl-C ends the process (lua.c); under mpirun, Ctrl-C is SIGUSR1 (interrupt.h).
  std::signal(sig, sig == SIGUSR1 ? on_fatal_sigusr1 : SIG_DFL);
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
void shell_clear_interrupt() {
  if (!g_terminate.load()) g_interrupted.store(false);
}

void install_terminate_handler() {
  if (g_wake[0] < 0 && pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) g_wake[0] = g_wake[1] = -1;
  struct sigaction sa = {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read or select() waiting at the prompt wakes up
  sigaction(SIGTERM, &sa, nullptr);
  if (eng::dist::process().count > 1) {
    g_process_interrupt = true;
    std::signal(SIGUSR1, on_idle_sigusr1);
  }
}

void set_fatal_interrupt_cleanup(void (*cleanup)()) { g_fatal_cleanup = cleanup; }

bool shell_terminate_requested() { return g_terminate.load(); }
int shell_terminate_fd() { return g_wake[0]; }

void finish_terminate() {
  if (!g_terminate.load()) return;
  std::fflush(nullptr);
  std::signal(SIGTERM, SIG_DFL);
  std::raise(SIGTERM);
}

bool shell_interrupt_was_taken() { return g_taken.exchange(false); }

void shell_take_interrupt(lua_State* L) {
  if (g_terminate.load()) return;  // SIGTERM: the chunk must still end
  g_interrupted.store(false);
  g_taken.store(true);
  if (g_running == nullptr) return;
  lua_sethook(L, nullptr, 0, 0);
  if (L != g_running) lua_sethook(g_running, nullptr, 0, 0);
  std::signal(SIGINT, on_sigint);  // re-armed: on_sigint made the next Ctrl-C fatal
  if (g_process_interrupt) std::signal(SIGUSR1, on_sigint);
}

int docall(lua_State* L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  shell_clear_interrupt();
  g_taken.store(false);
  if (g_terminate.load()) {  // SIGTERM came between chunks: run nothing more
    lua_settop(L, base - 1);
    lua_pushliteral(L, "terminated (SIGTERM)");
    return LUA_ERRRUN;
  }
  g_running = L;
  if (g_terminate.load()) lua_sethook(L, terminate_hook, LUA_MASKCOUNT, 1);  // just came
  auto previous = std::signal(SIGINT, on_sigint);
  auto previous_usr1 = g_process_interrupt ? std::signal(SIGUSR1, on_sigint) : SIG_ERR;
  int status = lua_pcall(L, narg, nres, base);
  std::signal(SIGINT, previous == SIG_ERR ? SIG_DFL : previous);
  if (g_process_interrupt)  // idle again (a nested docall gives the outer one's handler back)
    std::signal(SIGUSR1, previous_usr1 == SIG_ERR ? on_idle_sigusr1 : previous_usr1);
  g_running = nullptr;
  lua_sethook(L, nullptr, 0, 0);  // Ctrl-C may have come after the last Lua instruction
  lua_remove(L, base);
  return status;
}

int report(lua_State* L, int status, const char* progname) {
  if (status != LUA_OK) {
    const char* msg = lua_tostring(L, -1);
    if (msg == nullptr) msg = "(error object is not a string)";
    g_last_error = msg;
    if (progname) std::fprintf(stderr, "%s: ", progname);
    std::fprintf(stderr, "%s\n", msg);
    std::fflush(stderr);
    lua_pop(L, 1);
  }
  return status;
}

const std::string& last_reported_error() { return g_last_error; }

}  // namespace shell
