// tests/train/reliability_test.cpp: issue 30's data and hang items in the trainer, checkpoints
// and store: a header of many tensors parses in linear time, the optimizer's step count is
// checked against the metadata step, resume skips every kind of bad latest checkpoint with a
// warning event, step-directory symlinks are neither listed nor written through, a NaN loss
// stops training (abort_on_nan_loss), and a store that stays locked ends a run promptly.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/base/clock.h"
#include "engine/store/metrics_store.h"
#include "engine/train/checkpoint.h"
#include "tests/train/tiny_trainer.h"

namespace eng {
namespace {

using testing::TempDir;
using testing::tiny_config;
namespace fs = std::filesystem;

Config ckpt_config(const std::string& base) {
  Config c = tiny_config(10);
  EXPECT_TRUE(c.set("enable_checkpointing", true).ok());
  EXPECT_TRUE(c.set("base_output_directory", base).ok());
  EXPECT_TRUE(c.set("run_name", "rel").ok());
  EXPECT_TRUE(c.set("checkpoint_period", 2).ok());
  EXPECT_TRUE(c.set("save_checkpoint_on_completion", false).ok());
  EXPECT_TRUE(c.set("save_checkpoint_on_start", false).ok());
  return c;
}

bool train_ok(Trainer& t, int64_t steps) {
  Status s = t.train(steps, [](const StepMetrics&) { return true; });
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok();
}

QueryResult q(MetricsStore& s, const std::string& sql, const std::string& arg) {
  std::vector<SqlValue> args = {arg};
  Result<QueryResult> r = s.query(sql, args);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : QueryResult{};
}

// `from` rewritten as `to`: its tensors (edit may change them) and its metadata (the keys
// write_checkpoint adds itself dropped), with a valid checksum.
void rewrite(const std::string& from, const std::string& to,
             FunctionRef<void(std::vector<CheckpointTensorSpec>&, std::vector<std::string>&,
                              std::map<std::string, std::string>&)>
                 edit) {
  Result<CheckpointFile> f = read_checkpoint(from);
  ASSERT_TRUE(f.ok()) << f.status().message();
  std::vector<CheckpointTensorSpec> specs;
  std::vector<std::string> bytes;
  for (const CheckpointFile::Entry& e : f->tensors) {
    specs.push_back(e.spec);
    bytes.emplace_back(static_cast<const char*>(f->bytes(e)), e.end - e.begin);
  }
  std::map<std::string, std::string> meta = f->metadata;
  for (const char* k : {"format", "format_version", "data_bytes", "crc32"}) meta.erase(k);
  edit(specs, bytes, meta);
  fs::remove(to);
  Result<int64_t> w = write_checkpoint(
      to, specs,
      [&](int k, void* dst) {
        std::memcpy(dst, bytes[static_cast<size_t>(k)].data(), bytes[static_cast<size_t>(k)].size());
        return ok_status();
      },
      meta);
  ASSERT_TRUE(w.ok()) << w.status().message();
}

// Item 6: 200k entries took minutes (a scan of the table per tensor); now linear.
TEST(ReliabilityTest, CheckpointHeaderOfManyTensorsParses) {
  TempDir dir("rel_many");
  std::vector<CheckpointTensorSpec> specs;
  for (int i = 0; i < 200000; ++i) specs.push_back({fmt::format("t{}", i), DType::kF32, Shape{0}});
  const std::string path = dir / "many.safetensors";
  ASSERT_TRUE(write_checkpoint(path, specs, [](int, void*) { return ok_status(); }, {}).ok());
  const double t0 = now_seconds();
  Result<CheckpointFile> f = read_checkpoint(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->tensors.size(), 200000u);
  EXPECT_LT(now_seconds() - t0, 30.0);  // not a speed test: the quadratic parse took minutes
}

// Item 11: the optimizer's count (the i32 "step" state) must be the metadata step + 1.
TEST(ReliabilityTest, OptimizerCountMustMatchTheMetadataStep) {
  TempDir dir("rel_count");
  {
    auto t = Trainer::create(ckpt_config(dir.str()), Mesh()).value();
    ASSERT_TRUE(train_ok(*t, 5));  // checkpoints 2 and 4
  }
  const std::string good = checkpoint_path(dir / "rel/checkpoints", 4);
  {  // the invariant holds for what the trainer writes
    CheckpointFile f = read_checkpoint(good).value();
    int32_t count = 0;
    std::memcpy(&count, f.bytes(*f.find("step")), 4);
    EXPECT_EQ(count, 5);
    EXPECT_EQ(f.metadata_int("step").value(), 4);
  }
  struct Case {
    int32_t count;
    std::string step, expect;
  };
  const Case cases[] = {
      {1000000, "4", "the optimizer's step count is 1000000 but __metadata__ step is 4"},
      {-7, "4", "step count is -7 but __metadata__ step is 4"},
      {5, "9007199254740992", "__metadata__ step 9007199254740992 is over 2147483646"},
  };
  for (const Case& c : cases) {
    const std::string bad = dir / "bad.safetensors";
    rewrite(good, bad, [&](auto& specs, auto& bytes, auto& meta) {
      for (size_t k = 0; k < specs.size(); ++k)
        if (specs[k].name == "step") std::memcpy(bytes[k].data(), &c.count, 4);
      meta["step"] = c.step;
    });
    Config cfg = tiny_config(10);
    ASSERT_TRUE(cfg.set("load_full_state_path", bad).ok());
    Result<std::unique_ptr<Trainer>> t = Trainer::create(cfg, Mesh());
    ASSERT_FALSE(t.ok()) << c.count;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << t.status().message();
  }
}

// Item 12: every kind of bad latest checkpoint is skipped for the older valid one, and the
// store gets the restore warning the docs promise.
TEST(ReliabilityTest, ResumeSkipsEveryKindOfBadLatestCheckpoint) {
  TempDir dir("rel_fallback");
  auto store = MetricsStore::open(dir / "m.db").value();
  {
    auto t = Trainer::create(ckpt_config(dir.str()), Mesh(), {.store = store.get()}).value();
    ASSERT_TRUE(train_ok(*t, 5));  // checkpoints 2 and 4
  }
  const std::string root = dir / "rel/checkpoints";
  const std::string latest = checkpoint_path(root, 4);
  const std::string saved = dir / "saved.safetensors";
  fs::copy_file(latest, saved);
  using Make = std::function<void()>;
  const std::vector<std::pair<std::string, Make>> kinds = {
      {"a FIFO", [&] { ASSERT_EQ(::mkfifo(latest.c_str(), 0600), 0); }},
      {"a directory", [&] { fs::create_directories(latest); }},
      {"a wrong shape", [&] {
         rewrite(saved, latest, [](auto& specs, auto& bytes, auto&) {
           for (size_t k = 0; k < specs.size(); ++k)
             if (specs[k].shape.rank() == 1 && specs[k].name.find("norm") != std::string::npos) {
               specs[k].shape = Shape{specs[k].shape[0] / 2};
               bytes[k].resize(bytes[k].size() / 2);
               return;
             }
           FAIL() << "no norm scale";
         });
       }},
      {"a wrong dtype", [&] {
         rewrite(saved, latest, [](auto& specs, auto&, auto&) {
           for (auto& s : specs)
             if (s.dtype == DType::kF32 && s.name != "step") {
               s.dtype = DType::kI32;
               return;
             }
         });
       }},
      {"a truncated file", [&] {
         fs::copy_file(saved, latest);
         fs::resize_file(latest, fs::file_size(latest) - 100);
       }},
  };
  for (const auto& [kind, make] : kinds) {
    fs::remove_all(latest);
    make();
    Result<std::unique_ptr<Trainer>> t =
        Trainer::create(ckpt_config(dir.str()), Mesh(), {.store = store.get()});
    ASSERT_TRUE(t.ok()) << kind << ": " << t.status().message();
    EXPECT_EQ((*t)->restored_from(), checkpoint_path(root, 2)) << kind;
    EXPECT_EQ((*t)->current_step(), 3) << kind;
    QueryResult ev = q(*store,
                       "SELECT level, step, message FROM events WHERE run_id = ? AND kind = "
                       "'restore' ORDER BY event_id",
                       (*t)->run_id());
    ASSERT_EQ(ev.rows.size(), 2u) << kind;
    EXPECT_EQ(sql_value_to_string(ev.rows[0][0]), "warning") << kind;
    EXPECT_EQ(sql_value_to_string(ev.rows[0][1]), "4") << kind;
    const std::string message = sql_value_to_string(ev.rows[0][2]);
    EXPECT_NE(message.find("skipped checkpoint 4: "), std::string::npos) << message;
    EXPECT_EQ(sql_value_to_string(ev.rows[1][0]), "info") << kind;
  }
}

// Item 15: a step directory that is a symbolic link is neither listed (a resume would follow
// it anywhere) nor written through.
TEST(ReliabilityTest, StepDirectorySymlinksAreNotFollowed) {
  TempDir dir("rel_symlink");
  {
    auto t = Trainer::create(ckpt_config(dir.str()), Mesh()).value();
    ASSERT_TRUE(train_ok(*t, 3));  // checkpoint 2
  }
  const std::string root = dir / "rel/checkpoints";
  fs::create_directories(dir / "elsewhere");
  fs::copy_file(checkpoint_path(root, 2), dir / "elsewhere/state.safetensors");
  fs::create_directory_symlink(dir / "elsewhere", fs::path(root) / "8");
  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{2}));
  const std::vector<CheckpointTensorSpec> one = {{"x", DType::kF32, Shape{1}}};
  Result<int64_t> w = write_checkpoint(
      checkpoint_path(root, 8), one, [](int, void* dst) {
        std::memset(dst, 0, 4);
        return ok_status();
      },
      {});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("is a symbolic link"), std::string::npos)
      << w.status().message();
  EXPECT_TRUE(read_checkpoint(dir / "elsewhere/state.safetensors").ok());  // untouched
}

