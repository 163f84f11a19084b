// tests/train/run_record_test.cpp: what a trainer's RunRecorder writes (issue 15 "A correct
// store", issue 16 item 8): effective params, throughput named apart, statuses, parents on
// resume, no run for a trainer that never stepped, no step lost to a failed save or a blocked
// flush, and docs/metrics-store.md matching the schema and the keys a run writes.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

using eng::testing::TempDir;
using eng::testing::tiny_config;

Mesh data2_fsdp2() { return Mesh::create({"data", "fsdp"}, {2, 2}).value(); }

QueryResult q(MetricsStore& s, const std::string& sql, const std::string& arg = "") {
  std::vector<SqlValue> args;
  if (!arg.empty()) args.emplace_back(arg);
  Result<QueryResult> r = s.query(sql, args);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : QueryResult{};
}

std::string text(const SqlValue& v) { return sql_value_to_string(v); }

std::map<std::string, std::string> pairs(MetricsStore& s, const std::string& table,
                                         const std::string& run) {
  std::map<std::string, std::string> out;
  for (const auto& row : q(s, "SELECT key, value FROM " + table + " WHERE run_id = ?", run).rows)
    out[text(row[0])] = text(row[1]);
  return out;
}

bool train_ok(Trainer& t, int64_t steps) {
  Status s = t.train(steps, [](const StepMetrics&) { return true; });
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok();
}

// Issue 15 items 3, 4 and 5: the command line and script, effective mesh and batch params,
// global and per-device throughput named apart.
TEST(RunRecordTest, ParamsHoldEffectiveValuesAndThroughputIsNamedApart) {
  TempDir dir("rr_params");
  auto store = MetricsStore::open((dir / "m.db")).value();
  const std::string script = (dir / "train.lua");
  std::ofstream(script) << "-- a script\n";
  Config c = tiny_config(4);  // ici_fsdp_parallelism stays -1, ici_data_parallelism 1
  auto t = Trainer::create(c, data2_fsdp2(),
                           {.store = store.get(), .argv = {"shardlab", script}, .script = script})
               .value();
  ASSERT_TRUE(train_ok(*t, 2));
  const std::string run = t->run_id();
  auto p = pairs(*store, "params", run);
  EXPECT_EQ(p["ici_data_parallelism"], "2");
  EXPECT_EQ(p["ici_fsdp_parallelism"], "2");
  EXPECT_EQ(p["ici_tensor_parallelism"], "1");
  EXPECT_EQ(p["mesh.data"], "2");
  EXPECT_EQ(p["mesh.fsdp"], "2");
  EXPECT_EQ(p["num_devices"], "4");
  EXPECT_EQ(p["global_batch_size_to_load"], fmt::format("{}", t->config().global_batch_size));
  EXPECT_EQ(p["model_name"], t->config().model.name);
  auto head = q(*store, "SELECT argv, script, host, name FROM runs WHERE run_id = ?", run);
  ASSERT_EQ(head.rows.size(), 1u);
  EXPECT_EQ(text(head.rows[0][0]), "[\"shardlab\",\"" + script + "\"]");
  EXPECT_EQ(text(head.rows[0][1]), script);
  EXPECT_FALSE(text(head.rows[0][2]).empty());
  EXPECT_FALSE(text(head.rows[0][3]).empty());  // generated
  auto tags = pairs(*store, "tags", run);
  EXPECT_EQ(tags["shardlab.pid"], fmt::format("{}", ::getpid()));
  EXPECT_EQ(tags["shardlab.script_hash"].size(), 32u);
  auto steps = q(
      *store, "SELECT tokens_per_s, tokens_per_s_device, tokens FROM steps WHERE run_id = ?", run);
  ASSERT_EQ(steps.rows.size(), 2u);
  for (const auto& row : steps.rows) {
    const double global = std::get<double>(row[0]), device = std::get<double>(row[1]);
    EXPECT_NEAR(global, 4 * device, 1e-9 * global);
  }
}

