// engine/store/runs.cpp: the run lifecycle in the store: begin (with a generated, unique name),
// discarding runs that recorded nothing, marking runs of vanished processes KILLED, and the
// filtered run list behind sl.runs.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/store/metrics_store.h"

namespace eng {

std::string new_run_id();                                           // metrics_store.cpp
std::string json_string_array(const std::vector<std::string>& xs);  // metrics_store.cpp

namespace {

constexpr const char* kAdjectives[] = {
    "brave",  "calm",   "clever", "eager", "fancy", "gentle", "happy",  "jolly", "keen", "lively",
    "mellow", "nimble", "proud",  "quiet", "rapid", "shiny",  "steady", "swift", "tidy", "witty"};
constexpr const char* kNouns[] = {
    "otter",  "falcon", "badger", "heron", "lynx",  "marten", "osprey", "panda", "quokka", "raven",
    "salmon", "tapir",  "walrus", "yak",   "zebra", "bison",  "crane",  "dingo", "gecko",  "ibis"};

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

SqlValue text_or_null(const std::string& s) { return s.empty() ? SqlValue() : SqlValue(s); }

// Which process has `pid` now, as "<boot id>/<start time in clock ticks since boot>" (Linux
// /proc); "" when unknown. A pid reused by a later process (or after a reboot) differs.
std::string process_identity(int64_t pid) {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string boot_id, line;
  if (!std::getline(boot, boot_id) || !std::getline(stat, line)) return "";
  const size_t comm_end = line.rfind(')');  // the command may hold spaces and parentheses
  if (comm_end == std::string::npos) return "";
  std::istringstream fields(line.substr(comm_end + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i)  // field 22: starttime (proc(5))
    if (i == 22) return boot_id + "/" + field;
  return "";
}

// The process that began the run still exists: kill(pid, 0) succeeds or is refused for
// permission (not ESRCH), and, when the run recorded its identity, it is the same process.
bool process_alive(int64_t pid, const std::string& identity) {
  if (pid <= 0) return true;  // unknown: never guess a run dead
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  if (identity.empty()) return true;
  const std::string now = process_identity(pid);
  return now.empty() || now == identity;
}

}  // namespace

Result<std::string> MetricsStore::unique_run_name() {
  static std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(unix_ms())};
  for (int attempt = 0;; ++attempt) {
    const int limit = attempt < 50 ? 100 : 100000;  // a crowded store gets longer numbers
    std::string name = fmt::format("{}-{}-{}", kAdjectives[rng() % std::size(kAdjectives)],
                                   kNouns[rng() % std::size(kNouns)], rng() % limit);
    SqlValue a[] = {name};
    ENG_ASSIGN_OR_RETURN(QueryResult r,
                         select_locked("SELECT 1 FROM runs WHERE name = ?", a, false));
    if (r.rows.empty()) return name;
  }
}

Result<std::string> MetricsStore::begin_run(const RunInfo& info) {
  std::lock_guard lock(mu_);
  std::string run_id = new_run_id();
  std::string name = info.name;
  if (name.empty()) {
    ENG_ASSIGN_OR_RETURN(name, unique_run_name());
  }
  ENG_RETURN_IF_ERROR(in_transaction([&] {
    SqlValue args[] = {run_id,
                       name,
                       unix_ms(),
                       host_name(),
                       json_string_array(info.argv),
                       text_or_null(info.script),
                       text_or_null(info.git_rev),
                       text_or_null(info.parent_run_id)};
    Status s =
        run("INSERT INTO runs (run_id, name, status, start_ms, host, argv, script, git_rev, "
            "parent_run_id) VALUES (?, ?, 'RUNNING', ?, ?, ?, ?, ?, ?)",
            args);
    const int64_t pid = info.pid != 0 ? info.pid : int64_t{::getpid()};
    std::vector<std::pair<std::string, std::string>> tags = {
        {"shardlab.pid", fmt::format("{}", pid)}};
    if (std::string identity = process_identity(pid); !identity.empty())
      tags.emplace_back("shardlab.pid_start", std::move(identity));
    if (!info.script_hash.empty()) tags.emplace_back("shardlab.script_hash", info.script_hash);
    for (size_t i = 0; s.ok() && i < tags.size(); ++i) {
      SqlValue t[] = {run_id, tags[i].first, tags[i].second};
      s = run("INSERT OR REPLACE INTO tags (run_id, key, value) VALUES (?, ?, ?)", t);
    }
    for (size_t i = 0; s.ok() && i < info.params.size(); ++i) {
      SqlValue p[] = {run_id, info.params[i].first, info.params[i].second};
      s = run("INSERT OR REPLACE INTO params (run_id, key, value) VALUES (?, ?, ?)", p);
    }
    return s;
  }));
  return run_id;
}

Result<bool> MetricsStore::discard_run_if_empty(const std::string& run_id) {
  std::lock_guard lock(mu_);
  ENG_RETURN_IF_ERROR(flush_locked());
  SqlValue id[] = {run_id};
  ENG_ASSIGN_OR_RETURN(
      QueryResult used,
      select_locked("SELECT (SELECT count(*) FROM steps WHERE run_id = ?1) + "
                    "(SELECT count(*) FROM metrics WHERE run_id = ?1) + "
                    "(SELECT count(*) FROM checkpoints WHERE run_id = ?1) + "
                    "(SELECT count(*) FROM tags WHERE run_id = ?1 AND key NOT LIKE 'shardlab.%')",
                    id, false));
  if (std::get<int64_t>(used.rows.at(0).at(0)) > 0) return false;
  ENG_RETURN_IF_ERROR(in_transaction([&] {
    Status s;
    for (const char* table : {"compilations", "events", "tensor_shardings", "meshes"})
      if (s.ok()) s = run(fmt::format("UPDATE {} SET run_id = NULL WHERE run_id = ?", table), id);
    if (s.ok()) s = run("DELETE FROM runs WHERE run_id = ?", id);
    return s;
  }));
  return true;
}

Result<int> MetricsStore::mark_vanished_runs() {
  std::lock_guard lock(mu_);
  SqlValue host[] = {host_name()};
  ENG_ASSIGN_OR_RETURN(
      QueryResult r,
      select_locked("SELECT r.run_id, CAST(t.value AS INTEGER), coalesce((SELECT s.value FROM "
                    "tags s WHERE s.run_id = r.run_id AND s.key = 'shardlab.pid_start'), '') "
                    "FROM runs r JOIN tags t ON t.run_id = r.run_id AND t.key = 'shardlab.pid' "
                    "WHERE r.status = 'RUNNING' AND r.host = ?",
                    host, false));
  int marked = 0;
  for (const std::vector<SqlValue>& row : r.rows) {
    if (process_alive(std::get<int64_t>(row[1]), std::get<std::string>(row[2]))) continue;
    SqlValue a[] = {unix_ms(), std::get<std::string>(row[0])};
    ENG_RETURN_IF_ERROR(
        run("UPDATE runs SET status = 'KILLED', end_ms = coalesce((SELECT "
            "max(wall_ms) FROM steps WHERE run_id = ?2), ?1) "
            "WHERE run_id = ?2 AND status = 'RUNNING'",
            a));
    SqlValue e[] = {
        std::get<std::string>(row[0]), unix_ms(),
        fmt::format("process {} ended without closing the run", std::get<int64_t>(row[1]))};
    ENG_RETURN_IF_ERROR(
        run("INSERT INTO events (run_id, wall_ms, level, kind, message) "
            "VALUES (?, ?, 'warning', 'run_killed', ?)",
            e));
    ++marked;
  }
  return marked;
}

Result<QueryResult> MetricsStore::find_runs(const RunFilter& f) {
  static constexpr std::string_view kStatuses[] = {"RUNNING", "FINISHED", "FAILED", "KILLED"};
  if (!f.status.empty() &&
      std::find(std::begin(kStatuses), std::end(kStatuses), f.status) == std::end(kStatuses))
    return invalid_argument("runs: status must be RUNNING, FINISHED, FAILED or KILLED, got '{}'",
                            f.status);
  std::string sql =
      "SELECT * FROM (SELECT s.run_id, s.name, s.status, s.start_ms, s.end_ms, s.n_steps, "
      "s.last_step, s.last_loss, s.best_loss, r.host, r.parent_run_id FROM v_run_summary s "
      "JOIN runs r USING (run_id)) AS x WHERE 1";
  std::vector<SqlValue> args;
  if (!f.name.empty()) {
    const bool glob = f.name.find_first_of("*?[") != std::string::npos;
    sql += glob ? " AND name GLOB ?" : " AND name = ?";
    args.emplace_back(f.name);
  }
  if (!f.status.empty()) sql += " AND status = ?", args.emplace_back(f.status);
  if (f.since_ms) sql += " AND start_ms >= ?", args.emplace_back(*f.since_ms);
  if (f.until_ms) sql += " AND start_ms <= ?", args.emplace_back(*f.until_ms);
  for (const auto& [k, v] : f.params) {
    sql +=
        " AND EXISTS (SELECT 1 FROM params p WHERE p.run_id = x.run_id AND p.key = ? AND p.value = "
        "?)";
    args.emplace_back(k);
    args.emplace_back(v);
  }
  if (!f.where.empty()) sql += " AND (" + f.where + "\n)";
  sql += " ORDER BY start_ms DESC, run_id";
  if (f.limit >= 0) sql += " LIMIT ?", args.emplace_back(f.limit);
  return query(sql, args, SqlAccess::kReadOnly);  // `where` is user SQL
}

}  // namespace eng
