// tests/pipeline/stats_test.cpp: engine/train/pipeline_stats.h without Lua: the bubble
// fraction counted from the cells equals the schedule's closed form, and the printed grid
// (t:pipeline()'s text; tests/shell/pipeline_test.lua checks it through the binary too).
#include <gtest/gtest.h>

#include "engine/train/pipeline_stats.h"

namespace eng {
namespace {

TEST(PipelineStats, CountedFractionEqualsTheClosedForm) {
  for (int64_t S : {2, 4})
    for (int64_t M : {S, 2 * S})
      for (int64_t R : {1, 2}) {
        Result<PipelineSchedule> s =
            PipelineSchedule::make({.stages = S, .microbatches = M, .repeats = R});
        ASSERT_TRUE(s.ok()) << s.status().message();
        const PipelineCounts c = count_cells(*s);
        EXPECT_EQ(c.cells, s->iterations() * S);
        EXPECT_NEAR(c.value(), s->bubble_fraction(), 1e-12) << S << " " << M << " " << R;
      }
}

TEST(PipelineStats, PrintsTheGrid) {
  Result<PipelineSchedule> s = PipelineSchedule::make({.stages = 4, .microbatches = 8});
  ASSERT_TRUE(s.ok()) << s.status().message();
  const PipelineCounts c = count_cells(*s);
  EXPECT_EQ(c.fraction(), "3/11");
  const std::string text = render_pipeline_text(*s, c, std::nullopt);
  EXPECT_NE(text.find("Pipeline(S=4 stages, M=8 microbatches, R=1 repeats"), std::string::npos);
  EXPECT_NE(text.find("  stage 3    .    .    .   m0   m1   m2   m3   m4   m5   m6   m7"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("bubble fraction 3/11 = 0.2727 (12 of 44 stage-iterations"),
            std::string::npos);
  EXPECT_EQ(pipeline_cell_label(s->cell(0, 0), false), "m0");
  EXPECT_EQ(pipeline_cell_label(s->cell(0, 3), false), ".");
  PipelineMeasured m;
  m.devices = 4;
  m.step_s = 4;
  m.pipeline_s = 2;
  m.bubble_s = 1;
  EXPECT_NE(render_pipeline_text(*s, c, m).find("bubbles 50.0% of pipeline time, 25.0% of step"),
            std::string::npos);
}

}  // namespace
}  // namespace eng