// Item 13: a diverged run stops with MaxText's abort_on_nan_loss / abort_on_inf_loss (true by
// default), an error event and a FAILED run; false keeps going.
TEST(ReliabilityTest, ANonFiniteLossStopsTraining) {
  TempDir dir("rel_nan");
  auto store = MetricsStore::open(dir / "m.db").value();
  Config c = tiny_config(10);
  ASSERT_TRUE(c.set("learning_rate", 1e30).ok());
  std::string run;
  {
    auto t = Trainer::create(c, Mesh(), {.store = store.get()}).value();
    run = t->run_id();
    Status s = t->train(10, [](const StepMetrics&) { return true; });
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("training stopped. Set abort_on_"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("learning_rate 1e+30"), std::string::npos) << s.message();
    EXPECT_LT(t->current_step(), 10);
  }
  QueryResult ev = q(*store, "SELECT message FROM events WHERE run_id = ? AND level = 'error'", run);
  ASSERT_FALSE(ev.rows.empty());
  EXPECT_NE(sql_value_to_string(ev.rows[0][0]).find("training stopped"), std::string::npos);
  EXPECT_EQ(sql_value_to_string(q(*store, "SELECT status FROM runs WHERE run_id = ?", run).rows.at(0)[0]),
            "FAILED");
  ASSERT_TRUE(c.set("abort_on_nan_loss", false).ok());
  ASSERT_TRUE(c.set("abort_on_inf_loss", false).ok());
  auto t = Trainer::create(c, Mesh()).value();
  EXPECT_TRUE(train_ok(*t, 10));
  EXPECT_EQ(t->current_step(), 10);
}

