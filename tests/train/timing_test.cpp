// tests/train/timing_test.cpp: step timing (docs/metrics-store.md) and the store rows train()
// writes. Device delays come from the debug config keys; margins suit a noisy 2-core machine
// (a delay of 0.3 s against steps of a few ms).
#include <map>
#include <vector>

#include "engine/store/metrics_store.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

using testing::TempDir;
using testing::tiny_config;

constexpr double kDelay = 0.3;
constexpr double kQuick = 0.15;  // a normal tiny step is a few ms; this leaves room for noise

struct TrainedRun {
  std::unique_ptr<MetricsStore> store;
  std::unique_ptr<Trainer> trainer;
  std::vector<StepMetrics> steps;
};

TrainedRun train(Config c, int64_t steps, const std::string& db, bool aot) {
  TrainedRun r;
  r.store = MetricsStore::open(db).value();
  r.trainer = Trainer::create(c, Mesh(), {.store = r.store.get()}).value();
  if (aot) {
    EXPECT_TRUE(r.trainer->compile().ok());
  }
  Status s = r.trainer->train(steps, [&](const StepMetrics& m) {
    r.steps.push_back(m);
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

int64_t as_int(const SqlValue& v) { return std::get<int64_t>(v); }
double as_double(const SqlValue& v) { return std::get<double>(v); }

TEST(TimingTest, DeviceDelayIsChargedToItsStepOnly) {
  TempDir dir("timing");
  Config c = tiny_config(8);
  ASSERT_TRUE(c.set("debug_device_delay_steps", "3").ok());
  ASSERT_TRUE(c.set("debug_device_delay_seconds", kDelay).ok());
  TrainedRun r = train(c, 8, dir / "m.db", /*aot=*/true);
  ASSERT_EQ(r.steps.size(), 8u);
  for (const StepMetrics& m : r.steps) {
    fmt::print("step {} time {:.4f} s device {:.4f} s\n", m.step, m.step_time_s, m.device_time_s);
    EXPECT_TRUE(m.synced);
    EXPECT_FALSE(m.compiled);  // compiled ahead of time
  }
  EXPECT_GE(r.steps[3].step_time_s, kDelay - 0.01);
  EXPECT_LT(r.steps[2].step_time_s, kQuick);
  EXPECT_LT(r.steps[4].step_time_s, kQuick);
  EXPECT_LT(r.steps[0].step_time_s, kQuick);

  // The store: one steps row per step (synced, not compiled), MaxText-named metrics, params.
  MetricsStore& s = *r.store;
  const std::string run = r.trainer->run_id();
  QueryResult rows = s.query("SELECT step, step_time_s, synced, compiled FROM steps WHERE run_id = ? "
                             "ORDER BY step", std::vector<SqlValue>{run}).value();
  ASSERT_EQ(rows.rows.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(as_int(rows.rows[i][0]), i);
    EXPECT_EQ(as_double(rows.rows[i][1]), r.steps[i].step_time_s);
    EXPECT_EQ(as_int(rows.rows[i][2]), 1);
    EXPECT_EQ(as_int(rows.rows[i][3]), 0);
  }
  QueryResult keys = s.query("SELECT key, count(*) FROM metrics WHERE run_id = ? GROUP BY key ORDER BY key",
                             std::vector<SqlValue>{run}).value();
  std::vector<std::string> names;
  for (const auto& row : keys.rows) {
    names.push_back(std::get<std::string>(row[0]));
    EXPECT_EQ(as_int(row[1]), 8);
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "learning/current_learning_rate", "learning/grad_norm", "learning/loss",
                       "learning/param_norm", "learning/raw_grad_norm", "learning/total_weights",
                       "perf/per_device_tflops", "perf/per_device_tflops_per_sec",
                       "perf/per_device_tokens", "perf/per_device_tokens_per_sec",
                       "perf/step_time_seconds"}));
  QueryResult p = s.query("SELECT value FROM params WHERE run_id = ? AND key = 'debug_device_delay_steps'",
                          std::vector<SqlValue>{run}).value();
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(p.rows[0][0]), "3");
  QueryResult loss = s.query("SELECT value FROM metrics WHERE run_id = ? AND key = 'learning/loss' AND step = 5",
                             std::vector<SqlValue>{run}).value();
  ASSERT_EQ(loss.rows.size(), 1u);
  EXPECT_EQ(as_double(loss.rows[0][0]), static_cast<double>(static_cast<float>(r.steps[5].loss)));
}

