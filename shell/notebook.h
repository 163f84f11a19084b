// shell/notebook.h: notebook mode: a Lua file split into jupytext percent cells, run in one Lua state, reported as Markdown/HTML.
//
//   shardlab --notebook analysis.lua -o report.md [--html] [-p steps=3 ...] [--allow-errors]
//
// Cells start at `-- %%` lines (jupytext's percent format with Lua's `--` comment prefix):
//   -- %% Optional title [markdown] tags=["parameters"] allow_error=true skip=true
// (docs/notebook.md has the exact grammar). All cells run in one lua_State, so cells share
// globals (like IPython's namespace) but not `local`s: each cell is its own chunk. A trailing
// expression statement is the cell's value (Out[n], printed with the REPL's pretty printer; a
// trailing `;` suppresses it). Output is captured at the file-descriptor level (fds 1 and 2),
// so the engine's own stdout/stderr writes land in the cell that caused them.
// The REPL's %run and %timeit live here too (repl.cpp forwards `%` lines to run_magic).
#pragma once

#include <lua.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/base/notebook_report.h"
#include "engine/base/status.h"

namespace shell {

// The cells and the report are engine/base's (notebook_format.h, notebook_report.h).
using eng::Cell;
using eng::CellKind;
using eng::CellRun;
using eng::CellValue;
using eng::Output;
using eng::ReportInfo;
using eng::inject_parameters;
using eng::parameter_literal;
using eng::parse_notebook;
using eng::render_html;
using eng::render_markdown;
using eng::report_date;
using eng::html_escape;
using eng::is_svg;
using eng::markdown_to_html;
using eng::sanitize_svg;
using eng::svg_summary;

// ---- Running a cell (shared by the notebook and %run) ---------------------------------------

// Loads a code cell as a chunk named `chunkname` (e.g. "@notebook.lua") whose line numbers match
// the file. If the cell ends in an expression statement (without a trailing `;`) the chunk
// returns its value(s). On success the function is on the stack; on error, the message.
int load_cell(lua_State* L, const Cell& cell, const std::string& chunkname);

// ---- The store and git (notebook_store.cpp) ---------------------------------------------------

struct ShellContext;
// HEAD's commit in dir's repository, 7 hex digits (eng::git_revision), or "" outside one.
std::string git_revision(const std::string& dir);
// Fills info's runs/meshes/compile_summary/step_time with the runs this host began in ctx's store
// since `since_ms` (the store has no process id). Nothing if the store was never opened.
eng::Status add_store_summary(ShellContext& ctx, int64_t since_ms, ReportInfo* info);
// One `events` row (kind 'cell', run_id NULL) per cell that ran or was reused: message "FILE:
// In [n] (line L) title", payload JSON {notebook, started_ms, cell, line, title, source_hash (16
// hex), seconds, ok}; cells tagged `cache` also keep their output: {outputs: [[kind, data]...],
// value: {text, svg, columns, rows} (if any), from_ms (the run that computed it)}.
eng::Status log_cell_events(ShellContext& ctx, const std::string& notebook, int64_t started_ms,
                            const std::vector<CellRun>& runs);
// --resume: the previous run of `notebook` (same path as given) in the store, matched to
// `cells`: code cells are numbered as run_cells numbers them; while cell n has the same source
// hash as that run's cell n and succeeded there, it is in the unchanged prefix. Returns, by cell
// number, the reusable results of the prefix's cells tagged `cache` whose output was stored
// (cell pointer unset). Empty when there is no previous run.
eng::Result<std::vector<std::pair<int, CellRun>>> load_resume(ShellContext& ctx, const std::string& notebook,
                                                              const std::vector<Cell>& cells);

// ---- Entry points -----------------------------------------------------------------------------

// `shardlab ... --notebook FILE ...`: parses its own options; returns the exit status.
int run_notebook_cli(int argc, char** argv);
// A REPL line starting with `%`: %run FILE [-p name=value ...], %timeit [-n N] [-r R] expr,
// %time stmt, %hist.
// Prints results and errors; never raises.
void run_magic(lua_State* L, std::string_view line);
// Appends one entered chunk (a line, a multi-line chunk, a magic) to the session's input that
// %hist lists (the REPL calls it for every chunk it remembers).
void note_input(lua_State* L, const std::string& chunk);

// plot.show: in a running notebook, adds the SVG to the current cell's output and returns true;
// elsewhere returns false.
bool notebook_display(lua_State* L, const std::string& svg);

}  // namespace shell
