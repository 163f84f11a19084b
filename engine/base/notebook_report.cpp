// engine/base/notebook_report.cpp: a notebook run as a Markdown report (plots beside it) or one
// self-contained HTML page (notebook_report.h).
#include "engine/base/notebook_report.h"

#include <algorithm>
#include <ctime>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/base/text.h"

namespace eng {
namespace {

// A code fence longer than any backtick run inside the text.
std::string fence_for(std::string_view text) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<size_t>(3, longest + 1), '`');
}

std::string fenced(std::string_view lang, std::string text) {
  if (!text.empty() && text.back() != '\n') text += '\n';
  std::string f = fence_for(text);
  return fmt::format("{}{}\n{}{}\n\n", f, lang, text, f);
}

// For table cells: values (run names, sql results) are text, never Markdown or HTML, so the
// characters that would start a link, code, emphasis or a tag are escaped.
std::string md_cell_text(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += ' ';
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (std::string_view("|\\`*[]").find(c) != std::string_view::npos) out += std::string("\\") + c;
    else out += c;
  }
  return out;
}

std::string md_table(const CellValue& v) {
  std::string out = "|";
  for (const std::string& c : v.columns) out += " " + md_cell_text(c) + " |";
  out += "\n|";
  for (size_t i = 0; i < v.columns.size(); ++i) out += " --- |";
  out += "\n";
  for (const auto& row : v.rows) {
    out += "|";
    for (const std::string& c : row) out += " " + md_cell_text(c) + " |";
    out += "\n";
  }
  return out + "\n";
}

std::string timing(double s) { return fmt::format("[{:.4f}s]", s); }

std::string header_line(const ReportInfo& info) {
  return fmt::format("Notebook `{}` run by shardlab{} in {:.2f}s: {}.", info.notebook,
                     info.params.empty() ? "" : fmt::format(" with parameters `{}`", info.params), info.seconds,
                     info.ok && info.exit_code < 0 ? "all cells succeeded" : "stopped at " + info.failed_at);
}

std::string cell_heading(const CellRun& r) {
  const Cell& c = *r.cell;
  std::string title = c.title.empty() ? "" : " " + c.title;
  if (c.skip) return fmt::format("In [ ]:{} (skipped: skip=true)", title);
  if (r.not_run_after_error) return fmt::format("In [ ]:{} (not run: an earlier cell failed)", title);
  if (r.not_run_after_exit) return fmt::format("In [ ]:{} (not run: an earlier cell called os.exit)", title);
  if (r.reused())
    return fmt::format("In [{}]:{} (cached: not run; output from the run of {})", r.count, title,
                       report_date(r.reused_from_ms));
  return fmt::format("In [{}]:{}", r.count, title);
}

// ---- HTML ----------------------------------------------------------------------------------

// Links from Markdown cells may point only to the web.
bool is_web_url(std::string_view url) {
  std::string lower;
  for (char c : url.substr(0, 8)) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.starts_with("http://") || lower.starts_with("https://");
}

// Inline Markdown: `code`, **bold**, *italic*, [text](url); everything else HTML-escaped.
std::string inline_md(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    auto span = [&](std::string_view open, std::string_view close, const char* tag, bool nested) {
      if (s.compare(i, open.size(), open) != 0) return false;
      size_t end = s.find(close, i + open.size());
      if (end == std::string_view::npos || end == i + open.size()) return false;
      std::string_view inner = s.substr(i + open.size(), end - i - open.size());
      out += fmt::format("<{0}>{1}</{0}>", tag, nested ? inline_md(inner) : html_escape(inner));
      i = end + close.size();
      return true;
    };
    if (span("`", "`", "code", false) || span("**", "**", "strong", true) || span("*", "*", "em", true)) continue;
    if (s[i] == '[') {
      size_t close = s.find("](", i), end = close == std::string_view::npos ? close : s.find(')', close);
      if (end != std::string_view::npos) {
        std::string_view url = s.substr(close + 2, end - close - 2);
        if (is_web_url(url))
          out += fmt::format("<a href=\"{}\">{}</a>", html_escape(url), inline_md(s.substr(i + 1, close - i - 1)));
        else  // javascript:, data:, file: ...: shown as text, never a live link
          out += html_escape(s.substr(i, end + 1 - i));
        i = end + 1;
        continue;
      }
    }
    out += html_escape(s.substr(i++, 1));
  }
  return out;
}

