// engine/store/metrics_store.cpp: opening, migrating, buffered writes and queries over SQLite.
#include "engine/store/metrics_store.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "engine/base/clock.h"
#include "engine/base/file.h"
#include "engine/base/text.h"

namespace eng {

int register_sql_functions(sqlite3* db);  // sql_functions.cpp

std::string new_run_id();  // below; runs.cpp uses it
std::string json_string_array(const std::vector<std::string>& xs);

namespace {

SqlValue opt(const std::optional<double>& v) { return v ? SqlValue(*v) : SqlValue(); }
SqlValue opt(const std::optional<int64_t>& v) { return v ? SqlValue(*v) : SqlValue(); }
SqlValue text_or_null(const std::string& s) { return s.empty() ? SqlValue() : SqlValue(s); }
SqlValue boolean(bool b) { return SqlValue(int64_t{b ? 1 : 0}); }
int64_t now_or(int64_t ms) { return ms != 0 ? ms : unix_ms(); }


template <typename T>
std::string json_array(const std::vector<T>& xs) {
  std::vector<std::string> parts;
  for (const T& x : xs) {
    if constexpr (std::is_same_v<T, std::string>) parts.push_back(json_string(x));
    else parts.push_back(fmt::format("{}", x));
  }
  return fmt::format("[{}]", fmt::join(parts, ","));
}


// One line of SQL for error messages: whitespace collapsed, long text cut.
std::string sql_excerpt(std::string_view sql) {
  std::string out;
  for (char c : sql) {
    bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > 160) out = out.substr(0, 157) + "...";
  return out;
}

Code code_for(int rc) {
  switch (rc & 0xff) {
    case SQLITE_ERROR: case SQLITE_RANGE: case SQLITE_MISMATCH: return Code::kInvalidArgument;
    case SQLITE_CONSTRAINT: return Code::kFailedPrecondition;
    case SQLITE_CORRUPT: case SQLITE_NOTADB: return Code::kDataLoss;
    case SQLITE_FULL: case SQLITE_NOMEM: return Code::kResourceExhausted;
    default: return Code::kIo;
  }
}

int bind(sqlite3_stmt* stmt, int i, const SqlValue& v) {
  switch (v.index()) {
    case 0: return sqlite3_bind_null(stmt, i);
    case 1: return sqlite3_bind_int64(stmt, i, std::get<int64_t>(v));
    case 2: return sqlite3_bind_double(stmt, i, std::get<double>(v));
    case 3: {
      const std::string& s = std::get<std::string>(v);
      return sqlite3_bind_text(stmt, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    }
    default: {
      const Blob& b = std::get<Blob>(v);
      return sqlite3_bind_blob(stmt, i, b.data(), static_cast<int>(b.size()), SQLITE_TRANSIENT);
    }
  }
}

SqlValue column(sqlite3_stmt* stmt, int j) {
  switch (sqlite3_column_type(stmt, j)) {
    case SQLITE_INTEGER: return SqlValue(int64_t{sqlite3_column_int64(stmt, j)});
    case SQLITE_FLOAT: return SqlValue(sqlite3_column_double(stmt, j));
    case SQLITE_TEXT: {
      auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, j));
      return SqlValue(std::string(p, sqlite3_column_bytes(stmt, j)));
    }
    case SQLITE_BLOB: {
      auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(stmt, j));
      return SqlValue(Blob(p, p + sqlite3_column_bytes(stmt, j)));
    }
    default: return SqlValue();
  }
}

// Checks the path before SQLite does, because "unable to open database file" names no cause.
Status check_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  fs::path dir = p.parent_path();
  if (!dir.empty() && !fs::is_directory(dir, ec))
    return io_error("store: cannot open '{}': directory '{}' does not exist", path, dir.string());
  if (fs::is_directory(p, ec)) return io_error("store: cannot open '{}': it is a directory", path);
  struct stat st {};  // /dev/null, a FIFO: SQLite would create '<path>-journal' beside it
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return io_error("store: cannot open '{}': it is {}, not a regular file", path,
                    file_kind_name(st.st_mode));
  if (fs::exists(p, ec) && ::access(path.c_str(), W_OK) != 0)
    return io_error("store: cannot open '{}': file is read-only", path);
  if (!fs::exists(p, ec) && ::access(dir.empty() ? "." : dir.c_str(), W_OK) != 0)
    return io_error("store: cannot open '{}': directory '{}' is read-only", path,
                    dir.empty() ? "." : dir.string());
  return ok_status();
}

