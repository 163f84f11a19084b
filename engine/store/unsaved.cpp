// engine/store/unsaved.cpp: what a store could not take when it closed (issue 30 item 14).
//
// A process that ends while another writer holds the store past busy_timeout (or while its disk
// is full) cannot write its last buffered steps and metrics, nor its run's end. Before, they were
// lost and the run stayed RUNNING until the next open() marked it KILLED. Now the destructor
// saves them in '<path>-unsaved', an SQLite file of its own beside the store (the store's lock
// does not cover it, as SQLite's own '-wal' sits beside it), and the next open() adds them in
// one transaction, before it marks vanished runs, then deletes the file. Both say on stderr
// what they did; a file that cannot be added fails the open, naming it (nothing is dropped).
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/store/metrics_store.h"

namespace eng {
namespace {

constexpr const char* kSteps =
    "run_id, step, wall_ms, loss, step_time_s, compile_s, data_s, tokens, tokens_per_s, "
    "tokens_per_s_device, tflops_per_device, grad_norm, lr, synced, compiled";
constexpr const char* kMetrics = "run_id, key, context, step, value, is_nan, wall_ms";

std::string unsaved_path(const std::string& path) { return path + "-unsaved"; }

SqlValue opt(const std::optional<double>& v) { return v ? SqlValue(*v) : SqlValue(); }
SqlValue opt(const std::optional<int64_t>& v) { return v ? SqlValue(*v) : SqlValue(); }

}  // namespace

void MetricsStore::save_unsaved_locked() {
  const std::string file = unsaved_path(path_);
  const size_t steps = pending_steps_.size(), metrics = pending_metrics_.size(),
               ends = pending_ends_.size();
  SqlValue name[] = {file};
  Status s = run_uncached("ATTACH DATABASE ? AS unsaved", name);
  if (s.ok()) {
    s = exec(fmt::format("CREATE TABLE IF NOT EXISTS unsaved.steps ({0}); "
                         "CREATE TABLE IF NOT EXISTS unsaved.metrics ({1}); "
                         "CREATE TABLE IF NOT EXISTS unsaved.ends (run_id, status, end_ms);",
                         kSteps, kMetrics));
    if (s.ok()) s = in_transaction([&] {
      Status w;
      for (size_t i = 0; w.ok() && i < steps; ++i) {
        const StepRow& r = pending_steps_[i];
        SqlValue a[] = {r.run_id, r.step, r.wall_ms, opt(r.loss), opt(r.step_time_s),
                        opt(r.compile_s), opt(r.data_s), opt(r.tokens), opt(r.tokens_per_s),
                        opt(r.tokens_per_s_device), opt(r.tflops_per_device), opt(r.grad_norm),
                        opt(r.lr), int64_t{r.synced}, int64_t{r.compiled}};
        w = run_uncached(fmt::format("INSERT INTO unsaved.steps ({}) VALUES "
                                     "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", kSteps), a);
      }
      for (size_t i = 0; w.ok() && i < metrics; ++i) {
        const PendingMetric& m = pending_metrics_[i];
        const bool nan = std::isnan(m.value);
        SqlValue a[] = {m.run_id, m.key, m.context, m.step, nan ? SqlValue() : SqlValue(m.value),
                        int64_t{nan}, m.wall_ms};
        w = run_uncached(fmt::format("INSERT INTO unsaved.metrics ({}) VALUES "
                                     "(?, ?, ?, ?, ?, ?, ?)", kMetrics), a);
      }
      for (size_t i = 0; w.ok() && i < ends; ++i) {
        SqlValue a[] = {pending_ends_[i].first,
                        std::string(run_status_name(pending_ends_[i].second)), unix_ms()};
        w = run_uncached("INSERT INTO unsaved.ends VALUES (?, ?, ?)", a);
      }
      return w;
    });
    (void)exec("DETACH DATABASE unsaved");
  }
  if (s.ok()) {
    fmt::print(stderr,
               "shardlab: store '{}' could not be written at close (locked by another writer or "
               "its disk full): {} step rows, {} metrics and {} run end(s) saved in '{}'; the "
               "next open of the store adds them\n",
               path_, steps, metrics, ends, file);
  } else {
    fmt::print(stderr,
               "shardlab: store '{}' could not be written at close, nor '{}' beside it: {} step "
               "rows, {} metrics and {} run end(s) are lost ({})\n",
               path_, file, steps, metrics, ends, s.message());
  }
  pending_steps_.clear();
  pending_metrics_.clear();
  pending_ends_.clear();
}

Status MetricsStore::add_unsaved() {
  std::lock_guard lock(mu_);
  const std::string file = unsaved_path(path_);
  if (::access(file.c_str(), F_OK) != 0) return ok_status();
  auto fail = [&](const Status& s) {
    return Status(s.code(), fmt::format("its unsaved rows in '{}' could not be added ({}); move "
                                        "that file away to open the store without them",
                                        file, s.message()));
  };
  SqlValue name[] = {file};
  Status s = run_uncached("ATTACH DATABASE ? AS unsaved", name);
  if (!s.ok()) return fail(s);
  int64_t steps = 0, metrics = 0, ends = 0;
  s = in_transaction([&] {
    // Rows of runs the store no longer has (deleted meanwhile) are left out; an end lands only
    // on a run still RUNNING (a later open may have marked it KILLED: that is overwritten, since
    // the process did end as it said).
    const std::string keep = "WHERE run_id IN (SELECT run_id FROM main.runs)";
    ENG_RETURN_IF_ERROR(exec(fmt::format("INSERT OR REPLACE INTO main.steps ({0}) SELECT {0} FROM "
                                         "unsaved.steps {1}", kSteps, keep)));
    steps = sqlite3_changes(db_);
    ENG_RETURN_IF_ERROR(exec(fmt::format("INSERT OR REPLACE INTO main.metrics ({0}) SELECT {0} "
                                         "FROM unsaved.metrics {1}", kMetrics, keep)));
    metrics = sqlite3_changes(db_);
    ENG_RETURN_IF_ERROR(exec("UPDATE main.runs SET status = e.status, end_ms = e.end_ms FROM "
                             "(SELECT run_id, status, max(end_ms) AS end_ms FROM unsaved.ends "
                             "WHERE status IN ('FINISHED', 'FAILED', 'KILLED') GROUP BY run_id) "
                             "AS e WHERE runs.run_id = e.run_id AND runs.status IN ('RUNNING', "
                             "'KILLED')"));
    ends = sqlite3_changes(db_);
    return ok_status();
  });
  (void)exec("DETACH DATABASE unsaved");
  if (!s.ok()) return fail(s);
  if (::unlink(file.c_str()) != 0 && errno != ENOENT)  // ENOENT: another open added it too
    return fail(io_error("added, but the file could not be deleted"));
  fmt::print(stderr, "shardlab: added {} step rows, {} metrics and {} run end(s) that '{}' held "
             "for store '{}'\n", steps, metrics, ends, file, path_);
  return ok_status();
}

}  // namespace eng
