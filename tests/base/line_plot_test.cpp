// tests/base/line_plot_test.cpp: engine/base/line_plot.h without Lua: sparklines' bars and
// bucket means, the SVG's ticks, series, legend and escaping.
#include "engine/base/line_plot.h"

#include <gtest/gtest.h>

namespace eng {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Sparkline, BarsFromMinToMax) {
  EXPECT_EQ(sparkline({}, 10), "(no data)");
  EXPECT_EQ(sparkline({{1, 5}, {2, 1}, {3, 3}}, 60), "█▁▅  min 1  max 5  last 3");
  // Four points in two columns: the bucket means 1.5 and 3.5 (levels round(7 * 0.5 / 3) = 1
  // and round(7 * 2.5 / 3) = 6 between the points' min 1 and max 4).
  EXPECT_EQ(sparkline({{1, 1}, {2, 2}, {3, 3}, {4, 4}}, 2), "▂▇  min 1  max 4  last 4");
  EXPECT_EQ(sparkline({{1, 2}, {2, 2}}, 60), "▁▁  min 2  max 2  last 2");  // flat
}

TEST(LinePlot, SeriesTicksLegendAndEscaping) {
  LinePlotOptions o;
  o.title = "loss <a&b>";
  const std::string one = line_plot_svg({{"loss", {{0, 1}, {10, 2}}}}, o);
  EXPECT_EQ(one.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\"", 0), 0u) << one;
  EXPECT_NE(one.find(">loss &lt;a&amp;b&gt;</text>"), std::string::npos) << one;
  EXPECT_EQ(count(one, "<polyline"), 1u);
  EXPECT_EQ(one.find("class=\"legend\""), std::string::npos);   // one series: no legend
  EXPECT_NE(one.find(">10</text>"), std::string::npos) << one;  // an x tick at 10
  const std::string two =
      line_plot_svg({{"a", {{1, 1}, {2, 2}}}, {"b", {{1, 2}, {2, 1}}}}, LinePlotOptions{});
  EXPECT_EQ(count(two, "<polyline"), 2u);
  EXPECT_NE(two.find("class=\"legend\""), std::string::npos);
  EXPECT_EQ(count(two, "stroke-dasharray=\"7 4\""), 2u);  // the second series and its legend line
  LinePlotOptions smooth;
  smooth.ema = 0.5;
  EXPECT_EQ(count(line_plot_svg({{"a", {{1, 1}, {2, 3}}}}, smooth), "<polyline"), 2u);  // raw + ema
  LinePlotOptions logy;
  logy.logy = true;
  logy.ylabel = "loss";
  const std::string log = line_plot_svg({{"a", {{1, 1}, {2, 1000}}}}, logy);
  EXPECT_NE(log.find(">loss (log)</text>"), std::string::npos) << log;
  EXPECT_NE(log.find(">1000</text>"), std::string::npos) << log;  // a decade tick
}

}  // namespace
}  // namespace eng