// sl.sql's guard (MetricsStore::query): what a user statement may not do. Data rows may be
// written; the schema, the file's PRAGMAs, other databases and transactions may not.
const char* denied_action(int action, const char* a1, const char* a2) {
  switch (action) {
    case SQLITE_ATTACH:
    case SQLITE_DETACH:
      return "ATTACH or DETACH another database";
    case SQLITE_TRANSACTION:
    case SQLITE_SAVEPOINT:
      return "control transactions (BEGIN, COMMIT, ROLLBACK, SAVEPOINT): each statement commits on "
             "its own";
    case SQLITE_ALTER_TABLE:
    case SQLITE_CREATE_TABLE:
    case SQLITE_CREATE_INDEX:
    case SQLITE_CREATE_TRIGGER:
    case SQLITE_CREATE_VIEW:
    case SQLITE_DROP_TABLE:
    case SQLITE_DROP_INDEX:
    case SQLITE_DROP_TRIGGER:
    case SQLITE_DROP_VIEW:
      // (not SQLITE_CREATE_VTABLE: json_each() reports it; CREATE VIRTUAL TABLE writes
      // sqlite_schema and is refused below)
      return "change the store's schema (CREATE TEMP objects are allowed)";
    // (UPDATE of sqlite_schema is reported when json_each() is first used; a user's UPDATE of
    // it needs PRAGMA writable_schema, which is refused.)
    case SQLITE_INSERT:
    case SQLITE_DELETE:
      if (a1 != nullptr && std::string_view(a1).starts_with("sqlite_") &&
          !std::string_view(a1).starts_with("sqlite_temp_"))
        return "change the store's schema (CREATE TEMP objects are allowed)";  // DDL writes
                                                                               // sqlite_schema
      return nullptr;
    case SQLITE_PRAGMA: {
      if (a2 == nullptr) return nullptr;  // reading a pragma
      static constexpr std::string_view kWithArgument[] = {
          "wal_checkpoint",  "table_info", "table_xinfo",      "index_info",
          "index_xinfo",     "index_list", "foreign_key_list", "foreign_key_check",
          "integrity_check", "quick_check"};
      for (std::string_view p : kWithArgument)
        if (p == a1) return nullptr;
      return "set a PRAGMA";
    }
    default:
      return nullptr;
  }
}

// What a statement the authorizer sees would write, as "DELETE FROM steps" (for sl.sql's
// read-only refusal); "" for actions that write nothing. Rows of SQLite's own tables
// (sqlite_schema, written by CREATE TEMP ...) are not named: the CREATE itself is.
std::string written_by(int action, const char* a1) {
  const std::string what = a1 == nullptr ? "" : a1;
  const bool internal = what.starts_with("sqlite_");
  switch (action) {
    case SQLITE_INSERT: return internal ? "" : "INSERT INTO " + what;
    case SQLITE_UPDATE: return internal ? "" : "UPDATE " + what;
    case SQLITE_DELETE: return internal ? "" : "DELETE FROM " + what;
    case SQLITE_CREATE_TEMP_TABLE: return "CREATE TEMP TABLE " + what;
    case SQLITE_CREATE_TEMP_VIEW: return "CREATE TEMP VIEW " + what;
    case SQLITE_CREATE_TEMP_INDEX: return "CREATE TEMP INDEX " + what;
    case SQLITE_CREATE_TEMP_TRIGGER: return "CREATE TEMP TRIGGER " + what;
    case SQLITE_DROP_TEMP_TABLE: return "DROP TEMP TABLE " + what;
    case SQLITE_DROP_TEMP_VIEW: return "DROP TEMP VIEW " + what;
    case SQLITE_DROP_TEMP_INDEX: return "DROP TEMP INDEX " + what;
    case SQLITE_DROP_TEMP_TRIGGER: return "DROP TEMP TRIGGER " + what;
    case SQLITE_PRAGMA: return "PRAGMA " + what;
    case SQLITE_ANALYZE: return "ANALYZE";
    case SQLITE_REINDEX: return "REINDEX";
    default: return "";
  }
}

}  // namespace

std::string new_run_id() {
  static std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(unix_ms())};
  uint64_t hi = rng(), lo = rng();
  hi = (hi & ~0xf000ULL) | 0x4000ULL;        // uuid version 4
  lo = (lo & ~(3ULL << 62)) | (2ULL << 62);  // RFC 4122 variant
  return fmt::format("{:016x}{:016x}", hi, lo);
}

std::string json_string_array(const std::vector<std::string>& xs) { return json_array(xs); }

std::string_view run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::kRunning: return "RUNNING";
    case RunStatus::kFinished: return "FINISHED";
    case RunStatus::kFailed: return "FAILED";
    case RunStatus::kKilled: return "KILLED";
  }
  return "?";
}

std::string sql_value_to_string(const SqlValue& v) {
  switch (v.index()) {
    case 0: return "NULL";
    case 1: return fmt::format("{}", std::get<int64_t>(v));
    case 2: return fmt::format("{}", std::get<double>(v));
    case 3: return std::get<std::string>(v);
    default: {
      std::string out = "x'";
      for (uint8_t b : std::get<Blob>(v)) out += fmt::format("{:02x}", b);
      return out + "'";
    }
  }
}

