// shell/repl.h: the interactive loop (GNU Readline, history file, completion, auto-print, ?help).
//
// Prompts come from the globals _PROMPT and _PROMPT2 (default "sl> " and "..> ", as th's
// "th> "/"..> "). Each line is first tried as `return <line>` (lua.c); incomplete chunks read
// more lines; a trailing `;` suppresses printing; `_`/`_LAST` hold the first result of the last
// expression and `_RESULTS` all of them (trepl); `?name` prints a binding's docstring; `$ cmd`
// runs a shell command; on a terminal, commands over 0.1 s print `[0.1234s]` (sl.timing).
// Errors and Ctrl-C never end the session; Ctrl-D (end of input) does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <lua.hpp>

namespace shell {

// Runs until end of input. Requires open_shardlab(L, ...) to have run. Never raises.
void run_repl(lua_State* L);
// Whether the input is a person at a terminal: stdin is a terminal, or, under mpirun, process
// 0's mpirun reads the controlling terminal (every process gets process 0's answer).
bool interactive_input();
// Loads stdin as a chunk (lua.c's `lua < file`); under mpirun process 0 reads it and every
// process loads the same text.
int load_stdin(lua_State* L);
// Notebook mode under mpirun (docs/distributed.md): while the returned object lives, process 0
// watches the terminal as the REPL does while a line runs, so Ctrl-C interrupts every process
// (keys typed meanwhile are dropped). Null where there is nothing to watch (one process, the
// other processes, mpirun not reading a terminal).
std::shared_ptr<void> watch_mpirun_terminal();
// Installs Readline's completion for L's globals (called by run_repl).
void install_completion(lua_State* L);

// Under mpirun, after a line or a notebook cell: every process's outcome goes through
// dist::end_line as process_outcome(failed, error) ("E<error>" or "K": an empty error message
// is still an error), and process 0 shows other_process_errors(all): a line per other process
// that failed, `process p: <message>`, or for those whose error is process 0's own,
// `process p: the same error` (`processes 1, 3: the same error`). Empty when none failed.
std::string process_outcome(bool failed, const std::string& error);
std::string other_process_errors(const std::vector<std::string>& all);
// Under mpirun, before that exchange: waits until every step the line or cell dispatched
// (t:step() returns at once) has run on every trainer of L, so the exchange's MPI calls never
// overlap a step's collectives (MPI_THREAD_SERIALIZED) and a step that waits for a process
// which skipped it is found by dist::end_line rather than left running. Returns the first
// step error (the line's or cell's error).
std::string settle_steps(lua_State* L);

}  // namespace shell
