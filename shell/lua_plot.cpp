// shell/lua_plot.cpp: the `plot` module (also sl.plot): terminal sparklines and SVG line plots of store rows.
//
//   plot.spark(sl.sql("SELECT loss FROM steps WHERE run_id = ?", id))   --> ▇▆▄▃▂▂▁▁  min 2.31 max 5.55 last 2.31
//   plot.line{["data=2"] = rows_a, ["fsdp=2"] = rows_b, title = "loss", logy = true}  --> "<svg ...>"
//
// A series is an array of numbers (x = 1..n), of {x, y} pairs, or of rows (tables keyed by column
// name, as sl.sql returns). For rows: x is the column `step` (else `x`, else the first numeric
// column) and y the column `loss` (else `value`, else `y`, else the first other numeric column);
// column order comes from rows.columns when present, else the first row's keys sorted.
// Everything is read raw (no metamethods): plotting never runs user code.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/base/text.h"
#include "shell/bindings.h"
#include "shell/lua_binding.h"
#include "shell/notebook.h"

namespace shell {
namespace {

struct Point {
  double x, y;
};
struct Series {
  std::string name;
  std::vector<Point> points;
};

// The number at t[key] (raw), if it is one.
std::optional<double> raw_number(lua_State* L, int t, const char* key) {
  lua_pushstring(L, key);
  std::optional<double> v;
  if (lua_rawget(L, t) == LUA_TNUMBER) v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}
std::optional<double> raw_index(lua_State* L, int t, lua_Integer i) {
  std::optional<double> v;
  if (lua_rawgeti(L, t, i) == LUA_TNUMBER) v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}

// Column names of a rows table: rows.columns through the metatable's __index table (sl.sql),
// else the first row's string keys, sorted.
std::vector<std::string> row_columns(lua_State* L, int rows, int first_row) {
  std::vector<std::string> cols;
  if (lua_getmetatable(L, rows)) {
    lua_pushstring(L, "__index");
    if (lua_rawget(L, -2) == LUA_TTABLE) {
      lua_pushstring(L, "columns");
      if (lua_rawget(L, -2) == LUA_TTABLE) {
        for (lua_Integer i = 1; lua_rawgeti(L, -1, i) == LUA_TSTRING; ++i) {
          cols.emplace_back(lua_tostring(L, -1));
          lua_pop(L, 1);
        }
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  if (!cols.empty()) return cols;
  lua_pushnil(L);
  while (lua_next(L, first_row) != 0) {
    if (lua_type(L, -2) == LUA_TSTRING) cols.emplace_back(lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  std::sort(cols.begin(), cols.end());
  return cols;
}

// Which columns give x and y (see the file comment); empty strings when none fits.
std::pair<std::string, std::string> pick_xy(lua_State* L, int first_row,
                                            const std::vector<std::string>& cols) {
  auto has = [&](const std::string& c) {
    return std::find(cols.begin(), cols.end(), c) != cols.end() && raw_number(L, first_row, c.c_str());
  };
  std::vector<std::string> numeric;
  for (const std::string& c : cols)
    if (raw_number(L, first_row, c.c_str())) numeric.push_back(c);
  std::string x, y;
  for (const char* c : {"step", "x"})
    if (x.empty() && has(c)) x = c;
  for (const char* c : {"loss", "value", "y"})
    if (y.empty() && has(c) && c != x) y = c;
  for (const std::string& c : numeric)
    if (x.empty() && c != y) x = c;
  for (const std::string& c : numeric)
    if (y.empty() && c != x) y = c;
  return {x, y};
}

// Reads one series from the table at idx. Non-numeric or missing values are skipped.
Result<std::vector<Point>> read_points(lua_State* L, int idx, std::string_view fn, std::string_view name) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE)
    return arg_error(L, idx, fn, name, "an array of numbers, {x, y} pairs or rows");
  std::vector<Point> pts;
  int first = lua_rawgeti(L, idx, 1);
  if (first == LUA_TNIL) {
    lua_pop(L, 1);
    return pts;
  }
  std::string xcol, ycol;
  if (first == LUA_TTABLE && !raw_index(L, lua_gettop(L), 1)) {
    std::vector<std::string> cols = row_columns(L, idx, lua_gettop(L));
    std::tie(xcol, ycol) = pick_xy(L, lua_gettop(L), cols);
    if (ycol.empty()) {
      lua_pop(L, 1);
      return eng::invalid_argument("{}: series '{}': rows have no numeric column to plot", fn, name);
    }
  }
  lua_pop(L, 1);
  for (lua_Integer i = 1;; ++i) {
    int t = lua_rawgeti(L, idx, i);
    if (t == LUA_TNIL) {
      lua_pop(L, 1);
      break;
    }
    std::optional<double> x, y;
    if (t == LUA_TNUMBER) {
      x = static_cast<double>(i);
      y = lua_tonumber(L, -1);
    } else if (t == LUA_TTABLE) {
      int row = lua_gettop(L);
      if (ycol.empty()) {
        x = raw_index(L, row, 1);
        y = raw_index(L, row, 2);
      } else {
        x = xcol.empty() ? std::optional<double>(static_cast<double>(i)) : raw_number(L, row, xcol.c_str());
        y = raw_number(L, row, ycol.c_str());
      }
    }
    lua_pop(L, 1);
    if (x && y && std::isfinite(*x) && std::isfinite(*y)) pts.push_back({*x, *y});
  }
  return pts;
}

// ---- plot.spark ----------------------------------------------------------------------------

std::string short_number(double v) { return fmt::format("{:.4g}", v); }

Result<int> plot_spark(lua_State* L) {
  constexpr std::string_view fn = "plot.spark";
  ENG_ASSIGN_OR_RETURN(std::vector<Point> pts, read_points(L, 1, fn, "xs"));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> width, opt_int(L, 2, fn, "width"));
  if (pts.empty()) {
    lua_pushstring(L, "(no data)");
    return 1;
  }
  const size_t w = static_cast<size_t>(std::max<int64_t>(1, width.value_or(60)));
  std::vector<double> ys;  // bucket means when there are more values than columns
  if (pts.size() <= w) {
    for (const Point& p : pts) ys.push_back(p.y);
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
  for (const Point& p : pts) lo = std::min(lo, p.y), hi = std::max(hi, p.y);
  std::string s;
  for (double y : ys) {
    int level = hi > lo ? static_cast<int>(std::lround((y - lo) / (hi - lo) * 7)) : 0;
    s += kBars[std::clamp(level, 0, 7)];
  }
  s += fmt::format("  min {}  max {}  last {}", short_number(lo), short_number(hi),
                   short_number(pts.back().y));
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

// ---- plot.line -----------------------------------------------------------------------------

using eng::xml_escape;

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

struct LineOptions {
  std::string title, xlabel = "step", ylabel;
  bool logy = false;
  int width = 640, height = 360;
  std::optional<double> ema;  // smoothing factor in [0, 1): draws the smoothed curve over the raw one
};

constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string render_svg(const std::vector<Series>& series, const LineOptions& o) {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  auto ty = [&](double y) { return o.logy ? std::log10(y) : y; };
  for (const Series& s : series)
    for (const Point& p : s.points) {
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
  auto polyline = [&](const std::vector<Point>& pts, const char* color, const char* extra) {
    std::string p;
    for (const Point& q : pts) p += fmt::format("{:.1f},{:.1f} ", sx(q.x), sy(ty(q.y)));
    if (!p.empty()) p.pop_back();
    return fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"{} points=\"{}\"/>\n", color,
                       extra, p);
  };
  for (size_t i = 0; i < series.size(); ++i) {  // every other series dashed: equal curves stay visible
    const char* color = kColors[i % std::size(kColors)];
    svg += fmt::format("<g class=\"series\" data-name=\"{}\"{}>\n", xml_escape(series[i].name),
                       i % 2 ? " stroke-dasharray=\"7 4\"" : "");
    if (o.ema) {
      std::vector<Point> smooth = series[i].points;
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
    for (const Series& s : series) longest = std::max(longest, s.name.size());
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

Result<int> plot_line(lua_State* L) {
  constexpr std::string_view fn = "plot.line";
  ENG_RETURN_IF_ERROR(arg_table(L, 1, fn, "options"));
  LineOptions o;
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> title, field_string(L, 1, "title", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> xlabel, field_string(L, 1, "xlabel", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<std::string> ylabel, field_string(L, 1, "ylabel", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<bool> logy, field_bool(L, 1, "logy", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> width, field_int(L, 1, "width", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> height, field_int(L, 1, "height", fn));
  ENG_ASSIGN_OR_RETURN(o.ema, field_number(L, 1, "ema", fn));
  o.title = title.value_or("");
  o.xlabel = xlabel.value_or("step");
  o.ylabel = ylabel.value_or("");
  o.logy = logy.value_or(false);
  o.width = static_cast<int>(std::clamp<int64_t>(width.value_or(640), 200, 4000));
  o.height = static_cast<int>(std::clamp<int64_t>(height.value_or(360), 150, 3000));
  if (o.ema && (*o.ema < 0 || *o.ema >= 1))
    return eng::invalid_argument("{}: ema must be in [0, 1), got {}", fn, *o.ema);
  static const std::vector<std::string> kReserved = {"title", "xlabel", "ylabel", "logy", "width", "height", "ema"};
  std::vector<std::string> names;
  lua_pushnil(L);
  while (lua_next(L, 1) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pop(L, 1);
      return eng::invalid_argument("{}: series must be named (plot.line{{loss = rows}}), got a {} key", fn,
                                   luaL_typename(L, -1));
    }
    std::string k = lua_tostring(L, -1);
    if (std::find(kReserved.begin(), kReserved.end(), k) == kReserved.end()) names.push_back(k);
  }
  if (names.empty()) return eng::invalid_argument("{}: no series given (plot.line{{loss = rows}})", fn);
  std::sort(names.begin(), names.end());
  std::vector<Series> series;
  for (const std::string& name : names) {
    push_field(L, 1, name.c_str());
    Result<std::vector<Point>> pts = read_points(L, -1, fn, name);
    lua_pop(L, 1);
    if (!pts.ok()) return pts.status();
    if (o.logy) std::erase_if(*pts, [](const Point& p) { return p.y <= 0; });
    series.push_back({name, std::move(pts).value()});
  }
  if (o.ylabel.empty() && series.size() == 1) o.ylabel = series[0].name;
  std::string svg = render_svg(series, o);
  lua_pushlstring(L, svg.data(), svg.size());
  return 1;
}

// ---- plot.save / plot.show -----------------------------------------------------------------

Result<int> plot_save(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(std::string svg, arg_string(L, 1, "plot.save", "svg"));
  ENG_ASSIGN_OR_RETURN(std::string path, arg_string(L, 2, "plot.save", "path"));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return eng::invalid_argument("plot.save: cannot write '{}'", path);
  bool ok = std::fwrite(svg.data(), 1, svg.size(), f) == svg.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return eng::invalid_argument("plot.save: error writing '{}'", path);
  lua_pushstring(L, path.c_str());
  return 1;
}

Result<int> plot_show(lua_State* L) {
  ENG_ASSIGN_OR_RETURN(std::string svg, arg_string(L, 1, "plot.show", "svg"));
  if (!is_svg(svg)) return arg_error(L, 1, "plot.show", "svg", "an SVG string (from plot.line)");
  if (!notebook_display(L, svg)) {
    std::printf("%s\n", svg_summary(svg).c_str());
    std::fflush(stdout);
  }
  return 0;
}

constexpr Function kPlotFunctions[] = {
    {"spark", lua_entry<plot_spark>, "plot.spark(xs [, width]) -> string",
     "A terminal sparkline (▁▂▃▄▅▆▇█) of xs with its min, max and last value. xs: numbers, {x, y}\n"
     "  pairs or rows (sl.sql: y is loss, value or the first numeric column other than step).\n"
     "  More values than width (default 60) are averaged into width buckets."},
    {"line", lua_entry<plot_line>,
     "plot.line{name = rows, ..., title=, xlabel=\"step\", ylabel=, logy=false, ema=, width=640, height=360} -> svg",
     "An SVG line plot, one polyline per named series (sorted by name, a legend when there are\n"
     "  several). A series is an array of numbers, {x, y} pairs or rows: x = step (else x, else the\n"
     "  first numeric column), y = loss (else value, y, else the next numeric column); rows.columns\n"
     "  gives the column order. logy=true plots log10(y) (y <= 0 dropped); ema=0.9 overlays the\n"
     "  exponential moving average. In a notebook a returned SVG renders as an image."},
    {"save", lua_entry<plot_save>, "plot.save(svg, path) -> path", "Writes an SVG string to a file."},
    {"show", lua_entry<plot_show>, "plot.show(svg)",
     "In a notebook (--notebook, %run): shows the plot at this point of the cell's output. Elsewhere\n"
     "  prints a one-line summary (use plot.save to keep it)."},
};

}  // namespace

void open_lua_plot(lua_State* L, int sl) {
  lua_createtable(L, 0, static_cast<int>(std::size(kPlotFunctions)));
  int plot = lua_gettop(L);
  add_functions(L, plot, "plot", kPlotFunctions);
  set_doc(L, plot, "plot",
          "plot: plot.spark(xs) terminal sparklines, plot.line{name = rows, ...} SVG line plots,\n"
          "  plot.save(svg, path), plot.show(svg). Also sl.plot and require \"plot\".");
  lua_pushvalue(L, plot);
  lua_setfield(L, sl, "plot");
  lua_pushvalue(L, plot);
  lua_setglobal(L, "plot");
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, plot);
  lua_setfield(L, -2, "plot");
  lua_pop(L, 2);
}

}  // namespace shell