Result<std::unique_ptr<MetricsStore>> MetricsStore::open(const std::string& path,
                                                         const OpenOptions& options) {
  if (path.empty()) return invalid_argument("store: cannot open '': empty path");
  ENG_RETURN_IF_ERROR(check_path(path));
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    Status s(code_for(rc), fmt::format("store: cannot open '{}': {}", path,
                                       db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<MetricsStore> store(new MetricsStore(db, path));
  auto fail = [&](const Status& s) {
    return Status(s.code(), fmt::format("store: cannot open '{}': {}", path,
                                        s.message().substr(s.message().find(':') + 2)));
  };
  sqlite3_extended_result_codes(db, 1);
  if (sqlite3_db_readonly(db, "main") == 1)
    return io_error("store: cannot open '{}': file is read-only", path);
  sqlite3_busy_timeout(db, options.busy_timeout_ms);
  store->busy_timeout_ms_ = options.busy_timeout_ms;
  // journal_mode reads the header first, so a corrupt file fails here.
  Result<QueryResult> mode = store->select_locked("PRAGMA journal_mode=WAL", {}, false);
  if (!mode.ok()) return fail(mode.status());
  if (mode->rows.empty() || sql_value_to_string(mode->rows[0][0]) != "wal")
    return io_error("store: cannot open '{}': could not switch to WAL mode", path);
  Status s = store->exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
  if (!s.ok()) return fail(s);
  if (register_sql_functions(db) != SQLITE_OK)
    return io_error("store: cannot open '{}': registering functions: {}", path, sqlite3_errmsg(db));

  // Migrate inside one write transaction so concurrent openers do not race.
  int latest = options.migrations.empty() ? 0 : options.migrations.back().version;
  s = store->exec("BEGIN IMMEDIATE");
  if (!s.ok()) return fail(s);
  Result<int> version = store->user_version();
  if (!version.ok()) {
    (void)store->exec("ROLLBACK");
    return fail(version.status());
  }
  if (*version > latest) {
    (void)store->exec("ROLLBACK");
    return failed_precondition(
        "store: cannot open '{}': schema version {} is newer than this shardlab supports ({})",
        path, *version, latest);
  }
  for (const Migration& m : options.migrations) {
    if (m.version <= *version) continue;
    s = store->exec(m.sql);
    if (s.ok()) s = store->exec(fmt::format("PRAGMA user_version = {}", m.version));
    if (!s.ok()) {
      (void)store->exec("ROLLBACK");
      return Status(s.code(), fmt::format("store: cannot open '{}': migration to v{} ({}) failed: {}",
                                          path, m.version, m.name, s.message()));
    }
  }
  s = store->exec("COMMIT");
  if (!s.ok()) return fail(s);
  // Rows a process could not write when it ended (the store locked or its disk full) wait in
  // '<path>-unsaved' (engine/store/unsaved.cpp): added before vanished runs are marked.
  s = store->add_unsaved();
  if (!s.ok()) return Status(s.code(), fmt::format("store: cannot open '{}': {}", path, s.message()));
  Result<int> vanished = store->mark_vanished_runs();
  if (!vanished.ok()) return fail(vanished.status());
  return store;
}

MetricsStore::~MetricsStore() {
  {
    std::lock_guard lock(mu_);
    (void)flush_locked();
    (void)end_pending_locked();
    for (auto& [sql, stmt] : stmts_) sqlite3_finalize(stmt);
    stmts_.clear();
    if (!pending_steps_.empty() || !pending_metrics_.empty() || !pending_ends_.empty())
      save_unsaved_locked();
  }
  sqlite3_close(db_);
}

Status MetricsStore::error(std::string_view sql) const {
  int rc = sqlite3_extended_errcode(db_);
  return Status(code_for(rc),
                fmt::format("store: {} (in \"{}\")", sqlite3_errmsg(db_), sql_excerpt(sql)));
}

Status MetricsStore::exec(std::string_view sql) {
  std::string text(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return ok_status();
  std::string msg = err ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return Status(code_for(rc), fmt::format("store: {} (in \"{}\")", msg, sql_excerpt(sql)));
}

Status MetricsStore::in_transaction(FunctionRef<Status()> body) {
  ENG_RETURN_IF_ERROR(exec("BEGIN"));
  Status s = body();
  if (s.ok()) s = exec("COMMIT");
  if (!s.ok()) (void)exec("ROLLBACK");
  return s;
}

Result<sqlite3_stmt*> MetricsStore::prepare(std::string_view sql) {
  for (auto& [text, stmt] : stmts_)
    if (text == sql) return stmt;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT,
                         &stmt, nullptr) != SQLITE_OK)
    return error(sql);
  stmts_.emplace_back(std::string(sql), stmt);
  return stmt;
}

Status MetricsStore::run(std::string_view sql, std::span<const SqlValue> args) {
  ENG_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, prepare(sql));
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  for (size_t i = 0; i < args.size(); ++i)
    if (bind(stmt, static_cast<int>(i) + 1, args[i]) != SQLITE_OK) return error(sql);
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
  }
  if (rc != SQLITE_DONE) {
    Status s = error(sql);
    sqlite3_reset(stmt);
    return s;
  }
  sqlite3_reset(stmt);
  return ok_status();
}