// tiny_config(4) saving a checkpoint every 2 steps under `dir`/`run_name`.
Config checkpointing_config(const std::string& dir, const std::string& run_name) {
  Config c = tiny_config(4);
  EXPECT_TRUE(c.set("enable_checkpointing", true).ok());
  EXPECT_TRUE(c.set("base_output_directory", dir).ok());
  EXPECT_TRUE(c.set("run_name", run_name).ok());
  EXPECT_TRUE(c.set("checkpoint_period", int64_t{2}).ok());
  EXPECT_TRUE(c.set("save_checkpoint_on_start", false).ok());  // pinned: counts period saves
  return c;
}

// Issue 15 item 2: statuses, no run for a trainer that never stepped, the parent on resume.
TEST(RunRecordTest, NeverSteppedLeavesNoRunAndResumeNamesItsParent) {
  TempDir dir("rr_resume");
  auto store = MetricsStore::open((dir / "m.db")).value();
  const Config c = checkpointing_config(dir.str(), "parent");
  std::string idle_id, parent_id;
  {
    auto idle = Trainer::create(tiny_config(4), Mesh(), {.store = store.get()}).value();
    ASSERT_TRUE(idle->compile().ok());
    idle_id = idle->run_id();
  }
  EXPECT_TRUE(q(*store, "SELECT 1 FROM runs WHERE run_id = ?", idle_id).rows.empty());
  EXPECT_FALSE(q(*store, "SELECT 1 FROM compilations WHERE run_id IS NULL").rows.empty());
  {
    auto first = Trainer::create(c, Mesh(), {.store = store.get()}).value();
    parent_id = first->run_id();
    EXPECT_TRUE(first->resume_note().empty());
    ASSERT_TRUE(train_ok(*first, 2));
  }
  auto second = Trainer::create(c, Mesh(), {.store = store.get()}).value();
  EXPECT_EQ(second->resume_note(), "resumed from step 1 of run parent");
  auto parent = q(*store, "SELECT parent_run_id FROM runs WHERE run_id = ?", second->run_id());
  ASSERT_EQ(parent.rows.size(), 1u);
  EXPECT_EQ(text(parent.rows[0][0]), parent_id);
  EXPECT_EQ(text(q(*store, "SELECT status FROM runs WHERE run_id = ?", parent_id).rows.at(0)[0]),
            "FINISHED");
}

// A process killed between a checkpoint's rename and its row in `checkpoints` (the kill soak
// found it): the resumed run still names its parent, from the file's shardlab_run_id.
TEST(RunRecordTest, ResumeNamesItsParentWithoutTheCheckpointRow) {
  TempDir dir("rr_resume_norow");
  auto store = MetricsStore::open((dir / "m.db")).value();
  const Config c = checkpointing_config(dir.str(), "parent");
  std::string parent_id;
  {
    auto first = Trainer::create(c, Mesh(), {.store = store.get()}).value();
    parent_id = first->run_id();
    ASSERT_TRUE(train_ok(*first, 2));
  }
  ASSERT_TRUE(store->query("DELETE FROM checkpoints").ok());
  auto second = Trainer::create(c, Mesh(), {.store = store.get()}).value();
  EXPECT_EQ(second->resume_note(), "resumed from step 1 of run parent");
  auto parent = q(*store, "SELECT parent_run_id FROM runs WHERE run_id = ?", second->run_id());
  ASSERT_EQ(parent.rows.size(), 1u);
  EXPECT_EQ(text(parent.rows[0][0]), parent_id);
}

