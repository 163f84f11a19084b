// tests/pipeline/schedule_test.cpp: the pipeline schedule as data
// (engine/model/ pipeline_schedule.h) against a simulation of MaxText's buffers
// (state_io, shift, prev_outputs, circ_storage and its mover,
// layers/pipeline.py) on labelled microbatches: every non-bubble cell's stage
// receives exactly that microbatch after exactly the layers before its own, and
// the permuted state_io holds every microbatch through all layers.
#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <vector>

#include "engine/model/pipeline_schedule.h"

namespace eng {
namespace {

// A microbatch's activation: which microbatch and how many layers it has been
// through.
struct Label {
  int64_t mb = -1;  // -1: zeros (a bubble's input)
  int64_t done = 0;
  bool operator==(const Label&) const = default;
};
using Stages = std::vector<Label>;  // [S]

Stages shift_right(const Stages& x, bool rotate) {
  Stages y(x.size());
  for (size_t s = 1; s < x.size(); ++s) y[s] = x[s - 1];
  if (rotate) y[0] = x.back();
  return y;
}

// MaxText's loop on labels; checks every cell's input and returns the final
// outputs in order.
std::vector<Label> simulate(const PipelineSchedule& sch) {
  const PipelineShape& p = sch.shape();
  const int64_t S = p.stages, M = p.microbatches, d = p.delay, mps = M / S;
  std::vector<Stages> state_io(mps, Stages(S));  // [mps][S]
  for (int64_t s = 0; s < S; ++s)
    for (int64_t k = 0; k < mps; ++k) state_io[k][s] = {s * mps + k, 0};
  Stages shift(S), prev(S), mover(S);
  std::vector<Stages> circ(M, Stages(S));
  for (int64_t i = 0; i < sch.iterations(); ++i) {
    Stages in = shift;
    in[0] = i < M ? state_io[i % mps][0] : (sch.uses_circ_storage() ? circ[i % M][0] : shift[0]);
    Stages out(S);
    for (int64_t s = 0; s < S; ++s) {
      const ScheduleCell c = sch.cell(i, s);
      if (!c.bubble()) {
        EXPECT_EQ(in[s], (Label{c.microbatch, sch.layer(c.repeat, s, 0)}))
            << "iteration " << i << " stage " << s;
      }
      out[s] = in[s].mb < 0 ? in[s] : Label{in[s].mb, in[s].done + p.layers_per_stage};
    }
    const bool plain_shift = p.repeats == 1 || sch.uses_circ_storage();
    EXPECT_EQ(sch.rotates(), !plain_shift);
    shift = shift_right(d == 2 ? prev : out, !plain_shift);
    prev = out;
    if (sch.uses_circ_storage()) {
      const int64_t slot = (((i - sch.bubble_iterations() - 1) % M) + M) % M;
      circ[slot] = shift_right(mover, true);
      mover = out;
    }
    Stages& slice = state_io[i % mps];
    for (int64_t s = 0; s + 1 < S; ++s) slice[s] = slice[s + 1];
    slice[S - 1] = out[S - 1];
  }
  std::vector<Label> final;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t k = 0; k < mps; ++k) final.push_back(state_io[(k + sch.output_offset()) % mps][s]);
  return final;
}

using ShapeCase = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;  // S, M, R, d, lps

class Schedule : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(Schedule, MatchesMaxTextBuffers) {
  const auto [S, M, R, d, lps] = GetParam();
  Result<PipelineSchedule> sch = PipelineSchedule::make({S, M, R, d, lps});
  ASSERT_TRUE(sch.ok()) << sch.status().message();
  EXPECT_EQ(sch->iterations(), M * R + d * (S - 1));
  const std::vector<Label> final = simulate(*sch);
  ASSERT_EQ(final.size(), static_cast<size_t>(M));
  for (int64_t k = 0; k < M; ++k) EXPECT_EQ(final[k], (Label{k, R * S * lps})) << "output " << k;

