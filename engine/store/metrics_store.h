// engine/store/metrics_store.h: the SQLite metrics store (runs, steps, metrics, compilations).
//
//   ENG_ASSIGN_OR_RETURN(auto store, MetricsStore::open("shardlab.db"));
//   ENG_ASSIGN_OR_RETURN(std::string run, store->begin_run({.name = "tiny", .params = {{"steps", "10"}}}));
//   store->log_step({.run_id = run, .step = 0, .loss = 5.5, .step_time_s = 0.12});   // buffered
//   store->log_metric(run, "learning/loss", 0, 5.5);                                 // buffered
//   ENG_RETURN_IF_ERROR(store->flush());              // one transaction for everything buffered
//   ENG_RETURN_IF_ERROR(store->end_run(run, RunStatus::kFinished));
//   ENG_ASSIGN_OR_RETURN(QueryResult r, store->query("SELECT * FROM v_best_loss"));
//
// Contracts:
// - The file is in WAL mode (synchronous=NORMAL, foreign_keys=ON, busy_timeout), so the
//   sqlite3 CLI can read it while a run writes, and a crash loses at most unflushed rows.
// - Step and metric rows are buffered in memory and written by flush() in ONE transaction;
//   they stay buffered until that transaction commits (a failed flush keeps them and is
//   retried; the next flush tries again). Every other record_* call is its own transaction.
// - The schema version lives in PRAGMA user_version; open() applies pending migrations.
//   The schema is documented in docs/metrics-store.md.
// - Errors are Status values naming the store, SQLite's message and the SQL.
// - Thread-safe: one mutex serialises all calls.
// This is the only library that includes sqlite3.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "engine/base/function_ref.h"
#include "engine/base/status.h"

struct sqlite3;       // from sqlite3.h, kept out of this header
struct sqlite3_stmt;  // ditto