// Issue 16 item 8: a checkpoint save that fails loses no step and ends the run FAILED.
TEST(RunRecordTest, FailedCheckpointSaveKeepsItsStepAndFailsTheRun) {
  TempDir dir("rr_ckpt_fail");
  auto store = MetricsStore::open((dir / "m.db")).value();
  const std::string blocker = (dir / "not_a_dir");
  std::ofstream(blocker) << "x";  // the output "directory" is a file: every save fails
  Config c = tiny_config(4);
  ASSERT_TRUE(c.set("enable_checkpointing", true).ok());
  ASSERT_TRUE(c.set("base_output_directory", blocker).ok());
  ASSERT_TRUE(c.set("run_name", std::string("r")).ok());
  ASSERT_TRUE(c.set("checkpoint_period", int64_t{2}).ok());
  ASSERT_TRUE(c.set("save_checkpoint_on_start", false).ok());  // pinned: step 2's save fails
  std::string run;
  {
    auto t = Trainer::create(c, Mesh(), {.store = store.get()}).value();
    run = t->run_id();
    Status s = t->train(4, [](const StepMetrics&) { return true; });
    ASSERT_FALSE(s.ok());
  }
  auto steps = q(*store, "SELECT step FROM steps WHERE run_id = ? ORDER BY step", run);
  ASSERT_EQ(steps.rows.size(), 3u);  // 0, 1 and 2, the step whose save failed
  EXPECT_EQ(text(steps.rows[2][0]), "2");
  EXPECT_EQ(text(q(*store, "SELECT status FROM runs WHERE run_id = ?", run).rows.at(0)[0]),
            "FAILED");
}

// Issue 16 item 8: another writer holding the lock past busy_timeout fails train(); the rows
// are kept, written when the lock is free, and the run ends FAILED.
TEST(RunRecordTest, BlockedFlushKeepsRowsAndFailsTheRun) {
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs the sqlite3 CLI";
  TempDir dir("rr_blocked");
  const std::string db = (dir / "m.db");
  auto store = MetricsStore::open(db, {.busy_timeout_ms = 100}).value();
  std::string run;
  int64_t ran = 0;
  {
    auto t = Trainer::create(tiny_config(10), Mesh(), {.store = store.get()}).value();
    run = t->run_id();
    ASSERT_TRUE(train_ok(*t, 2));
    FILE* other = ::popen(fmt::format("sqlite3 '{}' >/dev/null", db).c_str(), "w");
    ASSERT_NE(other, nullptr);
    std::fputs("PRAGMA busy_timeout = 5000;\nBEGIN IMMEDIATE;\nDELETE FROM tags WHERE 0;\n", other);
    std::fflush(other);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Status s = t->train(3, [](const StepMetrics&) { return true; });
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("kept for the next flush"), std::string::npos) << s.message();
    std::fputs("ROLLBACK;\n", other);
    ASSERT_EQ(::pclose(other), 0);
    ran = t->current_step();  // train() stopped at the error: 2 + the steps it dispatched
    EXPECT_GE(ran, 3);
  }  // the trainer's end flushes the kept rows, then ends the run FAILED
  EXPECT_EQ(
      static_cast<int64_t>(q(*store, "SELECT step FROM steps WHERE run_id = ?", run).rows.size()),
      ran);
  EXPECT_EQ(text(q(*store, "SELECT status FROM runs WHERE run_id = ?", run).rows.at(0)[0]),
            "FAILED");
}

