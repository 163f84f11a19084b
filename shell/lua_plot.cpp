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

#include "engine/base/line_plot.h"
#include "shell/bindings.h"
#include "shell/lua_binding.h"
#include "shell/notebook.h"

namespace shell {
namespace {

using Point = eng::PlotPoint;
using Series = eng::PlotSeries;
using LineOptions = eng::LinePlotOptions;

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

Result<int> plot_spark(lua_State* L) {
  constexpr std::string_view fn = "plot.spark";
  ENG_ASSIGN_OR_RETURN(std::vector<Point> pts, read_points(L, 1, fn, "xs"));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> width, opt_int(L, 2, fn, "width"));
  const std::string s =
      eng::sparkline(pts, static_cast<size_t>(std::max<int64_t>(1, width.value_or(60))));
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

// ---- plot.line -----------------------------------------------------------------------------

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
  std::string svg = eng::line_plot_svg(series, o);
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
