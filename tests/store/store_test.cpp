// tests/store/store_test.cpp: the metrics store: schema, WAL, flush transactions, views, migrations, crashes.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "engine/base/clock.h"
#include "engine/store/metrics_store.h"

namespace eng {
namespace {

namespace fs = std::filesystem;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("store_test_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  std::string db_path(const char* name = "m.db") const { return (dir_ / name).string(); }
  std::unique_ptr<MetricsStore> open_ok(const std::string& path, const OpenOptions& o = {}) {
    auto r = MetricsStore::open(path, o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  static SqlValue one(MetricsStore& s, std::string_view sql, std::span<const SqlValue> args = {}) {
    auto r = s.query(sql, args);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok() || r->rows.empty() || r->rows[0].empty()) return SqlValue();
    return r->rows[0][0];
  }
  static int64_t int_of(const SqlValue& v) { return std::get<int64_t>(v); }
  static double real_of(const SqlValue& v) { return std::get<double>(v); }
  static std::string text_of(const SqlValue& v) { return std::get<std::string>(v); }

  fs::path dir_;  // per-test scratch directory
};

TEST_F(StoreTest, CreatesSchemaInWalModeWithVersion) {
  auto s = open_ok(db_path());
  ASSERT_TRUE(s);
  EXPECT_EQ(*s->user_version(), store_schema_version());
  EXPECT_EQ(text_of(one(*s, "PRAGMA journal_mode")), "wal");
  EXPECT_EQ(int_of(one(*s, "PRAGMA foreign_keys")), 1);
  EXPECT_EQ(int_of(one(*s, "PRAGMA synchronous")), 1);  // NORMAL
  for (const char* t : {"runs", "params", "tags", "meshes", "steps", "metrics", "latest_metrics",
                        "compilations", "memory_analysis", "cost_analysis", "checkpoints",
                        "events", "tensor_shardings", "v_best_loss", "v_step_time_pct",
                        "v_compile_summary", "v_run_summary"}) {
    SqlValue name[] = {std::string(t)};
    EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM sqlite_schema WHERE name = ?", name)), 1) << t;
  }
  // STRICT: a string in an INTEGER column is rejected.
  auto r = s->query("INSERT INTO runs (run_id, name, start_ms) VALUES ('x', 'n', 'soon')");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot store TEXT value in INTEGER column"),
            std::string::npos)
      << r.status().message();
}

TEST_F(StoreTest, RunsParamsStepsAndMetricsRoundTrip) {
  auto s = open_ok(db_path());
  auto run = s->begin_run({.name = "tiny", .argv = {"shardlab", "train.lua"},
                           .params = {{"mesh.fsdp", "4"}, {"steps", "10"}}});
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->size(), 32u);
  for (int i = 0; i < 5; ++i) {
    s->log_step({.run_id = *run, .step = i, .loss = 5.0 - i, .step_time_s = 0.1,
                 .compiled = i == 0});
    s->log_metric(*run, "learning/loss", i, 5.0 - i);
  }
  s->log_metric(*run, "learning/loss", 5, NAN);
  EXPECT_EQ(s->pending_rows(), 11u);
  ASSERT_TRUE(s->flush().ok());
  EXPECT_EQ(s->pending_rows(), 0u);
  ASSERT_TRUE(s->end_run(*run, RunStatus::kFinished).ok());

