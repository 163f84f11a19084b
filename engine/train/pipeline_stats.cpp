// engine/train/pipeline_stats.cpp: a pipeline schedule's counted numbers, per-iteration
// statics and measurements, collective rows, and its printed grid.
#include "engine/train/pipeline_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "engine/compile/spmd.h"
#include "engine/model/pipeline.h"

namespace eng {

namespace {

std::string header_line(const PipelineSchedule& s) {
  const PipelineShape& sh = s.shape();
  std::string movement = s.rotates() ? fmt::format("rotate (stage {} feeds stage 0)", sh.stages - 1)
                         : s.uses_circ_storage() ? "shift + circ_storage"
                                                 : "shift";
  return fmt::format(
      "Pipeline(S={} stages, M={} microbatches, R={} repeats, delay {}, {} layers "
      "per stage: {} iterations, {})",
      sh.stages, sh.microbatches, sh.repeats, sh.delay, sh.layers_per_stage, s.iterations(),
      movement);
}

}  // namespace

std::optional<PipelineShape> pipeline_shape_of(const ResolvedConfig& c) {
  if (c.model.pipeline_stages <= 1) return std::nullopt;
  return pipeline_schedule(c.model).shape();  // what the engine traces (pipeline.h)
}

// The schedule's numbers, counted from its cells (not from the closed form).
std::string PipelineCounts::fraction() const {
  const int64_t g = std::gcd(bubbles, cells);
  return fmt::format("{}/{}", bubbles / g, cells / g);
}

PipelineCounts count_cells(const PipelineSchedule& s) {
  PipelineCounts c;
  for (int64_t i = 0; i < s.iterations(); ++i)
    for (int64_t st = 0; st < s.shape().stages; ++st) {
      ++c.cells;
      c.bubbles += s.cell(i, st).bubble() ? 1 : 0;
    }
  return c;
}

std::vector<IterationStatic> iteration_statics(const Program& p, int64_t iterations) {
  std::vector<IterationStatic> out(static_cast<size_t>(iterations));
  for (const Instr& in : p.instrs()) {
    if (in.outputs.empty()) continue;
    const int32_t it = p.value(in.outputs[0]).pipeline_iteration;
    if (it < 0 || it >= iterations) continue;
    IterationStatic& s = out[static_cast<size_t>(it)];
    ++s.instructions;
    if (is_collective(in.kind)) {
      const double b = collective_bytes_received(p, in);
      if (b > 0) s.collective_bytes[collective_axes_key(in.attrs.mesh_axes)] += b;
    }
  }
  return out;
}

std::optional<PipelineMeasured> measure_pipeline(const Executable& exe, const PipelineSchedule& s,
                                                 std::span<const double> seconds) {
  const Program& p = exe.program();
  const size_t ni = p.instrs().size();
  const int64_t n = exe.mesh().num_devices();
  if (seconds.size() != ni * static_cast<size_t>(n)) return std::nullopt;
  const int stage_axis = exe.mesh().axis_index("stage");
  PipelineMeasured m;
  m.devices = static_cast<int>(n);
  m.iteration_s.assign(static_cast<size_t>(s.iterations()), 0.0);
  for (int64_t d = 0; d < n; ++d) {
    const int64_t stage = stage_axis < 0 ? 0 : exe.mesh().device_coords(d)[stage_axis];
    for (size_t i = 0; i < ni; ++i) {
      const double t = seconds[static_cast<size_t>(d) * ni + i];
      m.step_s += t;
      const Instr& in = p.instrs()[i];
      const int32_t it = in.outputs.empty() ? -1 : p.value(in.outputs[0]).pipeline_iteration;
      if (it < 0 || it >= s.iterations()) continue;
      m.pipeline_s += t;
      m.iteration_s[static_cast<size_t>(it)] += t / static_cast<double>(n);
      if (s.cell(it, stage).bubble()) m.bubble_s += t;
    }
  }
  return m;
}

std::string pipeline_cell_label(const ScheduleCell& c, bool repeats) {
  if (c.bubble()) return ".";
  return repeats ? fmt::format("m{}r{}", c.microbatch, c.repeat) : fmt::format("m{}", c.microbatch);
}

// The grid as a Gantt chart: one row per stage, one column per iteration, blocks of 16.
std::string render_pipeline_text(const PipelineSchedule& s, const PipelineCounts& c,
                                 const std::optional<PipelineMeasured>& m) {
  const bool repeats = s.shape().repeats > 1;
  const int w = repeats ? 6 : 4;
  std::string out = header_line(s) + "\n";
  const int64_t kBlock = repeats ? 10 : 16;  // iterations per block: under 80 columns
  for (int64_t b = 0; b < s.iterations(); b += kBlock) {
    const int64_t e = std::min(s.iterations(), b + kBlock);
    out += fmt::format("{:>9}", "iteration");
    for (int64_t i = b; i < e; ++i) out += fmt::format(" {:>{}}", i, w);
    out += "\n";
    for (int64_t st = 0; st < s.shape().stages; ++st) {
      out += fmt::format("{:>9}", fmt::format("stage {}", st));
      for (int64_t i = b; i < e; ++i)
        out += fmt::format(" {:>{}}", pipeline_cell_label(s.cell(i, st), repeats), w);
      out += "\n";
    }
  }
  out += fmt::format("bubble fraction {} = {:.4f} ({} of {} stage-iterations are bubbles: '.')",
                     c.fraction(), c.value(), c.bubbles, c.cells);
  if (m)
    out += fmt::format(
        "\nmeasured (last timed step, {} devices): bubbles {:.1f}% of pipeline time, "
        "{:.1f}% of step time ({:.3f} of {:.3f} device-seconds)",
        m->devices, 100 * m->bubble_share_of_pipeline(), 100 * m->bubble_share(), m->bubble_s,
        m->step_s);
  return out;
}

std::vector<CollectiveRow> collective_rows(const Program& p) {
  std::map<std::pair<std::string, std::string>, CollectiveRow> rows;  // (op, axes)
  for (const Instr& in : p.instrs()) {
    if (!is_collective(in.kind)) continue;
    const std::string op(op_name(in.kind)), axes = collective_axes_key(in.attrs.mesh_axes);
    CollectiveRow& r = rows[{op, axes}];
    r.op = op;
    r.axes = axes;
    ++r.count;
    r.bytes += collective_bytes_received(p, in);
    if (!in.outputs.empty() && p.value(in.outputs[0]).pipeline_iteration >= 0) ++r.in_pipeline;
  }
  std::vector<CollectiveRow> out;
  for (auto& [key, r] : rows) out.push_back(std::move(r));
  return out;
}

}  // namespace eng
