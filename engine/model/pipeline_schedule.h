// engine/model/pipeline_schedule.h: MaxText's pipeline schedule (layers/pipeline.py,
// `Pipeline`) as a value: which stage works on which microbatch and repeat at each iteration,
// where the bubbles are, and the buffers the schedule needs. Pure: no builder, no runtime.
//
//   Result<PipelineSchedule> s = PipelineSchedule::make({.stages = 4, .microbatches = 8,
//                                                        .repeats = 2});
//   s->iterations();          // 19 = M*R + d*(S-1)
//   s->cell(5, 2);            // stage 2 at iteration 5: microbatch 3, repeat 0
//   s->bubble_fraction();     // 3/19
//
// MaxText (layers/pipeline.py, read at commit 0143f05): total_iterations = M*R + d*(S-1),
// d = 2 with pipeline_delay_activation_forwarding, else 1; at iteration i stage s has
// processed max(i - d*s, 0) microbatch-repeats: microbatch that % M, repeat that / M;
// `shift` <- _shift_right(out) when R == 1 or circ_storage is used, else _rotate_right(out)
// (stage S-1 feeds stage 0 directly); circ_storage is needed iff R > 1 and M > S*d.
// Circular layer order: stage s of repeat r runs layers r*S*lps + s*lps + j, j < lps.
#pragma once

#include <cstdint>
#include <string>

#include "engine/base/status.h"

namespace eng {

struct PipelineShape {
  int64_t stages = 1;            // S: the `stage` mesh axis
  int64_t microbatches = 1;      // M: num_pipeline_microbatches
  int64_t repeats = 1;           // R: num_pipeline_repeats (> 1: a circular pipeline)
  int64_t delay = 1;             // d: 2 with pipeline_delay_activation_forwarding
  int64_t layers_per_stage = 1;  // lps: layers one stage runs per repeat
};

// One (iteration, stage) slot. A bubble does no useful work (its input is zeros or a stale
// activation and its output is never consumed).
struct ScheduleCell {
  int64_t microbatch = -1;  // -1: bubble
  int64_t repeat = -1;      // -1: bubble
  bool bubble() const { return microbatch < 0; }
};

class PipelineSchedule {
 public:
  // Checks the shape (errors name both numbers): S, M, R >= 1, d in {1, 2}, M divisible by S,
  // and with delay M >= 2S.
  static Result<PipelineSchedule> make(const PipelineShape& shape);

  const PipelineShape& shape() const { return shape_; }
  int64_t iterations() const;         // M*R + d*(S-1)
  int64_t bubble_iterations() const;  // d*(S-1)
  // Share of stage-iterations that are bubbles: d*(S-1) / (M*R + d*(S-1)); with d = 1 the
  // issue's (S-1)/(R*M + S-1).
  double bubble_fraction() const;

  // What stage `stage` does at `iteration` (microbatch and repeat, or a bubble).
  ScheduleCell cell(int64_t iteration, int64_t stage) const;
  // MaxText's get_microbatch_and_repeat_ids: defined for bubbles too (the clamped count,
  // the repeat clamped to R-1 as its dynamic_slice of the weights clamps). The engine traces
  // bubble slots with these ids, so a bubble reads some valid microbatch row and repeat.
  int64_t microbatch_id(int64_t iteration, int64_t stage) const;
  int64_t repeat_id(int64_t iteration, int64_t stage) const;

  // The iteration at which `stage` runs (microbatch, repeat).
  int64_t iteration_of(int64_t stage, int64_t microbatch, int64_t repeat) const;
  // Decoder layer run by stage s of repeat r as its j-th layer: r*S*lps + s*lps + j.
  int64_t layer(int64_t repeat, int64_t stage, int64_t j) const;

  // `shift` after an iteration: _rotate_right (S-1 feeds 0) or _shift_right (0 gets zeros).
  bool rotates() const;
  // circ_storage [S, M, micro, ...] holds the last stage's outputs until stage 0 reuses them.
  bool uses_circ_storage() const;
  int64_t microbatches_per_stage() const { return shape_.microbatches / shape_.stages; }
  // MaxText's state_io index where microbatch 0's output lands (its output permutation).
  int64_t output_offset() const;

  // The grid: one row per iteration, one column per stage, "m3r1" per cell, "." a bubble.
  std::string to_string() const;

 private:
  explicit PipelineSchedule(const PipelineShape& s) : shape_(s) {}
  int64_t processed(int64_t iteration, int64_t stage) const;  // i - d*s, unclamped

  PipelineShape shape_;
};

}  // namespace eng
