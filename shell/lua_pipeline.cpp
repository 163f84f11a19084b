// shell/lua_pipeline.cpp: the pipeline schedule as a Lua value: t:pipeline() / c:pipeline()
// return the iteration x stage grid (engine/model/pipeline_schedule.h), the bubble fraction
// counted from it, per-iteration instructions and collectives of the compiled program, and
// (t:pipeline{measure=true}, then steps) the measured share of step time in bubble slots; the
// numbers and the printed grid are engine/train/pipeline_stats.h's, the SVG is drawn here.
#include "shell/lua_pipeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/train/pipeline_stats.h"
#include "shell/pretty.h"

namespace shell {
namespace {

// A Gantt-like SVG: stages as rows, iterations as columns, cells labelled m<microbatch>
// (r<repeat>), coloured by repeat, bubbles grey.
std::string render_svg(const eng::PipelineSchedule& s, const eng::PipelineCounts& c,
                       const std::optional<eng::PipelineMeasured>& m) {
  static constexpr const char* kRepeatFill[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1",
                                                "#76b7b2", "#edc948"};
  const bool repeats = s.shape().repeats > 1;
  const int64_t S = s.shape().stages, I = s.iterations();
  const int cw = repeats ? 40 : 30, rh = 26, left = 64, top = 44;
  const int64_t width = std::max<int64_t>(left + I * cw + 16, 560), height = top + S * rh + 40;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n",
      width, height, width, height);
  out += fmt::format("<text x=\"{}\" y=\"16\" font-size=\"13\">pipeline S={} M={} R={} delay {}: "
                     "{} iterations, bubble fraction {}</text>\n",
                     left, S, s.shape().microbatches, s.shape().repeats, s.shape().delay, I,
                     c.fraction());
  for (int64_t i = 0; i < I; ++i)
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n",
                       left + i * cw + cw / 2, top - 6, i);
  for (int64_t st = 0; st < S; ++st) {
    const int64_t y = top + st * rh;
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">stage {}</text>\n", left - 6,
                       y + rh / 2 + 4, st);
    for (int64_t i = 0; i < I; ++i) {
      const eng::ScheduleCell cell = s.cell(i, st);
      const char* fill = cell.bubble() ? "#d9d9d9" : kRepeatFill[cell.repeat % 6];
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" "
                         "stroke=\"#fff\"><title>iteration {}, stage {}: {}</title></rect>\n",
                         left + i * cw, y, cw, rh, fill, i, st,
                         cell.bubble() ? "bubble"
                                       : fmt::format("microbatch {}, repeat {}", cell.microbatch,
                                                     cell.repeat));
      if (!cell.bubble())
        out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#fff\">{}</text>\n",
                           left + i * cw + cw / 2, y + rh / 2 + 4, eng::pipeline_cell_label(cell, repeats));
    }
  }
  std::string note = "grey: bubble";
  if (m)
    note += fmt::format("; measured bubble share {:.1f}% of pipeline time, {:.1f}% of step time",
                        100 * m->bubble_share_of_pipeline(), 100 * m->bubble_share());
  out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">{}</text>\n</svg>\n", left,
                     top + S * rh + 22, note);
  return out;
}

