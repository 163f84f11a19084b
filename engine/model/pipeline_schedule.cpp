// engine/model/pipeline_schedule.cpp: MaxText's pipeline schedule as data (see the header).
#include "engine/model/pipeline_schedule.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "engine/base/limits.h"

namespace eng {

Result<PipelineSchedule> PipelineSchedule::make(const PipelineShape& s) {
  if (s.stages < 1)
    return invalid_argument("pipeline schedule: stages must be >= 1, got {}", s.stages);
  if (s.repeats < 1)
    return invalid_argument("pipeline schedule: num_pipeline_repeats must be >= 1, got {}",
                            s.repeats);
  if (s.layers_per_stage < 1)
    return invalid_argument("pipeline schedule: layers per stage must be >= 1, got {}",
                            s.layers_per_stage);
  if (s.delay != 1 && s.delay != 2)
    return invalid_argument("pipeline schedule: forwarding delay must be 1 or 2, got {}", s.delay);
  if (s.microbatches < 1)
    return invalid_argument("pipeline schedule: num_pipeline_microbatches must be >= 1, got {}",
                            s.microbatches);
  if (s.microbatches % s.stages != 0)
    return invalid_argument(
        "pipeline schedule: num_pipeline_microbatches {} is not divisible by "
        "the {} pipeline stages",
        s.microbatches, s.stages);
  // Each factor below the cell limit first, so that the products cannot overflow.
  for (const auto& [name, v] : {std::pair{"stages", s.stages}, {"num_pipeline_microbatches", s.microbatches},
                                {"num_pipeline_repeats", s.repeats}, {"layers per stage", s.layers_per_stage}})
    if (v > kMaxPipelineCells)
      return invalid_argument("pipeline schedule: {} {} is over the limit of {}", name, v,
                              kMaxPipelineCells);
  const int64_t cells = (s.microbatches * s.repeats + s.delay * (s.stages - 1)) * s.stages;
  if (cells > kMaxPipelineCells)
    return invalid_argument(
        "pipeline schedule: {} iterations x {} stages = {} cells, over the limit of {}",
        s.microbatches * s.repeats + s.delay * (s.stages - 1), s.stages, cells, kMaxPipelineCells);
  if (s.delay == 2 && s.stages > 1 && s.microbatches < 2 * s.stages)
    return invalid_argument(
        "pipeline schedule: pipeline_delay_activation_forwarding needs "
        "num_pipeline_microbatches >= 2 x stages, got {} microbatches for {} "
        "stages",
        s.microbatches, s.stages);
  return PipelineSchedule(s);
}

int64_t PipelineSchedule::iterations() const {
  return shape_.microbatches * shape_.repeats + bubble_iterations();
}

int64_t PipelineSchedule::bubble_iterations() const { return shape_.delay * (shape_.stages - 1); }

double PipelineSchedule::bubble_fraction() const {
  return static_cast<double>(bubble_iterations()) / static_cast<double>(iterations());
}

int64_t PipelineSchedule::processed(int64_t iteration, int64_t stage) const {
  return iteration - shape_.delay * stage;
}

ScheduleCell PipelineSchedule::cell(int64_t iteration, int64_t stage) const {
  const int64_t c = processed(iteration, stage);
  if (c < 0 || c >= shape_.microbatches * shape_.repeats) return {};
  return {c % shape_.microbatches, c / shape_.microbatches};
}

int64_t PipelineSchedule::microbatch_id(int64_t iteration, int64_t stage) const {
  return std::max<int64_t>(processed(iteration, stage), 0) % shape_.microbatches;
}

int64_t PipelineSchedule::repeat_id(int64_t iteration, int64_t stage) const {
  const int64_t r = std::max<int64_t>(processed(iteration, stage), 0) / shape_.microbatches;
  return std::min(r, shape_.repeats - 1);
}

int64_t PipelineSchedule::iteration_of(int64_t stage, int64_t microbatch, int64_t repeat) const {
  return repeat * shape_.microbatches + microbatch + shape_.delay * stage;
}

int64_t PipelineSchedule::layer(int64_t repeat, int64_t stage, int64_t j) const {
  const int64_t lps = shape_.layers_per_stage;
  return repeat * shape_.stages * lps + stage * lps + j;
}

bool PipelineSchedule::rotates() const { return shape_.repeats > 1 && !uses_circ_storage(); }

bool PipelineSchedule::uses_circ_storage() const {
  return shape_.repeats > 1 && shape_.microbatches > shape_.stages * shape_.delay;
}

int64_t PipelineSchedule::output_offset() const {
  const int64_t first = shape_.microbatches * (shape_.repeats - 1) + bubble_iterations();
  return first % microbatches_per_stage();
}

std::string PipelineSchedule::to_string() const {
  std::string out = "iter";
  for (int64_t s = 0; s < shape_.stages; ++s) out += fmt::format(" {:>6}", fmt::format("s{}", s));
  out += "\n";
  for (int64_t i = 0; i < iterations(); ++i) {
    out += fmt::format("{:>4}", i);
    for (int64_t s = 0; s < shape_.stages; ++s) {
      const ScheduleCell c = cell(i, s);
      out +=
          fmt::format(" {:>6}", c.bubble() ? "." : fmt::format("m{}r{}", c.microbatch, c.repeat));
    }
    out += "\n";
  }
  return out;
}

}  // namespace eng