bool is_table_row(const std::string& l) { return l.size() > 1 && l[0] == '|'; }

std::vector<std::string> table_cells(std::string l) {
  std::vector<std::string> cells;
  if (!l.empty() && l.back() == '|') l.pop_back();
  std::string cur;
  for (size_t i = 1; i < l.size(); ++i) {
    if (l[i] == '\\' && i + 1 < l.size() && l[i + 1] == '|') {
      cur += '|';
      ++i;
    } else if (l[i] == '|') {
      cells.push_back(cur);
      cur.clear();
    } else {
      cur += l[i];
    }
  }
  cells.push_back(cur);
  for (std::string& c : cells) {
    size_t b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
    c = b == std::string::npos ? "" : c.substr(b, e - b + 1);
  }
  return cells;
}

std::string html_table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table><thead><tr>";
  for (const std::string& h : head) out += "<th>" + inline_md(h) + "</th>";
  out += "</tr></thead><tbody>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const std::string& c : row) out += "<td>" + inline_md(c) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

// A table of values (runs, store summaries, a cell's rows): every cell is text, escaped.
std::string html_data_table(const CellValue& v) {
  std::string out = "<table><thead><tr>";
  for (const std::string& h : v.columns) out += "<th>" + html_escape(h) + "</th>";
  out += "</tr></thead><tbody>\n";
  for (const auto& row : v.rows) {
    out += "<tr>";
    for (const std::string& c : row) out += "<td>" + html_escape(c) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string pre(std::string_view cls, std::string_view text) {
  std::string t(text);
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return fmt::format("<pre class=\"{}\">{}</pre>\n", cls, html_escape(t));
}

constexpr const char* kCss = R"(body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
.meta{color:#666;font-size:.9em;border-bottom:1px solid #ddd;padding-bottom:.6em}
.cell{margin:1.2em 0}.head{display:flex;justify-content:space-between;font-family:monospace;color:#30a;font-size:.85em}
.head .t{color:#888}pre{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:4px;padding:.6em .8em;overflow-x:auto;font-size:.85em;margin:.3em 0}
pre.out{background:#fff}pre.err{background:#fff0f0;border-color:#e99;color:#900}.label{font-family:monospace;color:#a30;font-size:.85em}
table{border-collapse:collapse;font-size:.85em;margin:.4em 0}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}th{background:#f0f0f0}
.plot svg{max-width:100%;height:auto;border:1px solid #eee}.md code{background:#f0f0f0;padding:0 .2em}
.skipped{color:#888;font-style:italic}
)";

// ---- Header and footer: date, git, the notebook's runs and their store summaries --------------

constexpr const char* kCompileTitle = "Compilation per run and function (v_compile_summary)";
constexpr const char* kStepTimeTitle = "Step time per run, seconds (v_step_time_pct)";

std::string meta_line(const ReportInfo& info) {
  std::string s = "Date: " + info.date;
  if (!info.git_rev.empty()) s += " · git: `" + info.git_rev + "`";
  return s;
}

std::string runs_title(const ReportInfo& info) {
  return info.runs.rows.empty() ? "No training runs were started."
                                : fmt::format("Runs started ({}):", info.runs.rows.size());
}

std::string md_header(const ReportInfo& info) {
  std::string md = meta_line(info) + "\n\n";
  if (!info.meshes.empty()) {
    md += "Meshes:\n\n";
    for (const std::string& m : info.meshes) md += "- `" + m + "`\n";
    md += "\n";
  }
  md += runs_title(info) + "\n\n";
  if (!info.runs.rows.empty()) md += md_table(info.runs);
  return md;
}

std::string md_footer(const ReportInfo& info) {
  if (info.runs.rows.empty()) return "";
  std::string md = "---\n\n";
  for (const auto& [title, table] : {std::pair{kCompileTitle, &info.compile_summary},
                                     std::pair{kStepTimeTitle, &info.step_time}}) {
    md += fmt::format("**{}:**\n\n", title);
    md += table->rows.empty() ? "(none)\n\n" : md_table(*table);
  }
  return md;
}

std::string html_header(const ReportInfo& info) {
  std::string h = "<div class=\"runs\">\n";
  h += "<p class=\"meta\">" + inline_md(meta_line(info)) + "</p>\n";
  if (!info.meshes.empty()) {
    h += "<p class=\"meta\">Meshes:</p>\n<ul>\n";
    for (const std::string& m : info.meshes) h += "<li><code>" + html_escape(m) + "</code></li>\n";
    h += "</ul>\n";
  }
  h += "<p class=\"meta\">" + html_escape(runs_title(info)) + "</p>\n";
  if (!info.runs.rows.empty()) h += html_data_table(info.runs);
  return h + "</div>\n";
}

std::string html_footer(const ReportInfo& info) {
  if (info.runs.rows.empty()) return "";
  std::string h = "<div class=\"runs\">\n";
  for (const auto& [title, table] : {std::pair{kCompileTitle, &info.compile_summary},
                                     std::pair{kStepTimeTitle, &info.step_time}}) {
    h += fmt::format("<div class=\"label\">{}:</div>\n", html_escape(title));
    h += table->rows.empty() ? "<p>(none)</p>\n" : html_data_table(*table);
  }
  return h + "</div>\n";
}

}  // namespace

std::string html_escape(std::string_view s) { return xml_escape(s); }


std::string markdown_to_html(std::string_view md) {
  std::vector<std::string> lines;
  for (size_t start = 0; start <= md.size();) {
    size_t nl = md.find('\n', start);
    if (nl == std::string_view::npos) nl = md.size();
    lines.emplace_back(md.substr(start, nl - start));
    start = nl + 1;
  }
  std::string out, para;
  auto flush_para = [&]() {
    if (!para.empty()) out += "<p>" + inline_md(para) + "</p>\n";
    para.clear();
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.rfind("```", 0) == 0) {  // fenced code
      flush_para();
      std::string code;
      for (++i; i < lines.size() && lines[i].rfind("```", 0) != 0; ++i) code += lines[i] + "\n";
      out += pre("code", code);
    } else if (l.rfind("#", 0) == 0) {
      flush_para();
      size_t level = l.find_first_not_of('#');
      if (level == std::string::npos) level = l.size();
      level = std::min<size_t>(level, 6);
      out += fmt::format("<h{0}>{1}</h{0}>\n", level, inline_md(l.substr(std::min(l.size(), level + 1))));
    } else if (l.rfind("- ", 0) == 0 || l.rfind("* ", 0) == 0) {
      flush_para();
      out += "<ul>\n";
      for (; i < lines.size() && (lines[i].rfind("- ", 0) == 0 || lines[i].rfind("* ", 0) == 0); ++i) {
        std::string item = lines[i].substr(2);
        while (i + 1 < lines.size() && lines[i + 1].rfind("  ", 0) == 0) item += " " + lines[++i].substr(2);
        out += "<li>" + inline_md(item) + "</li>\n";
      }
      --i;
      out += "</ul>\n";
    } else if (is_table_row(l) && i + 1 < lines.size() && lines[i + 1].find("---") != std::string::npos &&
               is_table_row(lines[i + 1])) {
      flush_para();
      std::vector<std::string> head = table_cells(l);
      std::vector<std::vector<std::string>> rows;
      for (i += 2; i < lines.size() && is_table_row(lines[i]); ++i) rows.push_back(table_cells(lines[i]));
      --i;
      out += html_table(head, rows);
    } else if (l.find_first_not_of(" \t") == std::string::npos) {
      flush_para();
    } else {
      para += (para.empty() ? "" : " ") + l;
    }
  }
  flush_para();
  return out;
}

std::string render_markdown(const ReportInfo& info, const std::vector<CellRun>& cells,
                            const std::string& files_dir_ref,
                            std::vector<std::pair<std::string, std::string>>* files) {
  std::string md = "*" + header_line(info) + "*\n\n" + md_header(info);
  auto image = [&](const std::string& svg) {
    std::string name = fmt::format("plot-{}.svg", files->size() + 1);
    // A standalone .svg opened in a browser runs its scripts: sanitised as the HTML report's
    // inline SVG is (notebook_svg.cpp's allow-list), since cell values can put text in it.
    files->emplace_back(name, sanitize_svg(svg));
    return fmt::format("![{}]({}/{})\n\n", name, files_dir_ref, name);
  };
  for (const CellRun& r : cells) {
    const Cell& c = *r.cell;
    if (c.kind == CellKind::kMarkdown) {
      md += c.source + "\n";
      continue;
    }
    if (c.kind == CellKind::kRaw) {
      md += fenced("", c.source);
      continue;
    }
    md += fmt::format("**{}**{}\n\n", cell_heading(r), r.ran ? " `" + timing(r.seconds) + "`" : "");
    md += fenced("lua", c.source);
    for (const Output& o : r.outputs) md += o.kind == Output::kSvg ? image(o.data) : fenced("text", o.data);
    if (!r.error.empty()) md += fmt::format("**Error{}:**\n\n", c.allow_error ? " (allowed)" : "") + fenced("text", r.error);
    if (r.has_value) {
      md += fmt::format("**Out[{}]:**\n\n", r.count);
      if (!r.value.svg.empty()) md += image(r.value.svg);
      else if (!r.value.columns.empty()) md += md_table(r.value);
      else md += fenced("text", r.value.text);
    }
  }
  return md + md_footer(info);
}

std::string render_html(const ReportInfo& info, const std::vector<CellRun>& cells) {
  std::string h = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n{}</style>\n"
      "</head>\n<body>\n<p class=\"meta\">{}</p>\n",
      html_escape(info.notebook), kCss, inline_md(header_line(info)));
  h += html_header(info);
  for (const CellRun& r : cells) {
    const Cell& c = *r.cell;
    if (c.kind == CellKind::kMarkdown) {
      h += "<div class=\"cell md\">\n" + markdown_to_html(c.source) + "</div>\n";
      continue;
    }
    if (c.kind == CellKind::kRaw) {
      h += "<div class=\"cell raw\">" + pre("raw", c.source) + "</div>\n";
      continue;
    }
    h += fmt::format("<div class=\"cell code{}\">\n<div class=\"head\"><span>{}</span><span class=\"t\">{}</span></div>\n",
                     r.ran ? "" : " skipped", html_escape(cell_heading(r)), r.ran ? timing(r.seconds) : "");
    h += pre("src", c.source);
    for (const Output& o : r.outputs)
      h += o.kind == Output::kSvg ? "<div class=\"plot\">\n" + sanitize_svg(o.data) + "</div>\n" : pre("out", o.data);
    if (!r.error.empty()) h += "<div class=\"label\">Error:</div>\n" + pre("err", r.error);
    if (r.has_value) {
      h += fmt::format("<div class=\"label\">Out[{}]:</div>\n", r.count);
      if (!r.value.svg.empty()) h += "<div class=\"plot\">\n" + sanitize_svg(r.value.svg) + "</div>\n";
      else if (!r.value.columns.empty()) h += html_data_table(r.value);
      else h += pre("out", r.value.text);
    }
    h += "</div>\n";
  }
  return h + html_footer(info) + "</body>\n</html>\n";
}

std::string report_date(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm = {};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace eng
