-- tests/shell/sql_test.lua: sl.sql over the metrics store: typed rows, parameters, views, clear errors.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error

assert(require("shardlab") == sl)
for _, suffix in ipairs{"", "-wal", "-shm"} do os.remove(sl.db_path() .. suffix) end  -- fresh store
local rows = sl.sql("SELECT 1 AS i, 2.5 AS r, 'x' AS t, NULL AS n, ? AS p, ? AS b", "arg", true)
local cols = rows.columns
assert(#rows == 1 and #cols == 6 and cols[1] == "i" and cols[6] == "b")
assert(sl.pretty(sl.sql("SELECT 1 AS a, NULL AS b UNION ALL SELECT 2, 'x'")) == '{{a = 1}, {a = 2, b = "x"}}')
local r = rows[1]
assert(math.type(r.i) == "integer" and r.i == 1)
assert(math.type(r.r) == "float" and r.r == 2.5)
assert(r.t == "x" and r.n == nil and r.p == "arg" and r.b == 1)

-- The schema is there, with its version.
assert(sl.sql("PRAGMA user_version")[1].user_version == 1)
assert(sl.sql("PRAGMA journal_mode")[1].journal_mode == "wal")
local names = {}
for _, row in ipairs(sl.sql("SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')")) do
  names[row.name] = true
end
for _, t in ipairs{"runs", "params", "steps", "metrics", "compilations", "memory_analysis",
                   "checkpoints", "events", "tensor_shardings", "v_best_loss", "v_step_time_pct",
                   "v_compile_summary"} do
  assert(names[t], "missing " .. t)
end

-- Rows written through SQL show up in the views (and percentile()/median() work).
sl.sql("INSERT INTO runs (run_id, name, start_ms) VALUES ('r1', 'tiny', 0)")
for step = 0, 10 do
  sl.sql("INSERT INTO steps (run_id, step, wall_ms, loss, step_time_s, compiled) VALUES ('r1', ?, 0, ?, ?, ?)",
         step, 10 - step * 0.5, step == 0 and 30.0 or step * 0.1, step == 0)
end
local best = sl.sql("SELECT * FROM v_best_loss WHERE run_id = ?", "r1")[1]
assert(best.step == 10 and best.loss == 5.0 and best.name == "tiny")
local pct = sl.sql("SELECT * FROM v_step_time_pct")[1]
assert(pct.n_steps == 10 and math.abs(pct.p50_s - 0.55) < 1e-9, sl.pretty(pct))
local med = sl.sql("SELECT median(step_time_s) AS m FROM steps WHERE NOT compiled")[1].m
assert(math.abs(med - 0.55) < 1e-9)

-- Errors: SQLite's message and the SQL; the session continues.
expect_error(function() sl.sql("SELECT * FROM nope") end, 'store: no such table: nope (in "SELECT * FROM nope")')
expect_error(function() sl.sql("SELECT ?") end, "store: query has 1 parameter(s) but 0 argument(s)")
expect_error(function() sl.sql() end, "sl.sql: argument 'query' expected string, got no value")
expect_error(function() sl.sql("SELECT ?", {}) end, "sl.sql: argument #2 expected nil, boolean, number or string, got table")
expect_error(function() sl.sql("INSERT INTO steps (run_id, step, wall_ms) VALUES ('ghost', 0, 0)") end,
             "FOREIGN KEY constraint failed")
assert(sl.sql("SELECT 2 AS two")[1].two == 2)
print("sql_test: ok")