  SqlValue id[] = {*run};
  EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM steps WHERE run_id = ?", id)), 5);
  EXPECT_EQ(text_of(one(*s, "SELECT value FROM params WHERE run_id = ? AND key = 'mesh.fsdp'", id)),
            "4");
  EXPECT_EQ(text_of(one(*s, "SELECT status FROM runs WHERE run_id = ?", id)), "FINISHED");
  EXPECT_EQ(text_of(one(*s, "SELECT argv FROM runs WHERE run_id = ?", id)),
            R"(["shardlab","train.lua"])");
  // latest_metrics follows the newest step; a NaN is stored as NULL with is_nan = 1.
  auto latest = s->query("SELECT step, value, is_nan FROM latest_metrics WHERE run_id = ?", id);
  ASSERT_TRUE(latest.ok());
  ASSERT_EQ(latest->rows.size(), 1u);
  EXPECT_EQ(int_of(latest->rows[0][0]), 5);
  EXPECT_EQ(latest->rows[0][1].index(), 0u);
  EXPECT_EQ(int_of(latest->rows[0][2]), 1);
  EXPECT_EQ(latest->columns, (std::vector<std::string>{"step", "value", "is_nan"}));
  EXPECT_FALSE(s->end_run("nope", RunStatus::kFailed).ok());
}

TEST_F(StoreTest, FlushIsOneTransactionAndInvisibleUntilThen) {
  auto writer = open_ok(db_path());
  auto reader = open_ok(db_path());
  auto run = writer->begin_run({.name = "r"});
  ASSERT_TRUE(run.ok());
  one(*writer, "PRAGMA wal_checkpoint(TRUNCATE)");
  for (int i = 0; i < 200; ++i) {
    writer->log_step({.run_id = *run, .step = i, .loss = 1.0, .step_time_s = 0.01});
    writer->log_metric(*run, "learning/loss", i, 1.0);
  }
  EXPECT_EQ(int_of(one(*reader, "SELECT count(*) FROM steps")), 0);
  ASSERT_TRUE(writer->flush().ok());
  EXPECT_EQ(int_of(one(*reader, "SELECT count(*) FROM steps")), 200);
  EXPECT_EQ(int_of(one(*reader, "SELECT count(*) FROM metrics")), 200);
  // One commit writes each touched page once; 400 commits would write hundreds of frames.
  auto wal = writer->query("PRAGMA wal_checkpoint(PASSIVE)");
  ASSERT_TRUE(wal.ok());
  int64_t frames = int_of(wal->rows[0][1]);
  EXPECT_GT(frames, 0);
  EXPECT_LT(frames, 40) << "flush should commit once, WAL has " << frames << " frames";
}

// The sqlite3 CLI reads the file (tables and views) while a writer holds it open mid-run.
TEST_F(StoreTest, Sqlite3CliReadsWhileRunWrites) {
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "no sqlite3 CLI";
  auto s = open_ok(db_path());
  auto run = *s->begin_run({.name = "live"});
  for (int i = 0; i < 5; ++i) s->log_step({.run_id = run, .step = i, .step_time_s = 0.1 * (i + 1)});
  ASSERT_TRUE(s->flush().ok());
  s->log_step({.run_id = run, .step = 5});  // buffered, not yet visible
  std::string cmd = fmt::format(
      "sqlite3 -readonly '{}' 'SELECT count(*) FROM steps; SELECT n_steps, p50_s FROM "
      "v_step_time_pct;' 2>&1",
      db_path());
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_EQ(::pclose(p), 0) << out;
  EXPECT_EQ(out, "5\n5|0.3\n");
}

TEST_F(StoreTest, ViewsAndPercentileAggregates) {
  auto s = open_ok(db_path());
  auto a = *s->begin_run({.name = "a"});
  auto b = *s->begin_run({.name = "b"});
  // Run a: steps 1..10 honest with times 0.1..1.0; step 0 compiled (huge), step 11 unsynced.
  s->log_step({.run_id = a, .step = 0, .loss = 9, .step_time_s = 40.0, .compiled = true});
  for (int i = 1; i <= 10; ++i)
    s->log_step({.run_id = a, .step = i, .loss = 10.0 - i * 0.5, .step_time_s = 0.1 * i});
  s->log_step({.run_id = a, .step = 11, .loss = 4.0, .step_time_s = 0.001, .synced = false});
  s->log_step({.run_id = b, .step = 0, .loss = 3.0, .step_time_s = 2.0});
  s->log_step({.run_id = b, .step = 1, .loss = 3.0, .step_time_s = 4.0});
  ASSERT_TRUE(s->flush().ok());

  SqlValue ida[] = {a}, idb[] = {b};
  auto best = s->query("SELECT step, loss FROM v_best_loss WHERE run_id = ?", ida);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(int_of(best->rows[0][0]), 11);
  EXPECT_DOUBLE_EQ(real_of(best->rows[0][1]), 4.0);
  EXPECT_EQ(int_of(one(*s, "SELECT step FROM v_best_loss WHERE run_id = ?", idb)), 0);  // tie: earliest

  auto pct = s->query("SELECT n_steps, p50_s, p90_s, p99_s FROM v_step_time_pct WHERE run_id = ?",
                      ida);
  ASSERT_TRUE(pct.ok());
  EXPECT_EQ(int_of(pct->rows[0][0]), 10);                // compiled and unsynced steps excluded
  EXPECT_NEAR(real_of(pct->rows[0][1]), 0.55, 1e-12);    // numpy.percentile(0.1..1.0, 50)
  EXPECT_NEAR(real_of(pct->rows[0][2]), 0.91, 1e-12);
  EXPECT_NEAR(real_of(pct->rows[0][3]), 0.991, 1e-12);
  const char* agg =
      "SELECT percentile(step_time_s, 50), percentile(step_time_s, 90), median(step_time_s) "
      "FROM steps WHERE run_id = ? AND synced AND NOT compiled";
  auto direct = s->query(agg, ida);
  ASSERT_TRUE(direct.ok()) << direct.status().message();
  EXPECT_NEAR(real_of(direct->rows[0][0]), real_of(pct->rows[0][1]), 1e-12);
  EXPECT_NEAR(real_of(direct->rows[0][1]), real_of(pct->rows[0][2]), 1e-12);
  EXPECT_NEAR(real_of(direct->rows[0][2]), 0.55, 1e-12);
  EXPECT_NEAR(real_of(one(*s, "SELECT p50_s FROM v_step_time_pct WHERE run_id = ?", idb)), 3.0,
              1e-12);
  EXPECT_EQ(one(*s, "SELECT median(x) FROM (SELECT NULL AS x)").index(), 0u);  // empty -> NULL
  auto bad = s->query("SELECT percentile(step_time_s, 150) FROM steps");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("between 0 and 100"), std::string::npos);

