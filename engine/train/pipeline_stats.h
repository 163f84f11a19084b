// engine/train/pipeline_stats.h: the numbers behind t:pipeline() / c:pipeline() (docs/
// sharding.md "Pipeline"): the bubble fraction counted from the schedule's cells, what the
// compiled per-device program does in each iteration, the measured share of a timed step spent
// in bubble cells, the per-collective summary of a program, and the schedule printed as a
// Gantt chart. The shell turns them into Lua values (and draws the SVG).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/compile/executable.h"
#include "engine/model/pipeline_schedule.h"
#include "engine/train/config.h"

namespace eng {

// The schedule shape a config's pipeline runs (what the engine traces, model/pipeline.h);
// nullopt when it has none (one stage).
std::optional<PipelineShape> pipeline_shape_of(const ResolvedConfig& c);

// The schedule's numbers, counted from its cells (not from the closed form).
struct PipelineCounts {
  int64_t cells = 0, bubbles = 0;
  std::string fraction() const;  // "3/19"
  double value() const { return cells ? static_cast<double>(bubbles) / cells : 0.0; }
};
PipelineCounts count_cells(const PipelineSchedule& s);

// What the compiled per-device program does in each iteration (ValueInfo::pipeline_iteration).
struct IterationStatic {
  int64_t instructions = 0;
  std::map<std::string, double> collective_bytes;  // by mesh axes, one device, per step
};
std::vector<IterationStatic> iteration_statics(const Program& p, int64_t iterations);

// Instruction seconds of the last timed step, charged per device to the iteration (and so to
// the (iteration, stage) cell of the device's stage) its instruction belongs to.
struct PipelineMeasured {
  double step_s = 0, pipeline_s = 0, bubble_s = 0;  // device-seconds summed over devices
  std::vector<double> iteration_s;                  // per iteration, mean over devices
  int devices = 0;
  double bubble_share() const { return step_s > 0 ? bubble_s / step_s : 0; }
  double bubble_share_of_pipeline() const { return pipeline_s > 0 ? bubble_s / pipeline_s : 0; }
};
// seconds: per device, per instruction of exe's program (Runtime::instr_seconds); nullopt
// when they do not match the program (no timed step yet).
std::optional<PipelineMeasured> measure_pipeline(const Executable& exe, const PipelineSchedule& s,
                                                 std::span<const double> seconds);

// One row per (collective op, mesh axes) of a per-device program: count, bytes one device
// receives per step, and how many run inside pipeline iterations. Sorted by (op, axes).
struct CollectiveRow {
  std::string op, axes;
  int64_t count = 0, in_pipeline = 0;
  double bytes = 0;
};
std::vector<CollectiveRow> collective_rows(const Program& p);

// A cell as the grid prints it: "m3" (or "m3r1" with repeats), "." for a bubble.
std::string pipeline_cell_label(const ScheduleCell& c, bool repeats);
// The grid as a Gantt chart (one row per stage, one column per iteration, in blocks under 80
// columns), the bubble fraction and, when measured, the bubble shares.
std::string render_pipeline_text(const PipelineSchedule& s, const PipelineCounts& c,
                                 const std::optional<PipelineMeasured>& m);

}  // namespace eng