Status MetricsStore::run_uncached(std::string_view sql, std::span<const SqlValue> args) {
  sqlite3_stmt* stmt = nullptr;
  const std::string text(sql);
  if (sqlite3_prepare_v2(db_, text.c_str(), -1, &stmt, nullptr) != SQLITE_OK) return error(sql);
  int rc = SQLITE_OK;
  for (size_t i = 0; rc == SQLITE_OK && i < args.size(); ++i)
    rc = bind(stmt, static_cast<int>(i) + 1, args[i]);
  if (rc == SQLITE_OK)
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    }
  Status s = rc == SQLITE_DONE ? ok_status() : error(sql);
  sqlite3_finalize(stmt);
  return s;
}

Result<int> MetricsStore::user_version() {
  sqlite3_stmt* stmt = nullptr;
  const char* sql = "PRAGMA user_version";
  if (sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr) != SQLITE_OK) return error(sql);
  int rc = sqlite3_step(stmt);
  int v = rc == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : 0;
  Status s = rc == SQLITE_ROW ? ok_status() : error(sql);
  sqlite3_finalize(stmt);
  if (!s.ok()) return s;
  return v;
}

Status MetricsStore::log_params(const std::string& run_id,
                                std::span<const std::pair<std::string, std::string>> params) {
  std::lock_guard lock(mu_);
  return in_transaction([&] {
    Status s;
    for (size_t i = 0; s.ok() && i < params.size(); ++i) {
      SqlValue p[] = {run_id, params[i].first, params[i].second};
      s = run("INSERT OR REPLACE INTO params (run_id, key, value) VALUES (?, ?, ?)", p);
    }
    return s;
  });
}

Status MetricsStore::set_tag(const std::string& run_id, const std::string& key,
                             const std::string& value) {
  std::lock_guard lock(mu_);
  SqlValue p[] = {run_id, key, value};
  return run("INSERT OR REPLACE INTO tags (run_id, key, value) VALUES (?, ?, ?)", p);
}

Status MetricsStore::end_run(const std::string& run_id, RunStatus status) {
  std::lock_guard lock(mu_);
  // Rows that can never be written (a constraint) are dropped: the run did not end as it says,
  // so it ends FAILED. Rows kept after a transient failure (the store locked, the disk full)
  // are not lost: the status waits with them and lands after them, at the next write that
  // succeeds or through '<path>-unsaved' at close.
  const Status flushed = flush_locked();
  if (!flushed.ok() && (!pending_steps_.empty() || !pending_metrics_.empty())) {
    pending_ends_.emplace_back(run_id, status);
    return flushed;
  }
  if (!flushed.ok()) status = RunStatus::kFailed;
  SqlValue p[] = {std::string(run_status_name(status)), unix_ms(), run_id};
  Status s = run("UPDATE runs SET status = ?, end_ms = ? WHERE run_id = ?", p);
  note_write(s);
  if (!s.ok()) {
    pending_ends_.emplace_back(run_id, status);
    return flushed.ok() ? s : flushed;
  }
  if (sqlite3_changes(db_) != 1) return not_found("store: end_run: no run with id '{}'", run_id);
  return flushed;
}

Status MetricsStore::end_pending_locked() {
  while (!pending_ends_.empty()) {
    const auto& [run_id, status] = pending_ends_.back();
    SqlValue p[] = {std::string(run_status_name(status)), unix_ms(), run_id};
    Status s = run("UPDATE runs SET status = ?, end_ms = ? WHERE run_id = ? AND status = 'RUNNING'",
                   p);
    if (!s.ok()) return s;
    pending_ends_.pop_back();
  }
  return ok_status();
}

void MetricsStore::note_write(const Status& s) {
  const bool transient = !s.ok() && s.code() != Code::kFailedPrecondition &&
                         s.code() != Code::kInvalidArgument;
  if (transient && !failing_) {
    failing_ = true;
    sqlite3_busy_timeout(db_, std::min(kFailingBusyMs, busy_timeout_ms_));
  } else if (s.ok() && failing_) {
    failing_ = false;
    sqlite3_busy_timeout(db_, busy_timeout_ms_);
  }
}

void MetricsStore::log_step(StepRow row) {
  std::lock_guard lock(mu_);
  row.wall_ms = now_or(row.wall_ms);
  pending_steps_.push_back(std::move(row));
}

void MetricsStore::log_metric(const std::string& run_id, const std::string& key, int64_t step,
                              double value, const std::string& context) {
  std::lock_guard lock(mu_);
  pending_metrics_.push_back({run_id, key, context, step, value, unix_ms()});
}

size_t MetricsStore::pending_rows() const {
  std::lock_guard lock(mu_);
  return pending_steps_.size() + pending_metrics_.size();
}

Status MetricsStore::flush() {
  std::lock_guard lock(mu_);
  return flush_locked();
}