  for (const char* outcome : {"miss", "hit", "hit"}) {
    auto id = s->record_compilation({.run_id = a, .step = 0, .fn_name = "train_step",
                                     .outcome = outcome, .cache_level = "executable",
                                     .reason_kind = outcome[0] == 'm' ? "never_seen" : "",
                                     .compile_s = 1.5});
    ASSERT_TRUE(id.ok()) << id.status().message();
  }
  auto summary = s->query(
      "SELECT events, hits, misses, compile_s, reasons FROM v_compile_summary WHERE run_id = ?",
      ida);
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(int_of(summary->rows[0][0]), 3);
  EXPECT_EQ(int_of(summary->rows[0][1]), 2);
  EXPECT_EQ(int_of(summary->rows[0][2]), 1);
  EXPECT_DOUBLE_EQ(real_of(summary->rows[0][3]), 4.5);
  EXPECT_EQ(text_of(summary->rows[0][4]), "never_seen");
}

TEST_F(StoreTest, CompilationMemoryCheckpointEventsShardings) {
  auto s = open_ok(db_path());
  auto run = *s->begin_run({.name = "r"});
  auto cid = s->record_compilation({.run_id = run, .fn_name = "train_step", .outcome = "miss",
                                    .cache_level = "tracing", .reason_kind = "shardings",
                                    .reason_text = "arg 0: P('data') vs P()"});
  ASSERT_TRUE(cid.ok()) << cid.status().message();
  ASSERT_TRUE(s->record_memory_analysis(*cid, {.argument_size_in_bytes = 100,
                                               .output_size_in_bytes = 50,
                                               .alias_size_in_bytes = 30,
                                               .temp_size_in_bytes = 20})
                  .ok());
  SqlValue id[] = {*cid};
  EXPECT_EQ(int_of(one(*s, "SELECT est_total_bytes FROM memory_analysis WHERE compile_id = ?", id)),
            140);
  EXPECT_EQ(one(*s, "SELECT peak_memory_in_bytes FROM memory_analysis WHERE compile_id = ?", id)
                .index(),
            0u);  // unknown stays NULL
  std::pair<std::string, double> costs[] = {{"flops", 1e9}, {"bytes accessed", 4e6}};
  ASSERT_TRUE(s->record_cost_analysis(*cid, costs).ok());
  ASSERT_TRUE(s->record_checkpoint({.run_id = run, .step = 10, .path = "ckpt/10", .bytes = 1234,
                                    .save_s = 0.5})
                  .ok());
  ASSERT_TRUE(s->record_event({.run_id = run, .kind = "recompile", .message = "m"}).ok());
  auto mesh = s->record_mesh({.run_id = run, .axis_names = {"data", "fsdp"}, .axis_sizes = {2, 4},
                              .axis_types = {"Auto", "Auto"}});
  ASSERT_TRUE(mesh.ok());
  TensorShardingRow rows[] = {{.path = "w", .dtype = "f32", .shape = {8, 4}, .spec = "P('fsdp')"}};
  auto snap = s->record_tensor_shardings(run, 0, *mesh, rows);
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  EXPECT_EQ(*snap, 1);
  EXPECT_EQ(*s->record_tensor_shardings(run, 1, *mesh, rows), 2);
  EXPECT_EQ(text_of(one(*s, "SELECT shape FROM tensor_shardings LIMIT 1")), "[8,4]");
  // CHECK constraints reject values outside the vocabulary.
  auto bad = s->record_compilation({.fn_name = "f", .outcome = "maybe", .cache_level = "tracing"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("CHECK constraint failed"), std::string::npos);
  // A step for an unknown run fails the whole flush with the foreign-key error.
  s->log_step({.run_id = "no-such-run", .step = 0});
  Status f = s->flush();
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("FOREIGN KEY constraint failed"), std::string::npos) << f.message();
  EXPECT_EQ(s->pending_rows(), 0u);
}