// log_period: one store transaction per log_period flushed steps. A second connection sees
// only committed rows; queries on the trainer's own store flush first, and train() flushes
// at its end.
TEST(TimingTest, LogPeriodCommitsEveryNSteps) {
  TempDir dir("logperiod");
  Config c = tiny_config(7);
  ASSERT_TRUE(c.set("log_period", int64_t{3}).ok());
  auto store = MetricsStore::open(dir / "m.db").value();
  auto reader = MetricsStore::open(dir / "m.db").value();
  auto t = Trainer::create(c, Mesh(), {.store = store.get()}).value();
  std::vector<int64_t> committed;
  Status s = t->train(7, [&](const StepMetrics&) {
    QueryResult q = reader->query("SELECT count(*) FROM steps WHERE run_id = ?",
                                  std::vector<SqlValue>{t->run_id()}).value();
    committed.push_back(as_int(q.rows[0][0]));
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(committed, (std::vector<int64_t>{0, 0, 3, 3, 3, 6, 6}));
  QueryResult all = reader->query("SELECT count(*) FROM steps WHERE run_id = ?",
                                  std::vector<SqlValue>{t->run_id()}).value();
  EXPECT_EQ(as_int(all.rows[0][0]), 7);

  Config bad = tiny_config(1);
  ASSERT_TRUE(bad.set("log_period", int64_t{0}).ok());
  Result<std::unique_ptr<Trainer>> r = Trainer::create(bad, Mesh(), {.shape_only = true});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "config: log_period must be >= 1, got 0");
}

TEST(TimingTest, CompileIsRecordedApartFromStepZero) {
  TempDir dir("compile");
  Config c = tiny_config(3);
  ASSERT_TRUE(c.set("debug_compile_delay_seconds", kDelay).ok());
  TrainedRun r = train(c, 3, dir / "m.db", /*aot=*/false);  // step 0 compiles inside the loop
  ASSERT_EQ(r.steps.size(), 3u);
  fmt::print("step 0: compile {:.4f} s, step time {:.4f} s\n", r.steps[0].compile_s,
             r.steps[0].step_time_s);
  EXPECT_TRUE(r.steps[0].compiled);
  EXPECT_GE(r.steps[0].compile_s, kDelay - 0.01);
  EXPECT_LT(r.steps[0].step_time_s, kQuick);
  EXPECT_FALSE(r.steps[1].compiled);
  QueryResult rows = r.store->query("SELECT compiled, compile_s FROM steps WHERE run_id = ? ORDER BY step",
                                    std::vector<SqlValue>{r.trainer->run_id()}).value();
  ASSERT_EQ(rows.rows.size(), 3u);
  EXPECT_EQ(as_int(rows.rows[0][0]), 1);
  EXPECT_GE(as_double(rows.rows[0][1]), kDelay - 0.01);
  EXPECT_EQ(as_int(rows.rows[1][0]), 0);
}

TEST(TimingTest, SlowCheckpointShowsInCheckpointsNotInAnyStep) {
  TempDir dir("slowckpt");
  Config c = tiny_config(7);
  ASSERT_TRUE(c.set("enable_checkpointing", true).ok());
  ASSERT_TRUE(c.set("base_output_directory", dir.str()).ok());
  ASSERT_TRUE(c.set("run_name", "slow").ok());
  ASSERT_TRUE(c.set("checkpoint_period", int64_t{3}).ok());
  ASSERT_TRUE(c.set("save_checkpoint_on_start", false).ok());  // pinned: counts checkpoints 3, 6
  ASSERT_TRUE(c.set("debug_checkpoint_delay_steps", "3").ok());
  ASSERT_TRUE(c.set("debug_checkpoint_delay_seconds", kDelay).ok());
  TrainedRun r = train(c, 7, dir / "m.db", /*aot=*/true);
  ASSERT_EQ(r.steps.size(), 7u);
  for (const StepMetrics& m : r.steps) {
    fmt::print("step {} time {:.4f} s\n", m.step, m.step_time_s);
    EXPECT_LT(m.step_time_s, kQuick) << "step " << m.step;
  }
  QueryResult ck = r.store->query("SELECT step, save_s, status, bytes FROM checkpoints WHERE run_id = ? "
                                  "ORDER BY step", std::vector<SqlValue>{r.trainer->run_id()}).value();
  ASSERT_EQ(ck.rows.size(), 2u);  // 3 (period) and 6 (period; also the last step)
  EXPECT_EQ(as_int(ck.rows[0][0]), 3);
  fmt::print("checkpoint 3 save_s {:.4f}\n", as_double(ck.rows[0][1]));
  EXPECT_GE(as_double(ck.rows[0][1]), kDelay - 0.01);
  EXPECT_EQ(std::get<std::string>(ck.rows[0][2]), "committed");
  EXPECT_GT(as_int(ck.rows[0][3]), 0);
  EXPECT_EQ(as_int(ck.rows[1][0]), 6);
  EXPECT_LT(as_double(ck.rows[1][1]), kDelay);
  QueryResult ev = r.store->query("SELECT count(*) FROM events WHERE run_id = ? AND kind = 'checkpoint'",
                                  std::vector<SqlValue>{r.trainer->run_id()}).value();
  EXPECT_EQ(as_int(ev.rows[0][0]), 2);
}

}  // namespace
}  // namespace eng
