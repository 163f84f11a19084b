// engine/train/search_svg.cpp: the Pareto front of a search (search.h) as an SVG scatter plot:
// peak memory per device against the ranking's measure, every planned candidate a point, the
// front of those no other candidate beats on both as a line, the device's HBM as a limit.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/base/text.h"
#include "engine/train/search.h"

namespace eng {
namespace {

constexpr double kWidth = 720, kHeight = 420, kLeft = 70, kRight = 20, kTop = 36, kBottom = 50;

struct Point {
  double x = 0;  // peak GiB
  double y = 0;  // tokens/s per device, or step seconds
  const SearchCandidate* c = nullptr;
};

double nice_ceiling(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

}  // namespace

std::vector<size_t> SearchResult::pareto_front() const {
  const bool by_time = rank == SearchRank::kStepTime;
  auto better_y = [&](const SearchCandidate& a, const SearchCandidate& b) {
    return by_time ? a.predicted.step_time_s < b.predicted.step_time_s
                   : a.predicted.tokens_per_s_per_device > b.predicted.tokens_per_s_per_device;
  };
  std::vector<size_t> planned_ids;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].planned) planned_ids.push_back(i);
  // By peak ascending (ties: the better measure first); a point is on the front when it beats
  // every point with a smaller or equal peak.
  std::stable_sort(planned_ids.begin(), planned_ids.end(), [&](size_t a, size_t b) {
    const SearchCandidate& x = candidates[a];
    const SearchCandidate& y = candidates[b];
    if (x.predicted.peak_bytes != y.predicted.peak_bytes)
      return x.predicted.peak_bytes < y.predicted.peak_bytes;
    return better_y(x, y);
  });
  std::vector<size_t> front;
  for (size_t i : planned_ids)
    if (front.empty() || better_y(candidates[i], candidates[front.back()])) front.push_back(i);
  return front;
}

std::string SearchResult::pareto_svg() const {
  const bool by_time = rank == SearchRank::kStepTime;
  std::vector<Point> points;
  double max_x = 0, max_y = 0, hbm = 0;
  for (const SearchCandidate& c : candidates) {
    if (!c.planned) continue;
    Point p{static_cast<double>(c.predicted.peak_bytes) / (1 << 30),
            by_time ? c.predicted.step_time_s : c.predicted.tokens_per_s_per_device, &c};
    max_x = std::max(max_x, p.x);
    max_y = std::max(max_y, p.y);
    hbm = static_cast<double>(c.predicted.hbm_bytes) / (1 << 30);
    points.push_back(p);
  }
  max_x = nice_ceiling(std::max(max_x, hbm) * 1.05);
  max_y = nice_ceiling(max_y * 1.05);
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto sx = [&](double x) { return kLeft + x / max_x * pw; };
  auto sy = [&](double y) { return kTop + ph - y / max_y * ph; };
  const char* ylabel = by_time ? "predicted step time (s)" : "predicted tokens/s per device";
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"20\" font-size=\"14\">{3}</text>\n",
      kWidth, kHeight, kLeft,
      xml_escape(fmt::format("search on {}: {} planned, {} fit (Pareto front: memory vs {})",
                             topology, planned, fitting, by_time ? "step time" : "throughput")));
  for (int k = 0; k <= 5; ++k) {  // axes and ticks
    const double xv = max_x * k / 5, yv = max_y * k / 5;
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4:.4g}</text>\n",
        sx(xv), kTop, kTop + ph, kTop + ph + 16, xv);
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:.4g}</text>\n",
        kLeft, sy(yv), kLeft + pw, kLeft - 6, sy(yv) + 4, yv);
  }
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">peak memory per device (GiB)</text>\n"
      "<text x=\"14\" y=\"{:.1f}\" transform=\"rotate(-90 14 {:.1f})\" "
      "text-anchor=\"middle\">{}</text>\n",
      kLeft + pw / 2, kHeight - 10, kTop + ph / 2, kTop + ph / 2, ylabel);
  if (hbm > 0)
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#c00\" "
        "stroke-dasharray=\"4 3\"/><text x=\"{3:.1f}\" y=\"{4:.1f}\" fill=\"#c00\">HBM "
        "{5:.4g} GiB</text>\n",
        sx(hbm), kTop, kTop + ph, sx(hbm) + 4, kTop + 12, hbm);
  std::string front_line;
  for (size_t i : pareto_front()) {
    const SearchCandidate& c = candidates[i];
    const double x = static_cast<double>(c.predicted.peak_bytes) / (1 << 30);
    const double y = by_time ? c.predicted.step_time_s : c.predicted.tokens_per_s_per_device;
    front_line += fmt::format("{:.1f},{:.1f} ", sx(x), sy(y));
  }
  if (!front_line.empty())
    out += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"#e67e22\" "
                       "stroke-width=\"2\"/>\n",
                       front_line);
  for (const Point& p : points) {
    const bool fits = p.c->predicted.fits;
    out += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\" stroke=\"{}\"><title>{}</title>"
        "</circle>\n",
        sx(p.x), sy(p.y), p.c->rank == 1 ? 6 : 4, fits ? "#2b6cb0" : "white",
        fits ? "#2b6cb0" : "#888",
        xml_escape(fmt::format("{}: {:.4g} GiB, {:.4g} s, {:.1f} tokens/s/device{}", p.c->label(),
                               p.x, p.c->predicted.step_time_s,
                               p.c->predicted.tokens_per_s_per_device,
                               p.c->rank > 0 ? fmt::format(", rank {}", p.c->rank)
                                             : std::string(", does not fit"))));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace eng