namespace eng {

// A typed SQLite value: NULL, INTEGER, REAL, TEXT or BLOB (alternative order matters: index()).
using Blob = std::vector<uint8_t>;
using SqlValue = std::variant<std::monostate, int64_t, double, std::string, Blob>;

// What a user statement (MetricsStore::query) may do: read only, or also write rows.
enum class SqlAccess { kReadWrite, kReadOnly };

struct QueryResult {
  std::vector<std::string> columns;          // result column names, in order
  std::vector<std::vector<SqlValue>> rows;   // rows[i][j] is column j of row i
};

// One schema step: applied when the file's user_version < version.
struct Migration {
  int version;           // user_version after this step
  std::string_view name; // one line, for error messages
  std::string_view sql;  // one or more statements, run in the migration's transaction
};
// The built-in migrations, oldest first; the last one's version is the current schema.
std::span<const Migration> store_migrations();
int store_schema_version();

enum class RunStatus { kRunning, kFinished, kFailed, kKilled };
std::string_view run_status_name(RunStatus s);  // "RUNNING", "FINISHED", ...

struct RunInfo {
  std::string name{};                                        // "" = generated (adjective-noun-N)
  std::vector<std::string> argv{};                           // stored as a JSON array
  std::string script{};                                      // script path, "" if none
  std::string script_hash{};                                 // tag shardlab.script_hash, "" if none
  std::string git_rev{};                                     // "" if unknown
  std::string parent_run_id{};                               // "" if none
  int64_t pid = 0;                                           // tag shardlab.pid; 0 = this process
  std::vector<std::pair<std::string, std::string>> params{}; // flattened config: "mesh.fsdp" -> "4"
};

// sl.runs{...}: every set field narrows the result (AND). Rows come from v_run_summary plus
// host and parent_run_id, newest first.
struct RunFilter {
  std::string name{};           // exact name, or a GLOB pattern when it has * ? or [
  std::string status{};         // RUNNING | FINISHED | FAILED | KILLED
  std::optional<int64_t> since_ms{}, until_ms{};  // start_ms in [since, until]
  std::vector<std::pair<std::string, std::string>> params{};  // params.key = value, each
  std::string where{};          // an extra SQL condition over the row's columns (read-only)
  int64_t limit = -1;           // -1: all
};

// One row of `steps`. Optional fields are NULL when unset (NULL means unknown, not zero).
struct StepRow {
  std::string run_id{};
  int64_t step = 0;
  std::optional<double> loss{};
  std::optional<double> step_time_s{};        // between consecutive loss syncs
  std::optional<double> compile_s{};          // compile time attributed to this step
  std::optional<double> data_s{};             // host time loading the batch
  std::optional<int64_t> tokens{};            // tokens in the global batch
  std::optional<double> tokens_per_s{};       // global throughput
  std::optional<double> tokens_per_s_device{};
  std::optional<double> tflops_per_device{};  // model TFLOP/s per device
  std::optional<double> grad_norm{};
  std::optional<double> lr{};
  bool synced = true;    // step time measured at a device sync (false: dispatch only)
  bool compiled = false; // this step included a compilation
  int64_t wall_ms = 0;   // unix ms; 0 = now
};

struct CompilationRow {
  std::string run_id{};                 // "" = outside a run (stored as NULL)
  std::optional<int64_t> step{};
  std::string fn_name{};                // "train_step"
  std::string module_name{};            // "" = NULL
  std::string outcome{};                // hit | miss | write | skip
  std::string cache_level{};            // tracing | lowering | executable | persistent
  std::string reason_kind{};            // "" = NULL; never_seen | redefined | context | pytree |
                                      // debug_info | types | shardings | static_args | unavailable
  std::string reason_text{};            // human text (JAX's explain_cache_misses wording)
  std::string in_signature{};           // "f32[8@data,4], i32[8@data,256]"
  std::string in_shardings{};           // "P('data', None), ..."
  std::string cache_key{};              // hex
  std::optional<double> trace_s{}, lower_s{}, compile_s{};
  std::optional<int64_t> entry_bytes{};
  int64_t wall_ms = 0;                // 0 = now
};

// JAX's CompiledMemoryStats, per device. nullopt is stored as NULL ("unavailable", not 0).
struct MemoryAnalysisRow {
  std::optional<int64_t> generated_code_size_in_bytes{}, argument_size_in_bytes{},
      output_size_in_bytes{}, alias_size_in_bytes{}, temp_size_in_bytes{},
      host_generated_code_size_in_bytes{}, host_argument_size_in_bytes{},
      host_output_size_in_bytes{}, host_alias_size_in_bytes{}, host_temp_size_in_bytes{},
      peak_memory_in_bytes{}, device_limit_bytes{};
};

// sl.plan's predicted step on named hardware (docs/prediction.md), per compilation.
struct PredictionPart {
  std::string kind;  // "compute" (name: op class) | "collective" (name: mesh axes)
  std::string name;
  double seconds = 0, exposed_seconds = 0, flops = 0, bytes = 0;
};
struct PredictionRow {
  std::string topology{};  // "v6e-256"
  int64_t num_slices = 1;
  double step_time_s = 0, tflops_per_device = 0, tflops_per_s_per_device = 0,
         tokens_per_s_per_device = 0, mfu = 0;
  bool fits = false;
  int64_t peak_bytes = 0, hbm_bytes = 0;
  std::string bound{};
  double compute_s = 0, collective_s = 0, exposed_collective_s = 0;
  std::vector<PredictionPart> parts{};
};

struct CheckpointRow {
  std::string run_id{};
  int64_t step = 0;
  std::string path{};
  std::optional<int64_t> bytes{};
  std::optional<double> save_s{};
  bool async = false;
  std::string status = "committed";  // started | committed | failed
  int64_t wall_ms = 0;               // 0 = now
};

struct EventRow {
  std::string run_id{};           // "" = NULL
  std::optional<int64_t> step{};
  std::string level = "info";   // debug | info | warning | error
  std::string kind{};             // recompile | nan_abort | oom | repl_cmd | cell | ...
  std::string message{};
  std::string payload_json{};     // "" = NULL
  int64_t wall_ms = 0;          // 0 = now
};

struct MeshRow {
  std::string run_id{};                   // "" = NULL
  std::vector<std::string> axis_names{};
  std::vector<int64_t> axis_sizes{};
  std::vector<std::string> axis_types{};  // "Auto" | "Explicit" | "Manual", one per axis
  std::string repr{};                     // Mesh.to_string()
};

struct TensorShardingRow {
  std::string path{};                  // "params.decoder.layers.mlp.wi_0.kernel"
  std::string dtype{};                 // "f32"
  std::vector<int64_t> shape{};        // global shape
  std::string logical_axes{};          // "('embed', 'mlp')"
  std::string spec{};                  // "P('fsdp', 'tensor')"
  std::string type{};                  // "f32[256@fsdp,704@tensor]"
  std::optional<int64_t> bytes_per_device{};
};

struct OpenOptions {
  std::span<const Migration> migrations = store_migrations();  // tests may pass their own
  int busy_timeout_ms = 5000;
};

class MetricsStore {
 public:
  // Opens or creates the file and migrates it. Clear errors ("store: cannot open 'x.db': ...")
  // for a missing directory, a read-only or corrupt file, or a schema newer than this binary.
  static Result<std::unique_ptr<MetricsStore>> open(const std::string& path,
                                                    const OpenOptions& options = {});
  // Flushes what is buffered (call flush() to see errors); what cannot be written is saved
  // beside the store, in '<path>-unsaved', for the next open() to add.
  ~MetricsStore();
  MetricsStore(const MetricsStore&) = delete;
  MetricsStore& operator=(const MetricsStore&) = delete;

