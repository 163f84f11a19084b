// engine/store/schema.cpp: the store's schema as a list of migrations (docs/metrics-store.md).
#include "engine/store/metrics_store.h"

namespace eng {
namespace {

// v1: the whole schema. Names follow docs/metrics-store.md and MLflow's tables; enums are CHECKs;
// timestamps are unix ms (`*_ms`), durations seconds (`*_s`). Views use plain SQL only, so
// they also work in the sqlite3 CLI (which lacks our percentile()/median() functions).
constexpr std::string_view kSchemaV1 = R"sql(
CREATE TABLE runs (
  run_id        TEXT PRIMARY KEY,              -- 32 hex digits (uuid4)
  name          TEXT NOT NULL,
  status        TEXT NOT NULL DEFAULT 'RUNNING'
                CHECK (status IN ('RUNNING', 'FINISHED', 'FAILED', 'KILLED')),
  start_ms      INTEGER NOT NULL,
  end_ms        INTEGER,
  host          TEXT,
  argv          TEXT,                          -- JSON array
  script        TEXT,
  git_rev       TEXT,
  parent_run_id TEXT REFERENCES runs (run_id)
) STRICT;

CREATE TABLE params (
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  key    TEXT NOT NULL,                        -- flattened config key: "mesh.fsdp"
  value  TEXT NOT NULL,
  PRIMARY KEY (run_id, key)
) STRICT, WITHOUT ROWID;

CREATE TABLE tags (
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  key    TEXT NOT NULL,
  value  TEXT NOT NULL,
  PRIMARY KEY (run_id, key)
) STRICT, WITHOUT ROWID;

CREATE TABLE meshes (
  mesh_id    INTEGER PRIMARY KEY,
  run_id     TEXT REFERENCES runs (run_id) ON DELETE CASCADE,
  axis_names TEXT NOT NULL,                    -- JSON array, major to minor
  axis_sizes TEXT NOT NULL,                    -- JSON array
  axis_types TEXT NOT NULL,                    -- JSON array of "Auto" | "Explicit" | "Manual"
  repr       TEXT,                             -- Mesh('data': 2, ..., axis_types=(...))
  created_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE steps (
  run_id              TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  step                INTEGER NOT NULL,
  wall_ms             INTEGER NOT NULL,
  loss                REAL,
  step_time_s         REAL,                    -- between consecutive loss syncs
  compile_s           REAL,
  data_s              REAL,
  tokens              INTEGER,
  tokens_per_s        REAL,
  tokens_per_s_device REAL,
  tflops_per_device   REAL,
  grad_norm           REAL,
  lr                  REAL,
  synced              INTEGER NOT NULL DEFAULT 1 CHECK (synced IN (0, 1)),
  compiled            INTEGER NOT NULL DEFAULT 0 CHECK (compiled IN (0, 1)),
  PRIMARY KEY (run_id, step)
) STRICT, WITHOUT ROWID;
CREATE INDEX steps_run_loss ON steps (run_id, loss);

CREATE TABLE metrics (
  run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  key     TEXT NOT NULL,                       -- MaxText names: learning/loss, perf/step_time_seconds
  context TEXT NOT NULL DEFAULT 'train' CHECK (context IN ('train', 'eval')),
  step    INTEGER NOT NULL,
  value   REAL,                                -- NULL when is_nan
  is_nan  INTEGER NOT NULL DEFAULT 0 CHECK (is_nan IN (0, 1)),
  wall_ms INTEGER NOT NULL,
  PRIMARY KEY (run_id, key, context, step)
) STRICT, WITHOUT ROWID;

CREATE TABLE latest_metrics (
  run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  key     TEXT NOT NULL,
  context TEXT NOT NULL,
  step    INTEGER NOT NULL,
  value   REAL,
  is_nan  INTEGER NOT NULL,
  wall_ms INTEGER NOT NULL,
  PRIMARY KEY (run_id, key, context)
) STRICT, WITHOUT ROWID;

-- MLflow maintains latest_metrics in its store code; here a trigger keeps the newest step.
CREATE TRIGGER metrics_latest AFTER INSERT ON metrics BEGIN
  INSERT INTO latest_metrics (run_id, key, context, step, value, is_nan, wall_ms)
  VALUES (NEW.run_id, NEW.key, NEW.context, NEW.step, NEW.value, NEW.is_nan, NEW.wall_ms)
  ON CONFLICT (run_id, key, context) DO UPDATE SET
    step = excluded.step, value = excluded.value, is_nan = excluded.is_nan,
    wall_ms = excluded.wall_ms
  WHERE excluded.step >= latest_metrics.step;
END;

CREATE TABLE compilations (
  compile_id   INTEGER PRIMARY KEY,
  run_id       TEXT REFERENCES runs (run_id) ON DELETE CASCADE,
  step         INTEGER,
  fn_name      TEXT NOT NULL,
  module_name  TEXT,
  outcome      TEXT NOT NULL CHECK (outcome IN ('hit', 'miss', 'write', 'skip')),
  cache_level  TEXT NOT NULL
               CHECK (cache_level IN ('tracing', 'lowering', 'executable', 'persistent')),
  reason_kind  TEXT CHECK (reason_kind IN ('never_seen', 'redefined', 'context', 'pytree',
                                           'debug_info', 'types', 'shardings', 'static_args',
                                           'unavailable')),
  reason_text  TEXT,
  in_signature TEXT,                           -- f32[8@data,4], ...
  in_shardings TEXT,
  cache_key    TEXT,
  trace_s      REAL,
  lower_s      REAL,
  compile_s    REAL,
  entry_bytes  INTEGER,
  wall_ms      INTEGER NOT NULL
) STRICT;
CREATE INDEX compilations_run_outcome ON compilations (run_id, outcome);
CREATE INDEX compilations_fn_wall ON compilations (fn_name, wall_ms);

-- JAX's CompiledMemoryStats per device; NULL means unavailable (not 0).
CREATE TABLE memory_analysis (
  compile_id                        INTEGER PRIMARY KEY
                                    REFERENCES compilations (compile_id) ON DELETE CASCADE,
  generated_code_size_in_bytes      INTEGER,
  argument_size_in_bytes            INTEGER,
  output_size_in_bytes              INTEGER,
  alias_size_in_bytes               INTEGER,
  temp_size_in_bytes                INTEGER,
  host_generated_code_size_in_bytes INTEGER,
  host_argument_size_in_bytes       INTEGER,
  host_output_size_in_bytes         INTEGER,
  host_alias_size_in_bytes          INTEGER,
  host_temp_size_in_bytes           INTEGER,
  peak_memory_in_bytes              INTEGER,
  device_limit_bytes                INTEGER,
  est_total_bytes INTEGER GENERATED ALWAYS AS (argument_size_in_bytes + output_size_in_bytes
                                               + temp_size_in_bytes - alias_size_in_bytes)
) STRICT;

CREATE TABLE cost_analysis (
  compile_id INTEGER NOT NULL REFERENCES compilations (compile_id) ON DELETE CASCADE,
  key        TEXT NOT NULL,                    -- flops, bytes accessed, ...
  value      REAL,
  PRIMARY KEY (compile_id, key)
) STRICT, WITHOUT ROWID;

CREATE TABLE checkpoints (
  run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  step    INTEGER NOT NULL,
  path    TEXT NOT NULL,
  bytes   INTEGER,
  save_s  REAL,
  async   INTEGER NOT NULL DEFAULT 0 CHECK (async IN (0, 1)),
  status  TEXT NOT NULL CHECK (status IN ('started', 'committed', 'failed')),
  wall_ms INTEGER NOT NULL,
  PRIMARY KEY (run_id, step)
) STRICT, WITHOUT ROWID;

CREATE TABLE events (
  event_id INTEGER PRIMARY KEY,
  run_id   TEXT REFERENCES runs (run_id) ON DELETE CASCADE,
  step     INTEGER,
  wall_ms  INTEGER NOT NULL,
  level    TEXT NOT NULL DEFAULT 'info' CHECK (level IN ('debug', 'info', 'warning', 'error')),
  kind     TEXT NOT NULL,                      -- recompile | nan_abort | oom | repl_cmd | cell
  message  TEXT,
  payload  TEXT                                -- JSON
) STRICT;
CREATE INDEX events_run_kind_wall ON events (run_id, kind, wall_ms);

CREATE TABLE tensor_shardings (
  snapshot_id      INTEGER NOT NULL,
  run_id           TEXT REFERENCES runs (run_id) ON DELETE CASCADE,
  step             INTEGER,
  path             TEXT NOT NULL,
  dtype            TEXT NOT NULL,
  shape            TEXT NOT NULL,              -- JSON array (global shape)
  logical_axes     TEXT,
  spec             TEXT,                       -- P('fsdp', 'tensor')
  type             TEXT,                       -- f32[256@fsdp,704@tensor]
  mesh_id          INTEGER REFERENCES meshes (mesh_id),
  bytes_per_device INTEGER,
  PRIMARY KEY (snapshot_id, path)
) STRICT;
CREATE INDEX tensor_shardings_run_path_step ON tensor_shardings (run_id, path, step);

-- Best (lowest) loss per run, with the step it happened at (earliest on ties).
CREATE VIEW v_best_loss AS
SELECT r.run_id, r.name, b.step, b.loss
FROM runs r JOIN (
  SELECT run_id, step, loss,
         ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY loss, step) AS rn
  FROM steps WHERE loss IS NOT NULL
) b ON b.run_id = r.run_id AND b.rn = 1;

-- Step-time percentiles per run over honest steps only (synced, no compilation), linear
-- interpolation between closest ranks (numpy's default; same as percentile(x, p)).
CREATE VIEW v_step_time_pct AS
WITH ranked AS (
  SELECT run_id, step_time_s AS x,
         ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY step_time_s) - 1 AS i,
         COUNT(*) OVER (PARTITION BY run_id) AS n
  FROM steps
  WHERE synced = 1 AND compiled = 0 AND step_time_s IS NOT NULL
), pos AS (
  SELECT run_id, x, i, n, 0.50 * (n - 1) AS r50, 0.90 * (n - 1) AS r90, 0.99 * (n - 1) AS r99
  FROM ranked
)
SELECT run_id, n AS n_steps,
  sum(x * CASE WHEN i = CAST(r50 AS INTEGER) THEN 1 - (r50 - CAST(r50 AS INTEGER))
               WHEN i = CAST(r50 AS INTEGER) + 1 THEN r50 - CAST(r50 AS INTEGER) ELSE 0 END) AS p50_s,
  sum(x * CASE WHEN i = CAST(r90 AS INTEGER) THEN 1 - (r90 - CAST(r90 AS INTEGER))
               WHEN i = CAST(r90 AS INTEGER) + 1 THEN r90 - CAST(r90 AS INTEGER) ELSE 0 END) AS p90_s,
  sum(x * CASE WHEN i = CAST(r99 AS INTEGER) THEN 1 - (r99 - CAST(r99 AS INTEGER))
               WHEN i = CAST(r99 AS INTEGER) + 1 THEN r99 - CAST(r99 AS INTEGER) ELSE 0 END) AS p99_s,
  avg(x) AS mean_s, min(x) AS min_s, max(x) AS max_s
FROM pos GROUP BY run_id, n;

-- Compile-cache events per run and function: hits, misses and the distinct reasons.
CREATE VIEW v_compile_summary AS
SELECT run_id, fn_name,
       count(*) AS events,
       sum(outcome = 'hit') AS hits,
       sum(outcome = 'miss') AS misses,
       sum(coalesce(compile_s, 0)) AS compile_s,
       group_concat(DISTINCT reason_kind) AS reasons
FROM compilations GROUP BY run_id, fn_name;

-- One line per run: status, steps logged, last and best loss.
CREATE VIEW v_run_summary AS
SELECT r.run_id, r.name, r.status, r.start_ms, r.end_ms,
       (SELECT count(*) FROM steps s WHERE s.run_id = r.run_id) AS n_steps,
       (SELECT max(step) FROM steps s WHERE s.run_id = r.run_id) AS last_step,
       (SELECT loss FROM steps s WHERE s.run_id = r.run_id ORDER BY step DESC LIMIT 1) AS last_loss,
       (SELECT min(loss) FROM steps s WHERE s.run_id = r.run_id) AS best_loss
FROM runs r;
)sql";

// sl.plan's predictions (docs/prediction.md): one row per compilation and topology, and its
// breakdown (compute by op class, collectives by mesh axes).
constexpr const char* kPredictions = R"sql(
CREATE TABLE predictions (
  compile_id              INTEGER NOT NULL
                          REFERENCES compilations (compile_id) ON DELETE CASCADE,
  topology                TEXT NOT NULL,      -- compile_topology, e.g. v6e-256
  num_slices              INTEGER NOT NULL,
  step_time_s             REAL NOT NULL,
  tflops_per_device       REAL,               -- MaxText's count per step
  tflops_per_s_per_device REAL,
  tokens_per_s_per_device REAL,
  mfu                     REAL,
  fits                    INTEGER NOT NULL CHECK (fits IN (0, 1)),
  peak_bytes              INTEGER,
  hbm_bytes               INTEGER,
  bound                   TEXT,
  compute_s               REAL,
  collective_s            REAL,
  exposed_collective_s    REAL,
  PRIMARY KEY (compile_id, topology)
) STRICT;

CREATE TABLE prediction_parts (
  compile_id      INTEGER NOT NULL,
  topology        TEXT NOT NULL,
  kind            TEXT NOT NULL CHECK (kind IN ('compute', 'collective')),
  name            TEXT NOT NULL,              -- op class or mesh axes
  seconds         REAL NOT NULL,
  exposed_seconds REAL,
  flops           REAL,
  bytes           REAL,
  PRIMARY KEY (compile_id, topology, kind, name),
  FOREIGN KEY (compile_id, topology) REFERENCES predictions (compile_id, topology)
    ON DELETE CASCADE
) STRICT;
)sql";