// Another process (the sqlite3 CLI) holding the store's write lock until unlock_store().
FILE* lock_store(const std::string& db) {
  FILE* other = ::popen(fmt::format("sqlite3 '{}' >/dev/null", db).c_str(), "w");
  if (other == nullptr) return nullptr;
  std::fputs("PRAGMA busy_timeout = 5000;\nBEGIN IMMEDIATE;\nDELETE FROM tags WHERE 0;\n", other);
  std::fflush(other);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return other;
}

int unlock_store(FILE* other) {
  std::fputs("ROLLBACK;\n", other);
  return ::pclose(other);
}

// Item 14: a store another writer keeps locked fails the run's writes after a short wait
// each (not busy_timeout each), and the run's end is written once the lock is free.
TEST(ReliabilityTest, AStoreThatStaysLockedEndsTheRunPromptly) {
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs sqlite3";
  TempDir dir("rel_locked");
  const std::string db = dir / "m.db";
  auto store = MetricsStore::open(db, {.busy_timeout_ms = 1000}).value();
  std::string run;
  FILE* other = nullptr;
  double end_s = 0;
  {
    auto t = Trainer::create(tiny_config(10), Mesh(), {.store = store.get()}).value();
    run = t->run_id();
    ASSERT_TRUE(train_ok(*t, 2));
    other = lock_store(db);
    ASSERT_NE(other, nullptr);
    EXPECT_FALSE(t->train(3, [](const StepMetrics&) { return true; }).ok());
    end_s = now_seconds();
  }  // the run's end: a flush and the status, both refused by the lock
  end_s = now_seconds() - end_s;
  // Each refused write now waits 0.2 s, not busy_timeout's 1 s: the end took 5+ s before
  // (two flushes of two tries each, then the status), a minute with the default 5 s.
  EXPECT_LT(end_s, 2.5);
  ASSERT_EQ(unlock_store(other), 0);
  EXPECT_TRUE(store->flush().ok());  // the next write that succeeds writes the run's end too
  EXPECT_EQ(sql_value_to_string(q(*store, "SELECT status FROM runs WHERE run_id = ?", run).rows.at(0)[0]),
            "FAILED");
}