  const std::string& path() const { return path_; }
  Result<int> user_version();

  // Runs: begin_run returns a new run_id (32 hex digits) with status RUNNING. The host is this
  // machine's; the pid (tag shardlab.pid, and shardlab.pid_start: which process had it) lets a
  // later open() tell a vanished process, even when its pid was reused.
  Result<std::string> begin_run(const RunInfo& info);
  // An adjective-noun-number name that no run in the store has ("brave-otter-17").
  Result<std::string> unique_run_name();
  // A run that recorded nothing of its own (no steps, metrics, checkpoints or user tags) is
  // deleted; its compilations, events, meshes and sharding snapshots stay with run_id NULL.
  // Returns whether it was deleted.
  Result<bool> discard_run_if_empty(const std::string& run_id);
  // RUNNING runs of this host whose process no longer exists become KILLED (end_ms: their last
  // step's time, else now). open() calls it; returns how many were marked.
  Result<int> mark_vanished_runs();
  Result<QueryResult> find_runs(const RunFilter& filter);
  Status log_params(const std::string& run_id,
                    std::span<const std::pair<std::string, std::string>> params);
  Status set_tag(const std::string& run_id, const std::string& key, const std::string& value);
  Status end_run(const std::string& run_id, RunStatus status);  // flushes first

  // Buffered until flush(); flush() writes all of them in one transaction.
  void log_step(StepRow row);
  void log_metric(const std::string& run_id, const std::string& key, int64_t step, double value,
                  const std::string& context = "train");  // context: train | eval
  Status flush();
  size_t pending_rows() const;

  // Immediate writes (one transaction each). Ids are the new rows' INTEGER PRIMARY KEYs.
  Result<int64_t> record_mesh(const MeshRow& mesh);
  Result<int64_t> record_compilation(const CompilationRow& row);
  Status record_memory_analysis(int64_t compile_id, const MemoryAnalysisRow& m);
  Status record_cost_analysis(int64_t compile_id,
                              std::span<const std::pair<std::string, double>> costs);
  // A `predictions` row and its `prediction_parts` (replacing any for this compile and
  // topology), in one transaction.
  Status record_prediction(int64_t compile_id, const PredictionRow& row);
  Status record_checkpoint(const CheckpointRow& row);
  Result<int64_t> record_event(const EventRow& row);
  // One snapshot of what shard() showed; returns its snapshot_id.
  Result<int64_t> record_tensor_shardings(const std::string& run_id, std::optional<int64_t> step,
                                          std::optional<int64_t> mesh_id,
                                          std::span<const TensorShardingRow> rows);

