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
#pragma once

#include <lua.hpp>

namespace shell {

bool shell_interrupt_requested();
void shell_clear_interrupt();
// A binding that stopped its own loop on Ctrl-C and reports it (t:train's interrupted = true)
// takes the interrupt: no "interrupted!" is raised when it returns, and the next Ctrl-C
// interrupts again.
void shell_take_interrupt(lua_State* L);
// Whether a binding took an interrupt during the last docall (and forget it): the REPL then
// says "interrupted!" at the prompt, after the chunk's results.
bool shell_interrupt_was_taken();

// Runs the function at the top of the stack (below its narg arguments) under lua_pcall with a
// traceback handler and Ctrl-C armed. Returns a Lua status; on error the message is on the stack.
int docall(lua_State* L, int narg, int nres);
// Prints the error on the stack (if status != LUA_OK) to stderr as "progname: msg" and pops it.
int report(lua_State* L, int status, const char* progname);

}  // namespace shell