// Under mpirun each process's device time and collective wait per step: the keys the recorder
// names once (process_keys_) follow the process count of every call.
TEST(RunRecordTest, ProcessTimesAreNamedPerProcess) {
  TempDir dir("rr_process_times");
  auto store = MetricsStore::open((dir / "m.db")).value();
  RunRecorder rec(store.get(), 1);
  ASSERT_TRUE(rec.begin(RunInfo{}).ok());
  const double two[] = {1, 2, 3, 4}, three[] = {5, 6, 7, 8, 9, 10};
  rec.record_process_times(0, two, 2);
  rec.record_process_times(1, three, 2);
  // The trainer's layout: three values per process, the third (the stop request) not recorded.
  const double with_stop[] = {11, 12, 0, 13, 14, 1};
  rec.record_process_times(2, with_stop, 3);
  ASSERT_TRUE(rec.flush().ok());
  std::map<std::string, double> got;
  for (const auto& row : q(*store,
                           "SELECT key || '@' || step, value FROM metrics WHERE run_id = ? AND "
                           "key LIKE 'dist/%'",
                           rec.run_id())
                             .rows)
    got[text(row[0])] = std::get<double>(row[1]);
  const std::map<std::string, double> want = {
      {"dist/device_time_s/process_0@0", 1}, {"dist/collective_wait_s/process_0@0", 2},
      {"dist/device_time_s/process_1@0", 3}, {"dist/collective_wait_s/process_1@0", 4},
      {"dist/device_time_s/process_0@1", 5}, {"dist/collective_wait_s/process_0@1", 6},
      {"dist/device_time_s/process_1@1", 7}, {"dist/collective_wait_s/process_1@1", 8},
      {"dist/device_time_s/process_2@1", 9}, {"dist/collective_wait_s/process_2@1", 10},
      {"dist/device_time_s/process_0@2", 11}, {"dist/collective_wait_s/process_0@2", 12},
      {"dist/device_time_s/process_1@2", 13}, {"dist/collective_wait_s/process_1@2", 14}};
  EXPECT_EQ(got, want);
  rec.end(RunStatus::kFinished, true);
}

// docs/metrics-store.md's "Every column, at a glance" block: table/view -> columns, and the
// params, metrics and tags keys a run writes.
std::map<std::string, std::vector<std::string>> documented() {
  const char* src = std::getenv("SHARDLAB_SOURCE_DIR");
  std::ifstream f(std::string(src ? src : ".") + "/docs/metrics-store.md");
  std::map<std::string, std::vector<std::string>> out;
  bool in_block = false, after_heading = false;
  for (std::string line; std::getline(f, line);) {
    if (line.starts_with("### Every column, at a glance"))
      after_heading = true;
    else if (after_heading && line == "```text")
      in_block = true;
    else if (in_block && line == "```")
      break;
    else if (in_block) {
      const size_t colon = line.find(':');
      std::istringstream words(line.substr(colon + 1));
      for (std::string w; words >> w;) out[line.substr(0, colon)].push_back(w);
    }
  }
  return out;
}

TEST(RunRecordTest, DocsListEveryColumnAndEveryKeyARunWrites) {
  auto docs = documented();
  ASSERT_GE(docs.size(), 20u) << "the block in docs/metrics-store.md was not found";
  TempDir dir("rr_docs");
  auto store = MetricsStore::open((dir / "m.db")).value();
  for (const auto& [table, cols] : docs) {
    if (table.find(' ') != std::string::npos) continue;  // the "... keys" lines
    std::set<std::string> actual;
    for (const auto& row : q(*store, "SELECT name FROM pragma_table_xinfo(?)", table).rows)
      actual.insert(text(row[0]));
    EXPECT_EQ(std::set<std::string>(cols.begin(), cols.end()), actual) << table;
  }
  auto tables = q(*store, "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')");
  for (const auto& row : tables.rows)
    EXPECT_TRUE(docs.count(text(row[0]))) << text(row[0]) << " undocumented";

  const std::string script = (dir / "s.lua");
  std::ofstream(script) << "print(1)\n";
  auto t = Trainer::create(tiny_config(4), data2_fsdp2(), {.store = store.get(), .script = script})
               .value();
  ASSERT_TRUE(train_ok(*t, 1));
  const std::pair<const char*, const char*> kinds[] = {
      {"params keys", "params"}, {"metrics keys", "latest_metrics"}, {"tags keys", "tags"}};
  for (const auto& [line, table] : kinds) {
    auto have = pairs(*store, table, t->run_id());
    ASSERT_FALSE(docs[line].empty()) << line;
    for (const std::string& key : docs[line])
      EXPECT_TRUE(have.count(key)) << table << " lacks " << key;
  }
}

}  // namespace
}  // namespace eng