  // Any SQL with `?` parameters bound from args; one statement. Rows keep SQLite's types.
  // This is the users' entry (sl.sql): an authorizer refuses what would damage the store or
  // another writer's transaction (ATTACH/DETACH, BEGIN/COMMIT/SAVEPOINT, schema changes to
  // non-temporary objects, PRAGMAs that set a value). With SqlAccess::kReadOnly (sl.sql's
  // default) a statement that would write anything (sqlite3_stmt_readonly() is false: INSERT,
  // UPDATE, DELETE, CREATE TEMP ...) is refused before it runs, naming what it would write;
  // with kReadWrite rows may be inserted, updated and deleted (autocommit). A query stops with
  // an error when the interrupt check (if set) returns true, or past kMaxQueryRows rows.
  Result<QueryResult> query(std::string_view sql, std::span<const SqlValue> args = {},
                            SqlAccess access = SqlAccess::kReadWrite);
  static constexpr size_t kMaxQueryRows = 1000000;
  // Polled during queries (SQLite's progress handler); true stops the query ("interrupted").
  void set_interrupt_check(std::function<bool()> check);

 private:
  struct PendingMetric {
    std::string run_id, key, context;
    int64_t step;
    double value;
    int64_t wall_ms;
  };
  MetricsStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Status exec(std::string_view sql);                        // no rows, no args
  // BEGIN, body, then COMMIT if body (and the commit) succeeded, else ROLLBACK: body's
  // writes land together or not at all. Returns body's error, else the commit's.
  Status in_transaction(FunctionRef<Status()> body);
  Status run(std::string_view sql, std::span<const SqlValue> args);
  Result<sqlite3_stmt*> prepare(std::string_view sql);      // cached by SQL text
  Status error(std::string_view sql) const;                 // Status from db_'s last error
  Status flush_locked();
  Status flush_once_locked();
  // *writes (when not null) is set, and nothing runs, if the statement would write and
  // *read_anyway (set by the authorizer during prepare) does not say it only reads.
  Result<QueryResult> step_rows(std::string_view sql, std::span<const SqlValue> args,
                                size_t max_rows, bool* writes = nullptr,
                                const bool* read_anyway = nullptr);
  Result<QueryResult> select_locked(std::string_view sql, std::span<const SqlValue> args,
                                    bool user,  // user: authorizer + interrupt + row cap
                                    SqlAccess access = SqlAccess::kReadWrite);

  sqlite3* db_ = nullptr;                                   // owned; closed in the destructor
  std::string path_;                                        // as given to open()
  mutable std::mutex mu_;                                   // guards everything below and db_
  std::vector<std::pair<std::string, sqlite3_stmt*>> stmts_;  // prepared-statement cache
  std::vector<StepRow> pending_steps_;                      // buffered until flush()
  std::vector<PendingMetric> pending_metrics_;              // buffered until flush()
  std::function<bool()> interrupt_check_;                   // polled during user queries
  // A flush that failed for a transient reason (a lock held past busy_timeout, a full disk)
  // puts the store in a failing state: later writes wait kFailingBusyMs, not busy_timeout_ms_,
  // so a run over a store that stays locked ends in seconds, not minutes (issue 30). The
  // first write that succeeds restores the full timeout.
  static constexpr int kFailingBusyMs = 200;
  void note_write(const Status& s);
  int busy_timeout_ms_ = 5000;                              // OpenOptions::busy_timeout_ms
  bool failing_ = false;
  // end_run calls whose UPDATE failed: retried after the next write that succeeds and at
  // close, so a run whose store was locked at its end does not stay RUNNING once it is free.
  std::vector<std::pair<std::string, RunStatus>> pending_ends_;
  Status end_pending_locked();
  // What is still buffered or pending when the store closes is saved in '<path>-unsaved' (an
  // SQLite file of its own: the store's lock does not stop it) and added to the store by the
  // next open(), so a process that ends while another writer holds the store loses nothing and
  // its run ends as it said, not KILLED (issue 30 item 14). Both say on stderr what they did.
  void save_unsaved_locked();
  Status add_unsaved();
  Status run_uncached(std::string_view sql, std::span<const SqlValue> args);  // finalized at once
};

// Formats a value the way the sqlite3 CLI would ("NULL", 3, 0.5, text, x'00ff').
std::string sql_value_to_string(const SqlValue& v);

}  // namespace eng