  // Each (stage, microbatch, repeat) runs exactly once, where iteration_of
  // says; layers in order.
  std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
  int64_t bubbles = 0;
  for (int64_t i = 0; i < sch->iterations(); ++i)
    for (int64_t s = 0; s < S; ++s) {
      const ScheduleCell c = sch->cell(i, s);
      if (c.bubble()) {
        ++bubbles;
        EXPECT_LT(sch->repeat_id(i, s), R);
        continue;
      }
      EXPECT_EQ(sch->microbatch_id(i, s), c.microbatch);
      EXPECT_EQ(sch->repeat_id(i, s), c.repeat);
      EXPECT_EQ(sch->iteration_of(s, c.microbatch, c.repeat), i);
      EXPECT_TRUE(seen.insert({s, c.microbatch, c.repeat}).second);
    }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), S * M * R);
  EXPECT_EQ(bubbles, S * sch->bubble_iterations());
  EXPECT_DOUBLE_EQ(sch->bubble_fraction(),
                   static_cast<double>(bubbles) / static_cast<double>(S * sch->iterations()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Schedule,
                         ::testing::Values(ShapeCase{1, 1, 1, 1, 4}, ShapeCase{2, 2, 1, 1, 2},
                                           ShapeCase{2, 4, 1, 1, 2}, ShapeCase{4, 8, 1, 1, 1},
                                           ShapeCase{2, 2, 2, 1, 1}, ShapeCase{2, 4, 2, 1, 1},
                                           ShapeCase{4, 4, 2, 1, 1}, ShapeCase{4, 8, 2, 1, 1},
                                           ShapeCase{4, 8, 3, 1, 2}, ShapeCase{2, 4, 1, 2, 2},
                                           ShapeCase{2, 4, 2, 2, 1}, ShapeCase{2, 8, 2, 2, 1},
                                           ShapeCase{4, 8, 2, 2, 1}, ShapeCase{4, 16, 2, 2, 1},
                                           ShapeCase{4, 12, 2, 2, 1}));

TEST(Schedule, NumbersOfTheIssue) {
  Result<PipelineSchedule> s =
      PipelineSchedule::make({.stages = 4, .microbatches = 8, .repeats = 2});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->iterations(), 19);
  EXPECT_DOUBLE_EQ(s->bubble_fraction(), 3.0 / 19.0);
  EXPECT_TRUE(s->uses_circ_storage());  // M = 8 > S * d = 4
  EXPECT_FALSE(s->rotates());
  const ScheduleCell c = s->cell(5, 2);
  EXPECT_EQ(c.microbatch, 3);
  EXPECT_EQ(c.repeat, 0);
  EXPECT_EQ(s->cell(9, 1).repeat, 1);  // stage 1 started repeat 1 at iteration 9
  EXPECT_TRUE(s->cell(0, 3).bubble());
  EXPECT_TRUE(s->cell(18, 0).bubble());
  EXPECT_EQ(s->layer(1, 2, 0), 6);  // r*S*lps + s*lps + j with lps 1
  EXPECT_NE(s->to_string().find("m0r1"), std::string::npos) << s->to_string();

  s = PipelineSchedule::make({.stages = 4, .microbatches = 4, .repeats = 2});
  EXPECT_TRUE(s->rotates());  // M == S * d: the last stage feeds stage 0 directly
  EXPECT_FALSE(s->uses_circ_storage());
  s = PipelineSchedule::make({.stages = 4, .microbatches = 8, .repeats = 2, .delay = 2});
  EXPECT_EQ(s->iterations(), 22);
  EXPECT_TRUE(s->rotates());
  s = PipelineSchedule::make({.stages = 4, .microbatches = 8, .repeats = 1, .delay = 2});
  EXPECT_FALSE(s->rotates());
  EXPECT_FALSE(s->uses_circ_storage());
}

TEST(Schedule, BadShapesNameBothNumbers) {
  auto err = [](const PipelineShape& p) {
    Result<PipelineSchedule> s = PipelineSchedule::make(p);
    return s.ok() ? std::string() : std::string(s.status().message());
  };
  EXPECT_NE(err({.stages = 4, .microbatches = 6})
                .find("num_pipeline_microbatches 6 is not divisible by the 4 "
                      "pipeline stages"),
            std::string::npos);
  EXPECT_NE(
      err({.stages = 4, .microbatches = 4, .delay = 2}).find("got 4 microbatches for 4 stages"),
      std::string::npos);
  EXPECT_NE(err({.stages = 2, .microbatches = 2, .repeats = 0}).find("got 0"), std::string::npos);
  EXPECT_NE(err({.stages = 2, .microbatches = 2, .delay = 3}).find("got 3"), std::string::npos);
}

}  // namespace
}  // namespace eng