TEST_F(StoreTest, QueryErrorsNameSqliteMessageAndSql) {
  auto s = open_ok(db_path());
  auto r = s->query("SELEC 1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "store: near \"SELEC\": syntax error (in \"SELEC 1\")");
  r = s->query("SELECT * FROM nope");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no such table: nope"), std::string::npos);
  r = s->query("SELECT ?, ?", std::vector<SqlValue>{int64_t{1}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2 parameter(s) but 1 argument(s)"), std::string::npos);
  r = s->query("SELECT 1; SELECT 2");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("one statement per query"), std::string::npos);
  auto ok = s->query("SELECT 1 AS a, 2.5 AS b, 'x' AS c, NULL AS d, x'00ff' AS e; -- trailing");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->rows[0][0].index(), 1u);
  EXPECT_EQ(ok->rows[0][1].index(), 2u);
  EXPECT_EQ(ok->rows[0][2].index(), 3u);
  EXPECT_EQ(ok->rows[0][3].index(), 0u);
  EXPECT_EQ(sql_value_to_string(ok->rows[0][4]), "x'00ff'");
}

TEST_F(StoreTest, MigratesFromOlderVersionAndRefusesNewer) {
  // This binary's migrations plus one more step (a newer shardlab), and a broken one after it.
  const int n = store_schema_version();
  std::vector<Migration> next(store_migrations().begin(), store_migrations().end());
  next.push_back({n + 1, "add runs.note",
                  "ALTER TABLE runs ADD COLUMN note TEXT; UPDATE runs SET note = 'old';"});
  std::string path = db_path();
  std::string run;
  {
    auto s = open_ok(path);
    run = *s->begin_run({.name = "before"});
    EXPECT_EQ(*s->user_version(), n);
  }
  {
    auto s = open_ok(path, {.migrations = next});
    ASSERT_TRUE(s);
    EXPECT_EQ(*s->user_version(), n + 1);
    EXPECT_EQ(text_of(one(*s, "SELECT note FROM runs")), "old");  // data kept, step applied
  }
  auto newer = MetricsStore::open(path);  // this binary only knows n
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().message(),
            fmt::format("store: cannot open '{}': schema version {} is newer than this shardlab "
                        "supports ({})", path, n + 1, n));
  // A failing migration rolls back and says which step failed.
  std::vector<Migration> broken = next;
  broken.back().sql = "ALTER TABLE runs ADD COLUMN note TEXT";
  broken.push_back({n + 2, "bad step", "CREATE TABLE runs (x)"});
  auto b = MetricsStore::open(path, {.migrations = broken});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(fmt::format("migration to v{} (bad step) failed", n + 2)),
            std::string::npos)
      << b.status().message();
  EXPECT_EQ(*open_ok(path, {.migrations = next})->user_version(), n + 1);  // still n + 1
}

TEST_F(StoreTest, ClearErrorsForBadPaths) {
  std::string missing = (dir_ / "no" / "such" / "m.db").string();
  auto r = MetricsStore::open(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            fmt::format("store: cannot open '{}': directory '{}' does not exist", missing,
                        (dir_ / "no" / "such").string()));

  std::string corrupt = db_path("corrupt.db");
  std::ofstream(corrupt) << std::string(8192, 'z');
  r = MetricsStore::open(corrupt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(fmt::format("store: cannot open '{}': file is not a database",
                                                  corrupt)),
            std::string::npos)
      << r.status().message();

  r = MetricsStore::open(dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("it is a directory"), std::string::npos);

}