void set_number(lua_State* L, const char* k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}
void set_int(lua_State* L, const char* k, int64_t v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

// grid[i + 1][s + 1] = {iteration = i, stage = s, microbatch_id, repeat_id, bubble}.
void push_grid(lua_State* L, const eng::PipelineSchedule& s) {
  lua_createtable(L, static_cast<int>(s.iterations()), 0);
  for (int64_t i = 0; i < s.iterations(); ++i) {
    lua_createtable(L, static_cast<int>(s.shape().stages), 0);
    for (int64_t st = 0; st < s.shape().stages; ++st) {
      const eng::ScheduleCell c = s.cell(i, st);
      lua_createtable(L, 0, 5);
      set_int(L, "iteration", i);
      set_int(L, "stage", st);
      lua_pushboolean(L, c.bubble());
      lua_setfield(L, -2, "bubble");
      if (!c.bubble()) {
        set_int(L, "microbatch_id", c.microbatch);
        set_int(L, "repeat_id", c.repeat);
      }
      lua_rawseti(L, -2, st + 1);
    }
    lua_rawseti(L, -2, i + 1);
  }
}

// per_iteration rows: iteration, instructions, collective bytes per axis, measured seconds.
void push_per_iteration(lua_State* L, const std::vector<eng::IterationStatic>& statics,
                        const std::optional<eng::PipelineMeasured>& m) {
  lua_createtable(L, static_cast<int>(statics.size()), 0);
  for (size_t i = 0; i < statics.size(); ++i) {
    lua_createtable(L, 0, 4);
    set_int(L, "iteration", static_cast<int64_t>(i));
    set_int(L, "instructions", statics[i].instructions);
    std::string axes;
    lua_createtable(L, 0, static_cast<int>(statics[i].collective_bytes.size()));
    for (const auto& [axis, bytes] : statics[i].collective_bytes) {
      set_number(L, axis.c_str(), bytes);
      axes += fmt::format("{}{}={:.0f}", axes.empty() ? "" : " ", axis, bytes);
    }
    lua_setfield(L, -2, "collective_bytes");
    lua_pushstring(L, axes.c_str());
    lua_setfield(L, -2, "collectives");
    if (m) set_number(L, "seconds", m->iteration_s[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  set_rows_metatable(L, -1, {"iteration", "instructions", "collectives", "seconds"});
}

void push_measured(lua_State* L, const eng::PipelineMeasured& m) {
  lua_createtable(L, 0, 6);
  set_int(L, "devices", m.devices);
  set_number(L, "step_s", m.step_s);
  set_number(L, "pipeline_s", m.pipeline_s);
  set_number(L, "bubble_s", m.bubble_s);
  set_number(L, "bubble_share", m.bubble_share());
  set_number(L, "bubble_share_of_pipeline", m.bubble_share_of_pipeline());
}

// __tostring and :svg(): the text rendered once when the value was made (upvalue 1).
int rendered_text(lua_State* L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  return 1;
}

// The Pipeline value: fields, plus a metatable whose __tostring prints the grid, whose
// __index has :svg() and whose __svg a notebook draws.
void push_pipeline(lua_State* L, const eng::PipelineSchedule& s, const eng::Executable* exe,
                   const std::optional<eng::PipelineMeasured>& m) {
  const eng::PipelineShape& sh = s.shape();
  const eng::PipelineCounts c = eng::count_cells(s);
  ENG_CHECK(std::abs(c.value() - s.bubble_fraction()) < 1e-12,
            "pipeline: counted bubble fraction {} differs from the schedule's {}", c.value(),
            s.bubble_fraction());
  lua_createtable(L, 0, 20);
  set_int(L, "S", sh.stages);
  set_int(L, "M", sh.microbatches);
  set_int(L, "R", sh.repeats);
  set_int(L, "delay", sh.delay);
  set_int(L, "layers_per_stage", sh.layers_per_stage);
  set_int(L, "iterations", s.iterations());
  set_int(L, "bubble_iterations", s.bubble_iterations());
  set_int(L, "cells", c.cells);
  set_int(L, "bubble_cells", c.bubbles);
  set_number(L, "bubble_fraction", c.value());
  lua_pushstring(L, c.fraction().c_str());
  lua_setfield(L, -2, "bubble_fraction_text");
  lua_pushstring(L, s.rotates() ? "rotate" : "shift");
  lua_setfield(L, -2, "movement");
  lua_pushboolean(L, s.uses_circ_storage());
  lua_setfield(L, -2, "circ_storage");
  push_grid(L, s);
  lua_setfield(L, -2, "grid");
  if (exe) {
    push_per_iteration(L, eng::iteration_statics(exe->program(), s.iterations()), m);
    lua_setfield(L, -2, "per_iteration");
  }
  if (m) {
    push_measured(L, *m);
    lua_setfield(L, -2, "measured");
  }
  lua_createtable(L, 0, 3);  // the metatable
  lua_pushstring(L, "Pipeline");
  lua_setfield(L, -2, "__name");
  lua_pushstring(L, eng::render_pipeline_text(s, c, m).c_str());
  lua_pushcclosure(L, rendered_text, 1);
  lua_setfield(L, -2, "__tostring");
  const std::string svg = render_svg(s, c, m);
  lua_pushstring(L, svg.c_str());
  lua_setfield(L, -2, "__svg");  // a notebook cell whose value this is draws it (notebook.cpp)
  lua_createtable(L, 0, 1);
  lua_pushstring(L, svg.c_str());
  lua_pushcclosure(L, rendered_text, 1);
  lua_setfield(L, -2, "svg");
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
}

Result<eng::PipelineSchedule> schedule_of(const std::optional<eng::PipelineShape>& shape,
                                          std::string_view fn) {
  if (!shape)
    return eng::failed_precondition(
        "{}: this run has no pipeline (ici_pipeline_parallelism = 1: the `stage` axis has size "
        "1); set ici_pipeline_parallelism > 1 on a mesh with stage = that size",
        fn);
  return with_context(fn, eng::PipelineSchedule::make(*shape));
}

}  // namespace


Result<int> push_trainer_pipeline(lua_State* L, eng::Trainer& t) {
  constexpr std::string_view fn = "Trainer:pipeline";
  std::optional<bool> measure_on;
  if (!lua_isnoneornil(L, 2)) {
    ENG_RETURN_IF_ERROR(arg_table(L, 2, fn, "options"));
    static const std::vector<std::string> kAllowed = {"measure"};
    ENG_RETURN_IF_ERROR(check_keys(L, 2, fn, kAllowed));
    ENG_ASSIGN_OR_RETURN(measure_on, field_bool(L, 2, "measure", fn));
  }
  ENG_ASSIGN_OR_RETURN(eng::PipelineSchedule s, schedule_of(eng::pipeline_shape_of(t.config()), fn));
  // The program the steps run; compiled (once, recorded as compiles are) only if none exists.
  std::shared_ptr<const eng::Executable> exe = t.current_executable();
  if (!exe) {
    ENG_ASSIGN_OR_RETURN(exe, with_context(fn, t.compile()));
  }
  std::optional<eng::PipelineMeasured> m;
  if (t.runtime() != nullptr) {
    ENG_RETURN_IF_ERROR(with_context(fn, t.wait_all()));  // no step of exe in flight
    m = eng::measure_pipeline(*exe, s, t.runtime()->instr_seconds(*exe));
  }
  if (measure_on) {
    if (t.runtime() == nullptr)
      return eng::failed_precondition("{}: a shape_only trainer runs no steps to measure", fn);
    ENG_RETURN_IF_ERROR(with_context(fn, t.runtime()->set_timing(*exe, *measure_on)));
  }
  push_pipeline(L, s, exe.get(), m);
  return 1;
}

namespace {

// sl.pipeline_schedule{stages=, microbatches=[, repeats=1, delay=1, layers_per_stage=1]}.
Result<int> pipeline_schedule(lua_State* L) {
  constexpr std::string_view fn = "sl.pipeline_schedule";
  ENG_RETURN_IF_ERROR(arg_table(L, 1, fn, "shape"));
  static const std::vector<std::string> kAllowed = {"stages", "microbatches", "repeats", "delay",
                                                    "layers_per_stage"};
  ENG_RETURN_IF_ERROR(check_keys(L, 1, fn, kAllowed));
  eng::PipelineShape shape;
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> stages, field_int(L, 1, "stages", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> micro, field_int(L, 1, "microbatches", fn));
  if (!stages || !micro)
    return eng::invalid_argument("{}: stages and microbatches are required, e.g. "
                                 "sl.pipeline_schedule{{stages = 4, microbatches = 8}}",
                                 fn);
  shape.stages = *stages;
  shape.microbatches = *micro;
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> repeats, field_int(L, 1, "repeats", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> delay, field_int(L, 1, "delay", fn));
  ENG_ASSIGN_OR_RETURN(std::optional<int64_t> lps, field_int(L, 1, "layers_per_stage", fn));
  shape.repeats = repeats.value_or(1);
  shape.delay = delay.value_or(1);
  shape.layers_per_stage = lps.value_or(1);
  ENG_ASSIGN_OR_RETURN(eng::PipelineSchedule s, with_context(fn, eng::PipelineSchedule::make(shape)));
  push_pipeline(L, s, nullptr, std::nullopt);
  return 1;
}

constexpr Function kPipelineFunctions[] = {
    {"pipeline_schedule", lua_entry<pipeline_schedule>,
     "sl.pipeline_schedule{stages=S, microbatches=M [, repeats=1, delay=1, layers_per_stage=1]} -> Pipeline",
     "MaxText's pipeline schedule for a shape, without a trainer: the value t:pipeline() gives\n"
     "  (grid, bubble fraction, Gantt print, p:svg()), with no compiled program behind it."},
};

}  // namespace

void open_lua_pipeline(lua_State* L, int sl) { add_functions(L, sl, "sl", kPipelineFunctions); }

Result<int> push_compiled_pipeline(lua_State* L, const CompiledBox& c) {
  ENG_ASSIGN_OR_RETURN(eng::PipelineSchedule s, schedule_of(c.pipeline, "Compiled:pipeline"));
  push_pipeline(L, s, c.exe.get(), std::nullopt);
  return 1;
}

void push_collective_rows(lua_State* L, const eng::Program& p) {
  const std::vector<eng::CollectiveRow> rows = eng::collective_rows(p);
  lua_createtable(L, static_cast<int>(rows.size()), 0);
  int k = 0;
  for (const eng::CollectiveRow& r : rows) {
    lua_createtable(L, 0, 5);
    lua_pushstring(L, r.op.c_str());
    lua_setfield(L, -2, "op");
    lua_pushstring(L, r.axes.c_str());
    lua_setfield(L, -2, "axes");
    set_int(L, "count", r.count);
    set_number(L, "bytes", r.bytes);
    set_int(L, "in_pipeline", r.in_pipeline);
    lua_rawseti(L, -2, ++k);
  }
  set_rows_metatable(L, -1, {"op", "axes", "count", "bytes", "in_pipeline"});
}

}  // namespace shell
