// engine/base/line_plot.cpp: SVG line plots and terminal sparklines (line_plot.h).
#include "engine/base/line_plot.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/base/text.h"

namespace eng {
namespace {

std::string short_number(double v) { return fmt::format("{:.4g}", v); }

// "Nice" tick values (1, 2, 5 x 10^k) covering [lo, hi], about `target` of them.
std::vector<double> linear_ticks(double lo, double hi, int target) {
  double span = hi - lo, raw = span / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

// Log-axis ticks in log10 units: decades; within two decades also 2 and 5, within one all of 1..9.
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> ticks;
  for (double d = std::floor(lo); d <= std::ceil(hi); ++d)
    for (int m = 1; m <= 9; ++m) {
      bool wanted = m == 1 || (hi - lo <= 2 && (m == 2 || m == 5)) || hi - lo <= 1;
      double t = d + std::log10(static_cast<double>(m));
      if (wanted && t >= lo - 1e-9 && t <= hi + 1e-9) ticks.push_back(t);
    }
  return ticks;
}

std::string tick_label(double v) {
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3)) return fmt::format("{:.2g}", v);
  std::string s = fmt::format("{:.6f}", v);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}

constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

}  // namespace

std::string line_plot_svg(const std::vector<PlotSeries>& series, const LinePlotOptions& o) {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  auto ty = [&](double y) { return o.logy ? std::log10(y) : y; };
  for (const PlotSeries& s : series)
    for (const PlotPoint& p : s.points) {
      xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x);
      ymin = std::min(ymin, ty(p.y)), ymax = std::max(ymax, ty(p.y));
    }
  if (!std::isfinite(xmin)) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  if (xmax == xmin) xmin -= 0.5, xmax += 0.5;
  if (ymax == ymin) ymin -= 0.5, ymax += 0.5;
  double pad = (ymax - ymin) * 0.05;
  ymin -= pad, ymax += pad;
  const double left = 64, right = 16, top = o.title.empty() ? 16 : 36, bottom = 48;
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  auto sx = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  auto sy = [&](double y) { return top + (1 - (y - ymin) / (ymax - ymin)) * ph; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      o.width, o.height);
  if (!o.title.empty())
    svg += fmt::format("<text class=\"title\" x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
                       left + pw / 2, xml_escape(o.title));
  svg += "<g class=\"grid\" stroke=\"#e5e5e5\" stroke-width=\"1\">\n";
  std::string labels;
  for (double t : linear_ticks(xmin, xmax, 6)) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\"/>\n", sx(t), top, top + ph);
    labels += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", sx(t),
                          top + ph + 16, tick_label(t));
  }
  for (double t : o.logy ? log_ticks(ymin, ymax) : linear_ticks(ymin, ymax, 5)) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\"/>\n", left, sy(t), left + pw);
    labels += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", left - 6,
                          sy(t) + 4, tick_label(o.logy ? std::pow(10.0, t) : t));
  }
  svg += "</g>\n<g class=\"ticks\" fill=\"#333\">\n" + labels + "</g>\n";
  svg += fmt::format("<g class=\"axes\" stroke=\"#333\" stroke-width=\"1\"><line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" "
                     "y2=\"{2}\"/><line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\"/></g>\n",
                     left, top, top + ph, left + pw);
  svg += fmt::format("<text class=\"xlabel\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     left + pw / 2, o.height - 10, xml_escape(o.xlabel));
  if (!o.ylabel.empty())
    svg += fmt::format("<text class=\"ylabel\" transform=\"translate(16 {:.1f}) rotate(-90)\" "
                       "text-anchor=\"middle\">{}{}</text>\n",
                       top + ph / 2, xml_escape(o.ylabel), o.logy ? " (log)" : "");
  auto polyline = [&](const std::vector<PlotPoint>& pts, const char* color, const char* extra) {
    std::string p;
    for (const PlotPoint& q : pts) p += fmt::format("{:.1f},{:.1f} ", sx(q.x), sy(ty(q.y)));
    if (!p.empty()) p.pop_back();
    return fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"{} points=\"{}\"/>\n", color,
                       extra, p);
  };
  for (size_t i = 0; i < series.size(); ++i) {  // every other series dashed: equal curves stay visible
    const char* color = kColors[i % std::size(kColors)];
    svg += fmt::format("<g class=\"series\" data-name=\"{}\"{}>\n", xml_escape(series[i].name),
                       i % 2 ? " stroke-dasharray=\"7 4\"" : "");
    if (o.ema) {
      std::vector<PlotPoint> smooth = series[i].points;
      for (size_t k = 1; k < smooth.size(); ++k)
        smooth[k].y = *o.ema * smooth[k - 1].y + (1 - *o.ema) * smooth[k].y;
      svg += polyline(series[i].points, color, " stroke-opacity=\"0.3\"");
      svg += polyline(smooth, color, "");
    } else {
      svg += polyline(series[i].points, color, "");
    }
    svg += "</g>\n";
  }
  if (series.size() > 1) {  // legend, top right inside the plot area
    size_t longest = 0;
    for (const PlotSeries& s : series) longest = std::max(longest, s.name.size());
    double lw = 34 + 7.0 * static_cast<double>(longest), lx = left + pw - lw - 8, ly = top + 8;
    svg += fmt::format("<g class=\"legend\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" "
                       "fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n",
                       lx, ly, lw, 18 * series.size() + 6);
    for (size_t i = 0; i < series.size(); ++i) {
      double y = ly + 15 + 18.0 * static_cast<double>(i);
      svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
                         "stroke-width=\"2.5\"{}/><text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
                         lx + 6, y - 4, lx + 24, y - 4, kColors[i % std::size(kColors)],
                         i % 2 ? " stroke-dasharray=\"7 4\"" : "", lx + 28, y,
                         xml_escape(series[i].name));
    }
    svg += "</g>\n";
  }
  return svg + "</svg>\n";
}

std::string sparkline(const std::vector<PlotPoint>& pts, size_t width) {
  if (pts.empty()) return "(no data)";
  const size_t w = std::max<size_t>(1, width);
  std::vector<double> ys;  // bucket means when there are more values than columns
  if (pts.size() <= w) {
    for (const PlotPoint& p : pts) ys.push_back(p.y);
  } else {
    for (size_t b = 0; b < w; ++b) {
      size_t lo = b * pts.size() / w, hi = (b + 1) * pts.size() / w;
      double sum = 0;
      for (size_t i = lo; i < hi; ++i) sum += pts[i].y;
      ys.push_back(sum / static_cast<double>(hi - lo));
    }
  }
  static const char* kBars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  double lo = pts[0].y, hi = pts[0].y;
  for (const PlotPoint& p : pts) lo = std::min(lo, p.y), hi = std::max(hi, p.y);
  std::string s;
  for (double y : ys) {
    int level = hi > lo ? static_cast<int>(std::lround((y - lo) / (hi - lo) * 7)) : 0;
    s += kBars[std::clamp(level, 0, 7)];
  }
  s += fmt::format("  min {}  max {}  last {}", short_number(lo), short_number(hi),
                   short_number(pts.back().y));
  return s;
}

}  // namespace eng
