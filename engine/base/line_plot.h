// engine/base/line_plot.h: the plots of store rows as text: SVG line plots (the shell's
// plot.line) and terminal sparklines (plot.spark). Reading the Lua series is the shell's
// (shell/lua_plot.cpp); docs/notebook.md.
//
//   std::string svg = line_plot_svg({{"loss", {{1, 5.5}, {2, 4.1}}}}, {.title = "loss"});
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace eng {

struct PlotPoint {
  double x, y;
};
struct PlotSeries {
  std::string name;
  std::vector<PlotPoint> points;
};

struct LinePlotOptions {
  std::string title, xlabel = "step", ylabel;
  bool logy = false;  // a log10 y axis (points with y <= 0 must be dropped before)
  int width = 640, height = 360;
  std::optional<double> ema;  // smoothing in [0, 1): the smoothed curve over the raw one
};

// An SVG document: nice ticks (1, 2, 5 x 10^k; decades on a log axis), one polyline per
// series (every other dashed, so equal curves stay visible), a legend for more than one.
std::string line_plot_svg(const std::vector<PlotSeries>& series, const LinePlotOptions& o);

// "▇▆▄▃▂▂▁▁  min 2.31  max 5.55  last 2.31": one bar per point, or per bucket mean when there
// are more points than `width` columns; "(no data)" for none.
std::string sparkline(const std::vector<PlotPoint>& pts, size_t width);

}  // namespace eng
