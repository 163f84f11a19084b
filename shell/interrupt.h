// shell/interrupt.h: Ctrl-C while Lua code runs; long engine loops poll it to stop after the current step.
//
//   for (int64_t s = 0; s < steps; ++s) {
//     ENG_RETURN_IF_ERROR(trainer.step());
//     if (shell::shell_interrupt_requested()) break;   // stop cleanly; Lua then sees "interrupted!"
//   }
//
// The first Ctrl-C while a chunk runs sets the flag and a Lua hook that raises "interrupted!" at
// the next Lua instruction (so C++ code is never unwound by it); a second Ctrl-C ends the
// process, as in lua.c. Bindings that call back into Lua must use lua_pcall.
//
// Under mpirun (more than one process) Ctrl-C while a line runs is SIGUSR1: process 0 reads
// the key from mpirun's pipe and signals mpirun, which forwards SIGUSR1 to every rank
// (docs/distributed.md, "Ctrl-C while a line runs"). While a chunk runs SIGUSR1 is handled as
// SIGINT is (the flag and the Lua hook; the second one ends the process); between chunks it is
// dropped. t:train then stops on every process after the same step: the flag is read once per
// step by the trainer (TrainerOptions::stop_requested) and agreed over the processes.
#pragma once

#include <lua.hpp>

#include <string>

namespace shell {

bool shell_interrupt_requested();
void shell_clear_interrupt();
// A binding that stopped its own loop on Ctrl-C and reports it (t:train's interrupted = true)
// takes the interrupt: no "interrupted!" is raised when it returns, and the next Ctrl-C
// interrupts again. After SIGTERM neither clearing nor taking has any effect: the interrupt
// stays requested until the process ends.
void shell_take_interrupt(lua_State* L);
// Whether a binding took an interrupt during the last docall (and forget it): the REPL then
// says "interrupted!" at the prompt, after the chunk's results.
bool shell_interrupt_was_taken();

// SIGTERM (a supervisor or `kill` ending the shell): the process ends soon and cleanly, its
// runs recorded KILLED with every row flushed (docs/shell.md). The handler does only
// async-signal-safe things: it sets the terminate and interrupt flags (training stops after
// the current step, saving a checkpoint when checkpointing is on; a query stops), makes Lua
// raise "terminated (SIGTERM)" at its next instruction (and again at every later one, so a
// pcall cannot keep the script going), wakes a REPL waiting at the prompt through a pipe,
// and arms a watchdog: a shell that has not ended kTerminateGraceSeconds later is ended by
// SIGTERM's default action. A second SIGTERM ends it at once.
inline constexpr unsigned kTerminateGraceSeconds = 10;
// Once, at start-up (the REPL, scripts, notebooks); under mpirun also makes SIGUSR1 harmless
// between chunks and Ctrl-C while one runs (above).
void install_terminate_handler();
bool shell_terminate_requested();
int shell_terminate_fd();  // readable once SIGTERM came (-1 before install): for select()
// At the very end, after lua_close and the last flush: if SIGTERM came, ends the process by
// SIGTERM's default action (a parent sees "killed by SIGTERM", exit status 143 in a shell).
void finish_terminate();
// An async-signal-safe function run before a signal ends the process abruptly (a second
// SIGUSR1, the SIGTERM watchdog): process 0 under mpirun restores the user's terminal.
void set_fatal_interrupt_cleanup(void (*cleanup)());

// Runs the function at the top of the stack (below its narg arguments) under lua_pcall with a
// traceback handler and Ctrl-C armed. Returns a Lua status; on error the message is on the stack.
int docall(lua_State* L, int narg, int nres);
// Prints the error on the stack (if status != LUA_OK) to stderr as "progname: msg" and pops it.
int report(lua_State* L, int status, const char* progname);
// The message of the last error report() printed ("" if none): what ended a script.
const std::string& last_reported_error();

}  // namespace shell
