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
assert(sl.sql("PRAGMA user_version")[1].user_version == 3)  -- docs/metrics-store.md: v3 allows host_offload parts
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

-- Rows written through SQL (with the write opt-in) show up in the views (and
-- percentile()/median() work).
local w = {write = true}
sl.sql("INSERT INTO runs (run_id, name, start_ms) VALUES ('r1', 'tiny', 0)", w)
for step = 0, 10 do
  sl.sql("INSERT INTO steps (run_id, step, wall_ms, loss, step_time_s, compiled) VALUES ('r1', ?, 0, ?, ?, ?)",
         w, step, 10 - step * 0.5, step == 0 and 30.0 or step * 0.1, step == 0)
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
-- A table right after the query is the options table; parameters are never tables.
expect_error(function() sl.sql("SELECT ?", {}, {}) end, "sl.sql: argument #3 expected nil, boolean, number or string, got table")
expect_error(function() sl.sql("INSERT INTO steps (run_id, step, wall_ms) VALUES ('ghost', 0, 0)", w) end,
             "FOREIGN KEY constraint failed")

-- Read-only by default (issue 16 item 7): a statement that would write is refused before it
-- runs (SQLite's sqlite3_stmt_readonly), naming what it would write and the opt-in.
local function n_steps() return sl.sql("SELECT count(*) AS n FROM steps")[1].n end
assert(n_steps() == 11)
local opt_in = "to write rows, opt in with sl.sql(query, {write = true}, ...)"
for _, c in ipairs{
    {"DELETE FROM steps", "DELETE FROM steps would write the store"},
    {"delete from steps where step > ?", "DELETE FROM steps would write the store", 3},
    {"UPDATE steps SET loss = 0", "UPDATE steps would write the store"},
    {"INSERT INTO runs (run_id, name, start_ms) VALUES ('r2', 'x', 0)", "INSERT INTO runs would write the store"},
    {"WITH d AS (SELECT 1) DELETE FROM steps", "DELETE FROM steps would write the store"},
    {"REPLACE INTO runs (run_id, name, start_ms) VALUES ('r1', 'y', 0)", "INSERT INTO runs would write the store"},
    {"CREATE TEMP TABLE scratch (a)", "CREATE TEMP TABLE scratch would write the store"},
    {"PRAGMA wal_checkpoint", "PRAGMA wal_checkpoint would write the store"},
    {"VACUUM", "this statement would write the store"},
  } do
  expect_error(function() sl.sql(c[1], c[3]) end, "sl.sql is read-only: " .. c[2])
  expect_error(function() sl.sql(c[1], c[3]) end, opt_in)
  expect_error(function() sl.sql(c[1], {write = false}, c[3]) end, "sl.sql is read-only")
end
assert(n_steps() == 11 and sl.sql("SELECT name FROM runs WHERE run_id = 'r1'")[1].name == "tiny")
-- DROP is refused with or without the opt-in (the store's schema is never the user's).
expect_error(function() sl.sql("DROP TABLE steps") end, "sl.sql may not change the store's schema")
expect_error(function() sl.sql("DROP TABLE steps", w) end, "sl.sql may not change the store's schema")
expect_error(function() sl.sql("SELECT 1", {writable = true}) end, "writable")
-- Reads that SQLite counts as writes only because the same PRAGMA can set a value stay reads.
assert(sl.sql("PRAGMA journal_mode")[1].journal_mode == "wal")
-- With the opt-in, rows can be written and deleted.
sl.sql("DELETE FROM steps WHERE step > ?", w, 8)
assert(n_steps() == 9)
sl.sql("CREATE TEMP TABLE scratch (a)", w)
sl.sql("INSERT INTO scratch VALUES (?)", w, 7)
assert(sl.sql("SELECT a FROM scratch")[1].a == 7)
assert(sl.sql("SELECT 2 AS two")[1].two == 2)
print("sql_test: ok")