// Everything buffered, in one transaction; the rows leave the buffer only when it commits.
// A transient failure (another writer holding the lock past busy_timeout, a full disk, an I/O
// error) is retried once here, and the rows stay buffered for the next flush either way.
Status MetricsStore::flush_locked() {
  if (pending_steps_.empty() && pending_metrics_.empty()) {
    if (pending_ends_.empty()) return ok_status();
    Status s = end_pending_locked();
    note_write(s);
    return s;
  }
  Status s = flush_once_locked();
  note_write(s);
  if (s.ok()) {
    (void)end_pending_locked();
    return s;
  }
  const size_t n = pending_steps_.size() + pending_metrics_.size();
  // A constraint or type error fails the same way every time: that batch can never be written.
  if (s.code() == Code::kFailedPrecondition || s.code() == Code::kInvalidArgument) {
    pending_steps_.clear();
    pending_metrics_.clear();
    return Status(s.code(),
                  fmt::format("{} ({} rows dropped: they can never be written)", s.message(), n));
  }
  ::usleep(50 * 1000);
  s = flush_once_locked();
  note_write(s);
  if (s.ok()) {
    (void)end_pending_locked();
    return s;
  }
  return Status(s.code(), fmt::format("{} ({} rows kept for the next flush)", s.message(), n));
}