// Version 2's CHECK on prediction_parts.kind left out 'host_offload', which plan.cpp writes for
// a remat policy that offloads (so recording such a plan failed). SQLite cannot alter a CHECK:
// the table is rebuilt under its name, rows kept (nothing references it).
constexpr const char* kHostOffloadParts = R"sql(
CREATE TABLE prediction_parts_v3 (
  compile_id      INTEGER NOT NULL,
  topology        TEXT NOT NULL,
  kind            TEXT NOT NULL CHECK (kind IN ('compute', 'collective', 'host_offload')),
  name            TEXT NOT NULL,              -- op class, mesh axes, or 'host'
  seconds         REAL NOT NULL,
  exposed_seconds REAL,
  flops           REAL,
  bytes           REAL,
  PRIMARY KEY (compile_id, topology, kind, name),
  FOREIGN KEY (compile_id, topology) REFERENCES predictions (compile_id, topology)
    ON DELETE CASCADE
) STRICT;
INSERT INTO prediction_parts_v3 SELECT compile_id, topology, kind, name, seconds,
  exposed_seconds, flops, bytes FROM prediction_parts;
DROP TABLE prediction_parts;
ALTER TABLE prediction_parts_v3 RENAME TO prediction_parts;
)sql";

constexpr Migration kMigrations[] = {
    {1, "initial schema", kSchemaV1},
    {2, "predictions", kPredictions},
    {3, "host_offload prediction parts", kHostOffloadParts},
};

}  // namespace

std::span<const Migration> store_migrations() { return kMigrations; }
int store_schema_version() { return kMigrations[std::size(kMigrations) - 1].version; }

}  // namespace eng