// Item 14's last case: the process ends (here: the store object is destroyed, as at exit) while
// another writer still holds the store. The steps it could not write and its run's end are saved
// in '<db>-unsaved' and the next open adds them: nothing lost, the run not left RUNNING/KILLED.
TEST(ReliabilityTest, AStoreLockedAtCloseKeepsItsRowsForTheNextOpen) {
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs sqlite3";
  TempDir dir("rel_unsaved");
  const std::string db = dir / "m.db";
  std::string run;
  int64_t ran = 0;
  FILE* other = nullptr;
  {
    auto store = MetricsStore::open(db, {.busy_timeout_ms = 300}).value();
    auto t = Trainer::create(tiny_config(10), Mesh(), {.store = store.get()}).value();
    run = t->run_id();
    ASSERT_TRUE(train_ok(*t, 2));
    other = lock_store(db);
    ASSERT_NE(other, nullptr);
    EXPECT_FALSE(t->train(3, [](const StepMetrics&) { return true; }).ok());
    ran = t->current_step();  // train() stopped at the error: 2 + the steps it dispatched
    EXPECT_GE(ran, 3);
    t.reset();  // the run's end: refused by the lock, kept with its rows
    EXPECT_GT(store->pending_rows(), 0u);
  }  // the store closes with the lock still held: its rows go to m.db-unsaved
  EXPECT_EQ(::access((db + "-unsaved").c_str(), F_OK), 0);
  ASSERT_EQ(unlock_store(other), 0);
  auto store = MetricsStore::open(db).value();
  EXPECT_NE(::access((db + "-unsaved").c_str(), F_OK), 0) << "added, then deleted";
  const QueryResult steps = q(*store, "SELECT count(*) FROM steps WHERE run_id = ?", run);
  EXPECT_EQ(sql_value_to_string(steps.rows.at(0)[0]), std::to_string(ran));
  const std::string status =
      sql_value_to_string(q(*store, "SELECT status FROM runs WHERE run_id = ?", run).rows.at(0)[0]);
  EXPECT_NE(status, "RUNNING");
  EXPECT_NE(status, "KILLED");
}

// A '-unsaved' file that is not what the store wrote fails the open, naming it; nothing crashes
// and nothing is dropped (the file stays for the user to look at).
TEST(ReliabilityTest, AnUnreadableUnsavedFileFailsTheOpenNamingIt) {
  TempDir dir("rel_unsaved_bad");
  const std::string db = dir / "m.db";
  { auto store = MetricsStore::open(db).value(); }
  FILE* f = std::fopen((db + "-unsaved").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("not a database, but long enough to have a header of a hundred bytes or so .......\n",
             f);
  std::fclose(f);
  auto store = MetricsStore::open(db);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("m.db-unsaved"), std::string::npos) << store.status().message();
  EXPECT_NE(store.status().message().find("move that file away"), std::string::npos);
  EXPECT_EQ(::access((db + "-unsaved").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace eng
