// tests/base/notebook_report_test.cpp: the notebook's text layer in engine/base without Lua
// (notebook_format.h: cells, parameters; notebook_report.h: Markdown and HTML reports, the SVG
// allow-list, plot detection). The shell's runs of whole notebooks are tests/notebook.
#include "engine/base/notebook_report.h"

#include <gtest/gtest.h>

namespace eng {
namespace {

TEST(NotebookFormat, ParsesPercentCellsWithTheirHeaders) {
  Result<std::vector<Cell>> r = parse_notebook(
      "x = 1\n"
      "-- %% Setup tags=[\"parameters\"]\nsteps = 3\n"
      "-- %% [markdown]\n-- # Title\n-- text\n"
      "-- %% Train allow_error=true\nerror('x')\n"
      "-- %% skip=true\nprint(2)\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 5u);
  const std::vector<Cell>& c = *r;
  EXPECT_EQ(c[0].kind, CellKind::kCode);
  EXPECT_EQ(c[0].first_line, 1);
  EXPECT_EQ(c[1].title, "Setup");
  EXPECT_TRUE(c[1].has_tag("parameters"));
  EXPECT_EQ(c[1].first_line, 3);
  EXPECT_EQ(c[2].kind, CellKind::kMarkdown);
  EXPECT_EQ(c[2].source, "# Title\ntext\n");
  EXPECT_TRUE(c[3].allow_error);
  EXPECT_EQ(c[3].title, "Train");
  EXPECT_TRUE(c[4].skip);
}

TEST(NotebookFormat, BadHeaderNamesItsLine) {
  Result<std::vector<Cell>> r = parse_notebook("x = 1\n-- %% tags=[\"a\"\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().message();
}

TEST(NotebookFormat, ParametersAreLuaLiterals) {
  EXPECT_EQ(parameter_literal("3"), "3");
  EXPECT_EQ(parameter_literal("true"), "true");
  EXPECT_EQ(parameter_literal("tiny"), "\"tiny\"");
  EXPECT_EQ(parameter_literal("'a\"b'"), "\"a\\\"b\"");
  Result<std::vector<Cell>> r =
      parse_notebook("-- %% tags=[\"parameters\"]\nsteps = 1\n-- %%\nx\n");
  ASSERT_TRUE(r.ok());
  std::vector<Cell> cells = *r;
  ASSERT_TRUE(inject_parameters(&cells, {{"steps", "3"}, {"name", "tiny"}}).ok());
  ASSERT_EQ(cells.size(), 3u);
  EXPECT_TRUE(cells[1].injected);  // right after the `parameters` cell
  EXPECT_EQ(cells[1].source, "steps = 3\nname = \"tiny\"\n");
  Status bad = inject_parameters(&cells, {{"1x", "3"}});
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'1x' is not a Lua name"), std::string::npos) << bad.message();
}

TEST(NotebookFormat, CodeLinesDropTrailingCommentsAndBlanks) {
  Cell c;
  c.source = "local x = 1\r\nx + 1\n-- a comment\n\n";
  EXPECT_EQ(cell_code_lines(c), (std::vector<std::string>{"local x = 1", "x + 1"}));
  c.source = "--[[ block ]]\n";  // a block comment is code, not noise
  EXPECT_EQ(cell_code_lines(c).size(), 1u);
}

TEST(NotebookReport, SvgAllowListKeepsDrawingOnly) {
  const std::string svg =
      "<svg width=\"10\"><script>alert(1)</script><rect x=\"1\" onclick=\"evil()\"/>"
      "<a href=\"javascript:x\"><text>hi</text></a><line x1=\"0\" style=\"url(x)\"/></svg>";
  const std::string out = sanitize_svg(svg);
  EXPECT_EQ(out.find("script"), std::string::npos) << out;
  EXPECT_EQ(out.find("onclick"), std::string::npos) << out;
  EXPECT_EQ(out.find("javascript"), std::string::npos) << out;
  EXPECT_EQ(out.find("style"), std::string::npos) << out;
  EXPECT_NE(out.find("<rect x=\"1\""), std::string::npos) << out;
  EXPECT_NE(out.find("<line x1=\"0\""), std::string::npos) << out;
  EXPECT_TRUE(is_svg(svg));
  EXPECT_FALSE(is_svg("<svg width=1>"));  // no end tag
  EXPECT_EQ(svg_summary("<svg><polyline/><polyline/></svg>"),
            "<svg plot, 33 bytes, 2 polylines; plot.save(svg, \"plot.svg\") writes it>");
}

TEST(NotebookReport, MarkdownToHtmlEscapesText) {
  const std::string h = markdown_to_html("# T\n\nsome `a<b` and **bold** [l](https://x.org)\n");
  EXPECT_NE(h.find("<h1>T</h1>"), std::string::npos) << h;
  EXPECT_NE(h.find("<code>a&lt;b</code>"), std::string::npos) << h;
  EXPECT_NE(h.find("<strong>bold</strong>"), std::string::npos) << h;
  EXPECT_NE(h.find("<a href=\"https://x.org\">l</a>"), std::string::npos) << h;
  EXPECT_EQ(html_escape("<&\">"), "&lt;&amp;&quot;&gt;");
}

TEST(NotebookReport, RendersCellsValuesAndPlots) {
  Result<std::vector<Cell>> r = parse_notebook("-- %% First\nx = 1\n-- %% [markdown]\n-- Note\n");
  ASSERT_TRUE(r.ok());
  std::vector<CellRun> runs(2);
  runs[0].cell = &(*r)[0];
  runs[0].ran = true;
  runs[0].count = 1;
  runs[0].outputs = {{Output::kText, "out | text\n"}, {Output::kSvg, "<svg><line/></svg>"}};
  runs[0].has_value = true;
  runs[0].value.columns = {"a|b"};
  runs[0].value.rows = {{"<1>"}};
  runs[1].cell = &(*r)[1];
  ReportInfo info;
  info.notebook = "nb.lua";
  info.date = report_date(0);
  EXPECT_EQ(info.date, "1970-01-01 00:00:00 UTC");
  std::vector<std::pair<std::string, std::string>> files;
  const std::string md = render_markdown(info, runs, "nb_files", &files);
  EXPECT_NE(md.find("```lua\nx = 1\n```"), std::string::npos) << md;
  ASSERT_EQ(files.size(), 1u);  // the plot, beside the report
  EXPECT_NE(md.find("nb_files/" + files[0].first), std::string::npos) << md;
  EXPECT_NE(md.find("a\\|b"), std::string::npos) << md;  // table text escaped
  EXPECT_NE(md.find("&lt;1&gt;"), std::string::npos) << md;
  EXPECT_NE(md.find("Note"), std::string::npos) << md;
  const std::string html = render_html(info, runs);
  EXPECT_NE(html.find("<svg><line/></svg>"), std::string::npos) << html;
  EXPECT_NE(html.find("out | text"), std::string::npos) << html;
  EXPECT_EQ(html.find("<1>"), std::string::npos) << html;
}

}  // namespace
}  // namespace eng
