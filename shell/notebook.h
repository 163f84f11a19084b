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

#include "engine/base/status.h"

namespace shell {

enum class CellKind { kCode, kMarkdown, kRaw };

struct Cell {
  CellKind kind = CellKind::kCode;
  std::string title;              // text after `-- %%` that is neither [type] nor key=value
  std::string source;             // code, or prose with the `-- ` prefix removed
  int first_line = 1;             // 1-based line of the first source line in the file
  std::vector<std::string> tags;  // tags=[...] / tag="..." ("parameters", "raises-exception", ...)
  bool allow_error = false;       // allow_error=true or tag "raises-exception" (papermill)
  bool skip = false;              // skip=true: shown, never run
  bool injected = false;          // the injected-parameters cell (-p)

  bool has_tag(std::string_view t) const;
};

// Splits a notebook's text into cells. Text before the first marker is a code cell (if not
// blank); a file without markers is one code cell. Errors name the line of a bad header.
eng::Result<std::vector<Cell>> parse_notebook(std::string_view text);

// The Lua source for a -p value: numbers, true/false/nil and quoted strings as Lua literals,
// anything else as a string ("-p name=tiny" is name = "tiny").
std::string parameter_literal(std::string_view value);
// papermill: inserts an `injected-parameters` cell after the cell tagged `parameters` (at the top
// if there is none). Names must be Lua identifiers.
eng::Status inject_parameters(std::vector<Cell>* cells,
                              const std::vector<std::pair<std::string, std::string>>& params);

// ---- Running a cell (shared by the notebook and %run) ---------------------------------------

// Loads a code cell as a chunk named `chunkname` (e.g. "@notebook.lua") whose line numbers match
// the file. If the cell ends in an expression statement (without a trailing `;`) the chunk
// returns its value(s). On success the function is on the stack; on error, the message.
int load_cell(lua_State* L, const Cell& cell, const std::string& chunkname);

// One piece of a cell's output, in order.
struct Output {
  enum Kind { kText, kSvg } kind;
  std::string data;
};
// A cell's value as the report shows it.
struct CellValue {
  std::string text;                               // pretty-printed (tab-separated if several)
  std::string svg;                                // non-empty: the value is a plot
  std::vector<std::string> columns;               // non-empty: rows rendered as a table
  std::vector<std::vector<std::string>> rows;
};
struct CellRun {
  const Cell* cell = nullptr;
  bool ran = false;             // false: markdown/raw, skipped, or after a failure
  bool not_run_after_error = false;
  bool not_run_after_exit = false;  // an earlier cell called os.exit
  int count = 0;                // execution count (In [n]), code cells only
  double seconds = 0;
  std::vector<Output> outputs;  // captured text and plot.show images, interleaved
  bool has_value = false;
  CellValue value;
  std::string error;            // message with traceback; empty if the cell succeeded
  // --resume: the cell was not run; outputs/value/seconds are those of the run that started at
  // reused_from_ms (shown as "cached from <date>").
  int64_t reused_from_ms = 0;
  bool reused() const { return reused_from_ms != 0; }
};

struct ReportInfo {
  std::string notebook;   // path as given
  std::string params;     // "steps=3, lr=0.01" or ""
  double seconds = 0;
  bool ok = true;
  std::string failed_at;  // "cell 4 (line 37)" when !ok
  int exit_code = -1;     // a cell called os.exit(exit_code): the run stopped there; -1: none
  std::string date;       // when the notebook started: "2026-11-21 07:55:12 UTC"
  std::string git_rev;    // HEAD's commit (7 hex digits) in the notebook's repository, or ""
  std::vector<std::string> meshes;  // distinct meshes of `runs`, in order
  CellValue runs;                   // run_id, name, status, mesh, steps (header)
  CellValue compile_summary;        // v_compile_summary rows for those runs (footer)
  CellValue step_time;              // v_step_time_pct rows for those runs (footer)
};

// Rendering (notebook_report.cpp). Markdown plots go to files_dir/plot-N.svg (`files_dir_ref`
// is how the report links to that directory); `files` receives (name, svg) to write.
std::string render_markdown(const ReportInfo& info, const std::vector<CellRun>& cells,
                            const std::string& files_dir_ref,
                            std::vector<std::pair<std::string, std::string>>* files);
std::string render_html(const ReportInfo& info, const std::vector<CellRun>& cells);
// Minimal Markdown to HTML for prose cells: headings, paragraphs, lists, fenced code, tables,
// `code`, **bold**, *italic*, [links](url).
std::string markdown_to_html(std::string_view md);
// The SVG for the HTML report rebuilt from an allow-list of drawing elements and attributes:
// no script, event handler, link, style or foreign content survives (notebook_svg.cpp).
std::string sanitize_svg(std::string_view svg);
std::string html_escape(std::string_view s);

// ---- The store and git (notebook_store.cpp) ---------------------------------------------------

struct ShellContext;
// "2026-11-21 07:55:12 UTC".
std::string report_date(int64_t unix_ms);
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
// Helpers shared with lua_plot.cpp.
bool is_svg(std::string_view s);
std::string svg_summary(std::string_view svg);

}  // namespace shell
