// engine/base/notebook_report.h: a notebook run rendered as a Markdown report (plots beside
// it) or one self-contained HTML page, and the SVG allow-list its HTML inlines. Text only: the
// shell runs the cells (shell/notebook.h) and fills these structs; docs/notebook.md.
//
//   std::string html = render_html(info, runs);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/base/notebook_format.h"

namespace eng {

// One piece of a cell's output, in order.
struct Output {
  enum Kind { kText, kSvg } kind;
  std::string data;
};
// A cell's value as the report shows it.
struct CellValue {
  std::string text;                  // pretty-printed (tab-separated if several)
  std::string svg;                   // non-empty: the value is a plot
  std::vector<std::string> columns;  // non-empty: rows rendered as a table
  std::vector<std::vector<std::string>> rows;
};
struct CellRun {
  const Cell* cell = nullptr;
  bool ran = false;  // false: markdown/raw, skipped, or after a failure
  bool not_run_after_error = false;
  bool not_run_after_exit = false;  // an earlier cell called os.exit
  int count = 0;                    // execution count (In [n]), code cells only
  double seconds = 0;
  std::vector<Output> outputs;  // captured text and plot.show images, interleaved
  bool has_value = false;
  CellValue value;
  std::string error;  // message with traceback; empty if the cell succeeded
  // --resume: the cell was not run; outputs/value/seconds are those of the run that started at
  // reused_from_ms (shown as "cached from <date>").
  int64_t reused_from_ms = 0;
  bool reused() const { return reused_from_ms != 0; }
};

struct ReportInfo {
  std::string notebook;  // path as given
  std::string params;    // "steps=3, lr=0.01" or ""
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

// Markdown plots go to files_dir/plot-N.svg (`files_dir_ref` is how the report links to that
// directory); `files` receives (name, svg) to write.
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
// "2026-11-21 07:55:12 UTC".
std::string report_date(int64_t unix_ms);
// A string that is an SVG document ("<svg" first, "</svg>" in it): a plot.
bool is_svg(std::string_view s);
// "<svg plot, 1234 bytes, 2 polylines; plot.save(svg, "plot.svg") writes it>".
std::string svg_summary(std::string_view svg);

}  // namespace eng