// Issue 16 item 10: `--db /dev/null` created /dev/null-journal.
TEST_F(StoreTest, NonRegularFilesAreRejected) {
  auto r = MetricsStore::open("/dev/null");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "store: cannot open '/dev/null': it is a character device, not a regular file");
  EXPECT_FALSE(std::filesystem::exists("/dev/null-journal"));
  const std::string fifo = db_path("fifo.db");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = MetricsStore::open(fifo);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("it is a FIFO, not a regular file"), std::string::npos);
}

TEST_F(StoreTest, ReadOnlyFileIsRejected) {
  std::string ro = db_path("ro.db");
  { open_ok(ro); }
  const std::string want = fmt::format("store: cannot open '{}': file is read-only", ro);
  if (::geteuid() != 0) {
    fs::permissions(ro, fs::perms::owner_read);
    auto r = MetricsStore::open(ro);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), want);
    return;
  }
  // Root ignores file permissions: open it from a child that drops to the unprivileged
  // `nobody` (65534), for whom the root-owned 0444 file is read-only.
  fs::permissions(ro, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(fs::path(ro).parent_path(), fs::perms::owner_all | fs::perms::group_read |
                  fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    auto r = MetricsStore::open(ro);
    if (r.ok()) ::_exit(1);
    if (r.status().message() != want) {
      std::fprintf(stderr, "got: %s\n", r.status().message().c_str());
      ::_exit(2);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: opened a read-only file; 2: wrong message; 3: setuid failed";
}

TEST_F(StoreTest, SigkillAfterFlushKeepsFlushedRows) {
  std::string path = db_path();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // child: write, flush, buffer more, signal the parent, wait to be killed
    ::close(fds[0]);
    auto s = MetricsStore::open(path);
    if (!s.ok()) ::_exit(2);
    auto run = (*s)->begin_run({.name = "killed"});
    for (int i = 0; i < 50; ++i) (*s)->log_step({.run_id = *run, .step = i, .loss = 1.0 * i});
    if (!(*s)->flush().ok()) ::_exit(3);
    for (int i = 50; i < 60; ++i) (*s)->log_step({.run_id = *run, .step = i, .loss = 1.0 * i});
    char c = 'f';
    (void)!::write(fds[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1) << "child failed before flushing";
  ::close(fds[0]);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  auto s = open_ok(path);
  ASSERT_TRUE(s);
  EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM steps")), 50);
  EXPECT_EQ(int_of(one(*s, "SELECT max(step) FROM steps")), 49);
  // Issue 15: the next open marks the run of the vanished (SIGKILLed) process KILLED, ending
  // it at its last flushed step.
  EXPECT_EQ(text_of(one(*s, "SELECT status FROM runs")), "KILLED");
  EXPECT_EQ(int_of(one(*s, "SELECT end_ms = (SELECT max(wall_ms) FROM steps) FROM runs")), 1);
  EXPECT_EQ(text_of(one(*s, "PRAGMA integrity_check")), "ok");
}

// Issue 15: a RUNNING run whose pid now belongs to another process (the pid was reused) is
// KILLED at the next open; its own live process keeps it RUNNING.
TEST_F(StoreTest, ReusedPidDoesNotKeepADeadRunRunning) {
  std::string path = db_path();
  {
    auto s = open_ok(path);
    ASSERT_TRUE(s);
    auto alive = s->begin_run({.name = "alive"});
    auto reused = s->begin_run({.name = "reused"});
    ASSERT_TRUE(alive.ok() && reused.ok());
    SqlValue id[] = {*reused};
    EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM tags WHERE key = 'shardlab.pid_start'")), 2);
    // The same pid (this process, alive), but started by another process than the one now
    // holding it.
    ASSERT_TRUE(s->query("UPDATE tags SET value = 'another-boot/12345' WHERE run_id = ? AND "
                         "key = 'shardlab.pid_start'", id)
                    .ok());
  }
  auto s = open_ok(path);
  ASSERT_TRUE(s);
  EXPECT_EQ(text_of(one(*s, "SELECT status FROM runs WHERE name = 'reused'")), "KILLED");
  EXPECT_EQ(text_of(one(*s, "SELECT status FROM runs WHERE name = 'alive'")), "RUNNING");
  EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM events WHERE kind = 'run_killed'")), 1);
}

// ---- issue 16 item 7: sl.sql cannot damage the store ------------------------------------

TEST_F(StoreTest, UserQueriesCannotChangeSchemaPragmasTransactionsOrAttach) {
  auto s = open_ok(db_path());
  const std::string attached = (dir_ / "elsewhere.db").string();
  const std::pair<std::string, const char*> refused[] = {
      {"PRAGMA user_version = 99", "set a PRAGMA"},
      {"PRAGMA journal_mode = DELETE", "set a PRAGMA"},
      {"DROP TABLE steps", "change the store's schema"},
      {"CREATE TABLE extra (x)", "change the store's schema"},
      {"ALTER TABLE runs ADD COLUMN note TEXT", "change the store's schema"},
      {"BEGIN", "control transactions"},
      {"SAVEPOINT a", "control transactions"},
      {"ATTACH '" + attached + "' AS other", "ATTACH or DETACH"},
      {"SELECT 1; DROP TABLE steps", "change the store's schema"},
  };
  for (const auto& [sql, why] : refused) {
    auto r = s->query(sql);
    ASSERT_FALSE(r.ok()) << sql;
    EXPECT_NE(r.status().message().find(std::string("sl.sql may not ") + why), std::string::npos)
        << sql << ": " << r.status().message();
  }
  EXPECT_FALSE(fs::exists(attached));
  EXPECT_EQ(*s->user_version(), store_schema_version());
  EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM sqlite_schema WHERE name = 'steps'")), 1);
  // Reading pragmas, temp objects and row writes stay allowed (the documented way to write).
  EXPECT_EQ(int_of(one(*s, "PRAGMA user_version")), store_schema_version());
  EXPECT_TRUE(s->query("PRAGMA table_info(steps)").ok());
  EXPECT_TRUE(s->query("PRAGMA wal_checkpoint(PASSIVE)").ok());
  EXPECT_TRUE(s->query("CREATE TEMP TABLE scratch (x)").ok());
  EXPECT_TRUE(s->query("INSERT INTO scratch VALUES (1)").ok());
  EXPECT_TRUE(s->query("INSERT INTO runs (run_id, name, start_ms) VALUES ('r', 'n', 0)").ok());
  // A refused BEGIN leaves no transaction open: the trainer's flush still commits.
  auto run = s->begin_run({.name = "after"});
  ASSERT_TRUE(run.ok()) << run.status().message();
  s->log_step({.run_id = *run, .step = 0, .loss = 1.0});
  ASSERT_TRUE(s->flush().ok());
  SqlValue id[] = {*run};
  EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM steps WHERE run_id = ?", id)), 1);
}

// ---- issue 16 item 6: a long query can be interrupted, and cannot grow without bound -------

TEST_F(StoreTest, InterruptCheckStopsARecursiveQuery) {
  auto s = open_ok(db_path());
  const auto t0 = std::chrono::steady_clock::now();
  s->set_interrupt_check(
      [&] { return std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(200); });
  auto r = s->query(
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCancelled);
  EXPECT_NE(r.status().message().find("query interrupted"), std::string::npos)
      << r.status().message();
  EXPECT_LT(secs, 5.0);
  s->set_interrupt_check(nullptr);
  EXPECT_EQ(int_of(one(*s, "SELECT 7")), 7);  // the connection is usable afterwards
}

TEST_F(StoreTest, EndlessRowsStopAtTheRowLimit) {
  auto s = open_ok(db_path());
  auto r =
      s->query("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 1000000 rows; add a LIMIT"), std::string::npos)
      << r.status().message();
}

// ---- issue 16 item 8: pending rows are kept until their transaction commits ---------------

TEST_F(StoreTest, RowsSurviveAFlushBlockedByAnotherWriter) {
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs the sqlite3 CLI";
  const std::string path = db_path();
  auto s = open_ok(path, {.busy_timeout_ms = 100});
  auto run = s->begin_run({.name = "blocked"});
  ASSERT_TRUE(run.ok());
  for (int i = 0; i < 3; ++i) s->log_step({.run_id = *run, .step = i, .loss = 1.0});
  // Another process takes the write lock and holds it.
  FILE* other = ::popen(fmt::format("sqlite3 '{}' >/dev/null", path).c_str(), "w");
  ASSERT_NE(other, nullptr);
  std::fputs(
      "PRAGMA busy_timeout = 5000;\nBEGIN IMMEDIATE;\nINSERT INTO tags VALUES ('x', 'k', 'v');\n",
      other);
  std::fflush(other);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Status blocked = s->flush();
  ASSERT_FALSE(blocked.ok());
  EXPECT_NE(blocked.message().find("rows kept for the next flush"), std::string::npos)
      << blocked.message();
  EXPECT_EQ(s->pending_rows(), 3u);
  std::fputs("ROLLBACK;\n", other);
  ASSERT_EQ(::pclose(other), 0);
  ASSERT_TRUE(s->flush().ok());  // the retry commits every kept row
  EXPECT_EQ(s->pending_rows(), 0u);
  SqlValue id[] = {*run};
  EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM steps WHERE run_id = ?", id)), 3);
}

// ---- issue 15: runs with generated names, found by filters, discarded when empty ----------

TEST_F(StoreTest, GeneratedNamesAreUniqueAdjectiveNounNumber) {
  auto s = open_ok(db_path());
  std::set<std::string> names;
  for (int i = 0; i < 30; ++i) {
    auto run = s->begin_run({});
    ASSERT_TRUE(run.ok());
    SqlValue id[] = {*run};
    std::string name = text_of(one(*s, "SELECT name FROM runs WHERE run_id = ?", id));
    EXPECT_TRUE(std::regex_match(name, std::regex("[a-z]+-[a-z]+-[0-9]+"))) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 30u);
  SqlValue pid[] = {std::to_string(::getpid())};
  EXPECT_EQ(
      int_of(one(*s, "SELECT count(*) FROM tags WHERE key = 'shardlab.pid' AND value = ?", pid)),
      30);
}

TEST_F(StoreTest, EmptyRunsAreDiscardedKeepingTheirCompilations) {
  auto s = open_ok(db_path());
  auto empty = s->begin_run({.name = "never-stepped"});
  auto used = s->begin_run({.name = "stepped"});
  ASSERT_TRUE(empty.ok() && used.ok());
  ASSERT_TRUE(s->record_compilation(
                   {.run_id = *empty, .fn_name = "f", .outcome = "miss", .cache_level = "tracing"})
                  .ok());
  s->log_step({.run_id = *used, .step = 0, .loss = 1.0});
  EXPECT_TRUE(*s->discard_run_if_empty(*empty));
  EXPECT_FALSE(*s->discard_run_if_empty(*used));
  EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM runs")), 1);
  EXPECT_EQ(int_of(one(*s, "SELECT count(*) FROM compilations WHERE run_id IS NULL")), 1);
}

TEST_F(StoreTest, FindRunsFiltersByNameStatusTimeParamsAndSql) {
  auto s = open_ok(db_path());
  auto a = s->begin_run({.name = "alpha-1", .params = {{"mesh.fsdp", "4"}}});
  auto b = s->begin_run({.name = "beta-2", .params = {{"mesh.fsdp", "2"}}});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(s->end_run(*b, RunStatus::kFinished).ok());
  auto names = [&](const RunFilter& f) {
    std::vector<std::string> out;
    auto r = s->find_runs(f);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (r.ok())
      for (auto& row : r->rows) out.push_back(std::get<std::string>(row[1]));
    std::sort(out.begin(), out.end());
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names({.name = "alpha-1"}), V{"alpha-1"});
  EXPECT_EQ(names({.name = "*-2"}), V{"beta-2"});
  EXPECT_EQ(names({.status = "RUNNING"}), V{"alpha-1"});
  EXPECT_EQ(names({.params = {{"mesh.fsdp", "2"}}}), V{"beta-2"});
  EXPECT_EQ(names({.since_ms = unix_ms() + 60000}), V{});
  EXPECT_EQ(names({.where = "name LIKE 'a%' OR status = 'FINISHED'"}), (V{"alpha-1", "beta-2"}));
  EXPECT_EQ(names({.limit = 1}).size(), 1u);
  auto bad = s->find_runs({.where = "nope = 1"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no such column: nope"), std::string::npos)
      << bad.status().message();
  auto damage = s->find_runs({.where = "1); DROP TABLE steps; --"});
  EXPECT_FALSE(damage.ok());
  auto status = s->find_runs({.status = "DONE"});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.status().message().find(
                "status must be RUNNING, FINISHED, FAILED or KILLED, got 'DONE'"),
            std::string::npos);
}

}  // namespace
}  // namespace eng