Status MetricsStore::flush_once_locked() {
  ENG_RETURN_IF_ERROR(in_transaction([&] {
    Status s;
    for (size_t i = 0; s.ok() && i < pending_steps_.size(); ++i) {
      const StepRow& r = pending_steps_[i];
      SqlValue a[] = {r.run_id,         r.step,          r.wall_ms,        opt(r.loss),
                      opt(r.step_time_s), opt(r.compile_s), opt(r.data_s),   opt(r.tokens),
                      opt(r.tokens_per_s), opt(r.tokens_per_s_device), opt(r.tflops_per_device),
                      opt(r.grad_norm), opt(r.lr),       boolean(r.synced), boolean(r.compiled)};
      s = run("INSERT OR REPLACE INTO steps (run_id, step, wall_ms, loss, step_time_s, compile_s, "
              "data_s, tokens, tokens_per_s, tokens_per_s_device, tflops_per_device, grad_norm, lr, "
              "synced, compiled) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              a);
    }
    for (size_t i = 0; s.ok() && i < pending_metrics_.size(); ++i) {
      const PendingMetric& m = pending_metrics_[i];
      bool nan = std::isnan(m.value);
      SqlValue a[] = {m.run_id, m.key, m.context, m.step, nan ? SqlValue() : SqlValue(m.value),
                      boolean(nan), m.wall_ms};
      s = run("INSERT OR REPLACE INTO metrics (run_id, key, context, step, value, is_nan, wall_ms) "
              "VALUES (?, ?, ?, ?, ?, ?, ?)",
              a);
    }
    return s;
  }));
  pending_steps_.clear();
  pending_metrics_.clear();
  return ok_status();
}

Result<int64_t> MetricsStore::record_mesh(const MeshRow& m) {
  std::lock_guard lock(mu_);
  SqlValue a[] = {text_or_null(m.run_id), json_array(m.axis_names), json_array(m.axis_sizes),
                  json_array(m.axis_types), text_or_null(m.repr), unix_ms()};
  ENG_RETURN_IF_ERROR(run("INSERT INTO meshes (run_id, axis_names, axis_sizes, axis_types, repr, "
                          "created_ms) VALUES (?, ?, ?, ?, ?, ?)",
                          a));
  return int64_t{sqlite3_last_insert_rowid(db_)};
}

Result<int64_t> MetricsStore::record_compilation(const CompilationRow& r) {
  std::lock_guard lock(mu_);
  SqlValue a[] = {text_or_null(r.run_id),      opt(r.step),
                  r.fn_name,                   text_or_null(r.module_name),
                  r.outcome,                   r.cache_level,
                  text_or_null(r.reason_kind), text_or_null(r.reason_text),
                  text_or_null(r.in_signature), text_or_null(r.in_shardings),
                  text_or_null(r.cache_key),   opt(r.trace_s),
                  opt(r.lower_s),              opt(r.compile_s),
                  opt(r.entry_bytes),          now_or(r.wall_ms)};
  ENG_RETURN_IF_ERROR(run(
      "INSERT INTO compilations (run_id, step, fn_name, module_name, outcome, cache_level, "
      "reason_kind, reason_text, in_signature, in_shardings, cache_key, trace_s, lower_s, "
      "compile_s, entry_bytes, wall_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      a));
  return int64_t{sqlite3_last_insert_rowid(db_)};
}

Status MetricsStore::record_memory_analysis(int64_t compile_id, const MemoryAnalysisRow& m) {
  std::lock_guard lock(mu_);
  SqlValue a[] = {compile_id,
                  opt(m.generated_code_size_in_bytes),
                  opt(m.argument_size_in_bytes),
                  opt(m.output_size_in_bytes),
                  opt(m.alias_size_in_bytes),
                  opt(m.temp_size_in_bytes),
                  opt(m.host_generated_code_size_in_bytes),
                  opt(m.host_argument_size_in_bytes),
                  opt(m.host_output_size_in_bytes),
                  opt(m.host_alias_size_in_bytes),
                  opt(m.host_temp_size_in_bytes),
                  opt(m.peak_memory_in_bytes),
                  opt(m.device_limit_bytes)};
  return run(
      "INSERT OR REPLACE INTO memory_analysis (compile_id, generated_code_size_in_bytes, "
      "argument_size_in_bytes, output_size_in_bytes, alias_size_in_bytes, temp_size_in_bytes, "
      "host_generated_code_size_in_bytes, host_argument_size_in_bytes, host_output_size_in_bytes, "
      "host_alias_size_in_bytes, host_temp_size_in_bytes, peak_memory_in_bytes, "
      "device_limit_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      a);
}

Status MetricsStore::record_cost_analysis(int64_t compile_id,
                                          std::span<const std::pair<std::string, double>> costs) {
  std::lock_guard lock(mu_);
  return in_transaction([&] {
    Status s;
    for (size_t i = 0; s.ok() && i < costs.size(); ++i) {
      SqlValue a[] = {compile_id, costs[i].first, costs[i].second};
      s = run("INSERT OR REPLACE INTO cost_analysis (compile_id, key, value) VALUES (?, ?, ?)", a);
    }
    return s;
  });
}

Status MetricsStore::record_prediction(int64_t compile_id, const PredictionRow& r) {
  std::lock_guard lock(mu_);
  return in_transaction([&] {
    SqlValue a[] = {compile_id,      r.topology,      r.num_slices,
                    r.step_time_s,   r.tflops_per_device, r.tflops_per_s_per_device,
                    r.tokens_per_s_per_device, r.mfu, boolean(r.fits),
                    r.peak_bytes,    r.hbm_bytes,     r.bound,
                    r.compute_s,     r.collective_s,  r.exposed_collective_s};
    Status s = run(
        "INSERT OR REPLACE INTO predictions (compile_id, topology, num_slices, step_time_s, "
        "tflops_per_device, tflops_per_s_per_device, tokens_per_s_per_device, mfu, fits, "
        "peak_bytes, hbm_bytes, bound, compute_s, collective_s, exposed_collective_s) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        a);
    if (s.ok()) {
      SqlValue d[] = {compile_id, r.topology};
      s = run("DELETE FROM prediction_parts WHERE compile_id = ? AND topology = ?", d);
    }
    for (size_t i = 0; s.ok() && i < r.parts.size(); ++i) {
      const PredictionPart& p = r.parts[i];
      SqlValue b[] = {compile_id, r.topology, p.kind, p.name, p.seconds, p.exposed_seconds,
                      p.flops, p.bytes};
      s = run("INSERT INTO prediction_parts (compile_id, topology, kind, name, seconds, "
              "exposed_seconds, flops, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
              b);
    }
    return s;
  });
}

Status MetricsStore::record_checkpoint(const CheckpointRow& r) {
  std::lock_guard lock(mu_);
  SqlValue a[] = {r.run_id,  r.step,           r.path,   opt(r.bytes),
                  opt(r.save_s), boolean(r.async), r.status, now_or(r.wall_ms)};
  return run("INSERT OR REPLACE INTO checkpoints (run_id, step, path, bytes, save_s, async, "
             "status, wall_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
             a);
}

Result<int64_t> MetricsStore::record_event(const EventRow& r) {
  std::lock_guard lock(mu_);
  SqlValue a[] = {text_or_null(r.run_id), opt(r.step),          now_or(r.wall_ms), r.level,
                  r.kind,                 text_or_null(r.message), text_or_null(r.payload_json)};
  ENG_RETURN_IF_ERROR(run("INSERT INTO events (run_id, step, wall_ms, level, kind, message, "
                          "payload) VALUES (?, ?, ?, ?, ?, ?, ?)",
                          a));
  return int64_t{sqlite3_last_insert_rowid(db_)};
}

Result<int64_t> MetricsStore::record_tensor_shardings(const std::string& run_id,
                                                      std::optional<int64_t> step,
                                                      std::optional<int64_t> mesh_id,
                                                      std::span<const TensorShardingRow> rows) {
  std::lock_guard lock(mu_);
  int64_t snapshot = 1;
  ENG_RETURN_IF_ERROR(in_transaction([&] {
    const char* sql = "SELECT coalesce(max(snapshot_id), 0) + 1 FROM tensor_shardings";
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW)
      snapshot = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    Status s;
    for (size_t i = 0; s.ok() && i < rows.size(); ++i) {
      const TensorShardingRow& r = rows[i];
      SqlValue a[] = {snapshot,      text_or_null(run_id), opt(step),
                      r.path,        r.dtype,              json_array(r.shape),
                      text_or_null(r.logical_axes), text_or_null(r.spec), text_or_null(r.type),
                      opt(mesh_id),  opt(r.bytes_per_device)};
      s = run("INSERT INTO tensor_shardings (snapshot_id, run_id, step, path, dtype, shape, "
              "logical_axes, spec, type, mesh_id, bytes_per_device) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              a);
    }
    return s;
  }));
  return snapshot;
}

Result<QueryResult> MetricsStore::query(std::string_view sql, std::span<const SqlValue> args,
                                        SqlAccess access) {
  std::lock_guard lock(mu_);
  ENG_RETURN_IF_ERROR(flush_locked());  // a query sees every row logged so far
  return select_locked(sql, args, true, access);
}

void MetricsStore::set_interrupt_check(std::function<bool()> check) {
  std::lock_guard lock(mu_);
  interrupt_check_ = std::move(check);
}

namespace {

struct UserGuard {  // the authorizer's and progress handler's state during one user statement
  const char* denied = nullptr;
  const std::function<bool()>* interrupt = nullptr;
  bool interrupted = false;
  std::string writes;  // the first write the statement asked for ("DELETE FROM steps")
  bool reads_journal_mode = false;  // "PRAGMA journal_mode" with no value: only reads it
  std::vector<std::string> store_names;  // lower-case names in the main schema (write = true)
  std::string shadows;              // the refusal of a temp object shadowing one of them
  bool recursive = false;           // uses a recursive CTE (SQLITE_RECURSIVE)
  int64_t progress_calls = 0;       // progress handler calls (one per kProgressPeriod VM steps)
  bool over_budget = false;         // a recursive CTE ran past kMaxRecursiveCalls
};

// The progress handler runs every kProgressPeriod SQLite VM instructions. A recursive CTE's
// rows never reach the row cap when the statement returns only an aggregate of them
// ("select count(*) from r" over an endless r), so such a statement gets a budget of work
// instead: kMaxQueryRows rows at 100 VM instructions each (a simple CTE needs far fewer; a few
// seconds; issue 30).
constexpr int kProgressPeriod = 1000;
constexpr int64_t kMaxRecursiveCalls =
    static_cast<int64_t>(MetricsStore::kMaxQueryRows) * 100 / kProgressPeriod;

int authorize(void* p, int action, const char* a1, const char* a2, const char*, const char*) {
  auto* g = static_cast<UserGuard*>(p);
  if (g->writes.empty()) g->writes = written_by(action, a1);
  if (action == SQLITE_RECURSIVE) g->recursive = true;
  // SQLite marks every journal_mode PRAGMA as writing (the same PRAGMA can set the mode).
  if (action == SQLITE_PRAGMA && a2 == nullptr && a1 != nullptr &&
      std::string_view(a1) == "journal_mode")
    g->reads_journal_mode = true;
  // A temp table or view named like a store table or view shadows it for every later
  // statement on this connection: the recorder's writes would land in it (issue 30). A temp
  // trigger on a store table would rewrite the recorder's rows.
  auto is_store = [&](const char* name) {
    if (name == nullptr) return false;
    std::string lower(name);
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return std::find(g->store_names.begin(), g->store_names.end(), lower) != g->store_names.end();
  };
  if ((action == SQLITE_CREATE_TEMP_TABLE || action == SQLITE_CREATE_TEMP_VIEW) && is_store(a1)) {
    g->shadows = fmt::format("create a temp {} named '{}' like the store's own (it would hide "
                             "the store's from every later statement)",
                             action == SQLITE_CREATE_TEMP_TABLE ? "table" : "view", a1);
    return SQLITE_DENY;
  }
  if (action == SQLITE_CREATE_TEMP_TRIGGER && is_store(a2)) {
    g->shadows = fmt::format("create a temp trigger '{}' on the store's table '{}'", a1, a2);
    return SQLITE_DENY;
  }
  const char* why = denied_action(action, a1, a2);
  if (why == nullptr) return SQLITE_OK;
  // DDL also writes sqlite_schema; name the statement's own action rather than that write.
  const bool schema_row = action == SQLITE_INSERT || action == SQLITE_DELETE;
  if (g->denied == nullptr || !schema_row) g->denied = why;
  return SQLITE_DENY;
}

int progress(void* p) {
  auto* g = static_cast<UserGuard*>(p);
  if (g->interrupt != nullptr && *g->interrupt && (*g->interrupt)()) g->interrupted = true;
  if (g->recursive && ++g->progress_calls > kMaxRecursiveCalls) g->over_budget = true;
  return g->interrupted || g->over_budget ? 1 : 0;
}

}  // namespace

Result<QueryResult> MetricsStore::select_locked(std::string_view sql,
                                                std::span<const SqlValue> args, bool user,
                                                SqlAccess access) {
  UserGuard guard;
  guard.interrupt = &interrupt_check_;
  if (user && access == SqlAccess::kReadWrite) {  // the names a temp object may not shadow
    ENG_ASSIGN_OR_RETURN(QueryResult names,
                         step_rows("SELECT lower(name) FROM main.sqlite_master WHERE type IN "
                                   "('table', 'view')",
                                   {}, 0, nullptr, nullptr));
    for (const std::vector<SqlValue>& row : names.rows)
      if (const auto* name = std::get_if<std::string>(&row[0]))
        guard.store_names.push_back(*name);
  }
  if (user) {
    sqlite3_set_authorizer(db_, authorize, &guard);
    sqlite3_progress_handler(db_, kProgressPeriod, progress, &guard);
  }
  struct Reset {  // the guard lives on this frame: unhook before it goes
    sqlite3* db;
    bool on;
    ~Reset() {
      if (!on) return;
      sqlite3_set_authorizer(db, nullptr, nullptr);
      sqlite3_progress_handler(db, 0, nullptr, nullptr);
    }
  } reset{db_, user};
  bool writes = false;
  Result<QueryResult> r = step_rows(sql, args, user ? kMaxQueryRows : 0,
                                    access == SqlAccess::kReadOnly ? &writes : nullptr,
                                    &guard.reads_journal_mode);
  if (!guard.shadows.empty())
    return failed_precondition("store: sl.sql may not {} (in \"{}\"); see docs/metrics-store.md",
                               guard.shadows, sql_excerpt(sql));
  if (guard.denied != nullptr)
    return failed_precondition("store: sl.sql may not {} (in \"{}\"); see docs/metrics-store.md",
                               guard.denied, sql_excerpt(sql));
  if (writes)
    return failed_precondition(
        "store: sl.sql is read-only: {} would write the store (in \"{}\"); to write rows, "
        "opt in with sl.sql(query, {{write = true}}, ...) (docs/metrics-store.md)",
        guard.writes.empty() ? "this statement" : guard.writes, sql_excerpt(sql));
  if (!r.ok() && guard.interrupted)
    return Status(Code::kCancelled,
                  fmt::format("store: query interrupted (in \"{}\")", sql_excerpt(sql)));
  if (!r.ok() && guard.over_budget)
    return resource_exhausted(
        "store: a recursive CTE ran past the work of {} rows ({} SQLite VM steps), the sl.sql "
        "row cap; give its recursion a stopping condition or a LIMIT (in \"{}\")",
        kMaxQueryRows, kMaxRecursiveCalls * kProgressPeriod, sql_excerpt(sql));
  return r;
}

// Prepares one statement, binds args and collects its rows (at most max_rows; 0: no limit).
Result<QueryResult> MetricsStore::step_rows(std::string_view sql, std::span<const SqlValue> args,
                                            size_t max_rows, bool* writes,
                                            const bool* read_anyway) {
  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, &tail) != SQLITE_OK)
    return error(sql);
  QueryResult out;
  if (stmt == nullptr) return out;  // only whitespace or comments
  auto finish = [&](Status s) {
    sqlite3_finalize(stmt);
    return s;
  };
  // Anything but whitespace/comments after the first statement is a second statement.
  std::string_view rest(tail, sql.data() + sql.size() - tail);
  sqlite3_stmt* next = nullptr;
  if (!rest.empty() && sqlite3_prepare_v2(db_, rest.data(), static_cast<int>(rest.size()), &next,
                                          nullptr) == SQLITE_OK && next != nullptr) {
    sqlite3_finalize(next);
    return finish(invalid_argument("store: one statement per query, got more (in \"{}\")",
                                   sql_excerpt(sql)));
  }
  if (writes != nullptr && sqlite3_stmt_readonly(stmt) == 0 &&  // SQLite's own judgement
      !(read_anyway != nullptr && *read_anyway)) {
    *writes = true;
    sqlite3_finalize(stmt);
    return out;
  }
  int nparams = sqlite3_bind_parameter_count(stmt);
  if (nparams != static_cast<int>(args.size()))
    return finish(invalid_argument("store: query has {} parameter(s) but {} argument(s) were given "
                                   "(in \"{}\")", nparams, args.size(), sql_excerpt(sql)));
  for (size_t i = 0; i < args.size(); ++i)
    if (bind(stmt, static_cast<int>(i) + 1, args[i]) != SQLITE_OK) return finish(error(sql));
  int ncols = sqlite3_column_count(stmt);
  for (int j = 0; j < ncols; ++j) out.columns.push_back(sqlite3_column_name(stmt, j));
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    if (max_rows > 0 && out.rows.size() >= max_rows)
      return finish(
          resource_exhausted("store: query returned more than {} rows; add a LIMIT "
                             "(in \"{}\")",
                             max_rows, sql_excerpt(sql)));
    std::vector<SqlValue> row;
    row.reserve(ncols);
    for (int j = 0; j < ncols; ++j) row.push_back(column(stmt, j));
    out.rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return finish(error(sql));
  sqlite3_finalize(stmt);
  return out;
}

}  // namespace eng
