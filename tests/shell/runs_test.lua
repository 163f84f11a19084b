-- tests/shell/runs_test.lua: runs as values (issue 15): t.run / t.run_id, sl.runs{...},
-- sl.run(id), generated names, statuses (finished, failed, Ctrl-C, SIGKILL, never stepped),
-- the command line, effective params, tags and logged values, throughput named apart; the
-- store guard and Ctrl-C in sl.sql (issue 16); and clear errors for bad input.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error
local bin = assert(os.getenv("SHARDLAB_BIN"), "SHARDLAB_BIN not set")
local scratch = assert(os.getenv("SHARDLAB_SCRATCH"), "SHARDLAB_SCRATCH not set")
for _, suffix in ipairs{"", "-wal", "-shm"} do os.remove(sl.db_path() .. suffix) end  -- fresh store

local function tiny(extra)
  local c = {model = "llama-tiny", base_num_decoder_layers = 1, max_target_length = 32,
             per_device_batch_size = 1, steps = 3}
  for k, v in pairs(extra or {}) do c[k] = v end
  return sl.config(c)
end

-- 1. A trainer has its run: t.run_id, t.run (params, metrics, steps, compilations).
local t = sl.trainer(tiny(), sl.mesh{data = 2, fsdp = 2})
assert(t.run_id and #t.run_id == 32 and t.run_id:match("^%x+$"), tostring(t.run_id))
local res = t:train{steps = 2, quiet = true}
local run = t.run
assert(run.run_id == t.run_id and run.status == "RUNNING")
assert(#run.steps == 2 and run.steps[1].step == 0, #run.steps)
assert(#run.compilations >= 1 and run.compilations[1].fn_name == "train_step")
assert(run.metrics["learning/loss"] == run.steps[2].loss)
assert(sl.run(t.run_id).name == run.name)
assert(sl.run(run.name).run_id == t.run_id)  -- a unique name works too
-- 3. A generated name, the command line, script, its hash, the host and pid.
assert(run.name:match("^%a+%-%a+%-%d+$"), run.name)
assert(run.script == arg[0], tostring(run.script))
assert(run.argv:find("runs_test.lua", 1, true) and run.argv:sub(1, 1) == "[", run.argv)
assert(run.tags["shardlab.script_hash"]:match("^%x+$") and #run.tags["shardlab.script_hash"] == 32)
assert(run.host and #run.host > 0)
assert(tonumber(run.tags["shardlab.pid"]) > 0)
-- What it ran on (engine/tensor/system_info.h), as sl.system() says: a slow run explains itself.
local sys = sl.system()
for _, k in ipairs{"cpu", "cpu_flags", "blas_core", "blas_best", "blas_env", "simd", "matmul_f32",
                   "matmul_bf16"} do
  assert(run.tags["shardlab." .. k] == sys[k] and #sys[k] > 0, k .. ": " .. tostring(run.tags["shardlab." .. k]))
end
assert(run.git_rev == nil or run.git_rev:match("^%x+$"), tostring(run.git_rev))
local git = io.popen(string.format("git -C %q rev-parse HEAD 2>/dev/null", arg[0]:match("^(.*)/")))
local head = git:read("l")
git:close()
if head and head:match("^%x+$") then assert(run.git_rev == head, tostring(run.git_rev) .. " vs " .. head) end
-- 4. params hold the effective values: mesh sizes per axis, derived batch sizes, the preset.
local p = run.params
assert(p["mesh.data"] == "2" and p["mesh.fsdp"] == "2", tostring(p["mesh.fsdp"]))
assert(p.ici_data_parallelism == "2" and p.ici_fsdp_parallelism == "2", p.ici_fsdp_parallelism)
assert(p.ici_tensor_parallelism == "1" and p.num_devices == "4")
assert(p.global_batch_size_to_load == "4" and p.tokens_per_step == "128", p.global_batch_size_to_load)
assert(p.model_name == "llama-tiny" and p.base_emb_dim == "256" and tonumber(p["model.num_params"]) > 0)
-- 5. Throughput named apart: tokens_per_s is global, tokens_per_s_device per device.
local last = res.last
assert(math.abs(last.tokens_per_s - 4 * last.tokens_per_s_device) < 1e-6 * last.tokens_per_s)
assert(math.abs(run.steps[2].tokens_per_s - last.tokens_per_s) < 1e-6 * last.tokens_per_s)
assert(math.abs(run.steps[2].tokens_per_s_device - last.tokens_per_s_device) < 1e-6 * last.tokens_per_s)
-- Tags and free-form metrics.
assert(t:tag{team = "infra", attempt = 2, ok = true} == t)
t:log{["eval/accuracy"] = 0.75, ["eval/loss"] = 2}
run = t.run
assert(run.tags.team == "infra" and run.tags.attempt == "2" and run.tags.ok == "true")
assert(run.metrics["eval/accuracy"] == 0.75 and run.metrics["eval/loss"] == 2)
assert(sl.sql("SELECT step FROM metrics WHERE run_id = ? AND key = 'eval/loss'", t.run_id)[1].step == 1)

-- sl.runs filters: name, glob, status, params, time, SQL.
local function names(f)
  local out = {}
  for _, r in ipairs(sl.runs(f)) do out[#out + 1] = r.name end
  return out
end
assert(#names{name = run.name} == 1 and names{name = run.name}[1] == run.name)
assert(#names{name = run.name:match("^(%a+)%-") .. "-*"} >= 1)
assert(#names{status = "RUNNING"} == 1)
assert(#names{params = {["mesh.data"] = 2}} == 1 and #names{params = {["mesh.data"] = 8}} == 0)
assert(#names{since = os.time() - 600} == 1 and #names{["until"] = os.time() - 600} == 0)
assert(#names{where = "n_steps = 2 AND best_loss > 0"} == 1)
assert(sl.runs{limit = 0}[1] == nil)

-- 2. A trainer that never stepped leaves no run (its compilations stay, run_id NULL).
local idle = sl.trainer(tiny())
idle:compile()
local idle_id = idle.run_id
idle = nil
collectgarbage()
collectgarbage()
expect_error(function() sl.run(idle_id) end, "sl.run: no run with id or name '" .. idle_id .. "'")

-- 2. An error ends the run FAILED: too little device memory for the step.
local probe = sl.trainer(tiny(), nil, {shape_only = true})
local cap = sl.sql("SELECT argument_size_in_bytes AS a FROM memory_analysis ORDER BY compile_id DESC LIMIT 1")[1]
local small = sl.trainer(tiny(), nil, {device_capacity_bytes = (cap and cap.a or 0) + 64})
local failed_id = small.run_id
assert(not pcall(small.train, small, {steps = 2, quiet = true}))
small = nil
collectgarbage()
collectgarbage()
assert(sl.run(failed_id).status == "FAILED", sl.run(failed_id).status)
probe = nil

-- 2. Ctrl-C (SIGINT) during t:train ends the run KILLED; SIGKILL is marked KILLED by the next
-- process that opens the store; the process's pid and host are what tell it.
local child = scratch .. "/runs_child.lua"
local f = assert(io.open(child, "w"))
f:write([[
local t = sl.trainer(sl.config{model = "llama-tiny", base_num_decoder_layers = 1, max_target_length = 32,
                               per_device_batch_size = 1, steps = 100000, run_name = arg[1]})
if arg[2] == "loop" then
  io.open(arg[1] .. ".started", "w"):close()
  while true do t:step():wait() end  -- bare steps: Ctrl-C lands outside t:train{}
end
t:train{quiet = true}
]])
f:close()
local db = scratch .. "/runs_child.db"
for _, suffix in ipairs{"", "-wal", "-shm"} do os.remove(db .. suffix) end
local function run_child(name, signal, mode)
  assert(os.execute(string.format(
      "%q --db %q %q %s %s >/dev/null 2>&1 & pid=$!; " ..
      "for i in $(seq 100); do sleep 0.1; [ -e %s.started ] && sleep 0.5 && break; " ..
      "[ \"$(sqlite3 %q \"SELECT count(*) FROM steps s JOIN runs r USING (run_id) " ..
      "WHERE r.name = '%s'\" 2>/dev/null)\" -ge 2 ] 2>/dev/null && break; done; kill -%s $pid; wait $pid; true",
      bin, db, child, name, mode or "train", name, db, name, signal)))
end
if os.execute("command -v sqlite3 >/dev/null 2>&1") then
  run_child("ctrl-c", "INT")
  run_child("sigkill", "KILL")
  run_child("step-loop", "INT", "loop")
  local out = assert(io.popen(string.format(
      "%q --db %q -e 'for _, r in ipairs(sl.runs{}) do print(r.name, r.status, r.n_steps > 0) end'", bin, db)))
  local text = out:read("a")
  out:close()
  assert(text:find("ctrl%-c\tKILLED\ttrue"), text)
  assert(text:find("sigkill\tKILLED\ttrue"), text)
  assert(text:find("step%-loop\tKILLED"), text)
end

-- Issue 16 item 6: Ctrl-C interrupts a long sl.sql (a recursive CTE) and the script goes on.
local cte = scratch .. "/runs_cte.lua"
f = assert(io.open(cte, "w"))
f:write([[
local ok, err = pcall(sl.sql, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")
print(ok, err)
]])
f:close()
local started = os.time()
local p = assert(io.popen(string.format("%q --db %q %q 2>&1 & pid=$!; sleep 1; kill -INT $pid; wait $pid", bin, db, cte)))
local cte_out = p:read("a")
p:close()
-- Without the progress handler the query never returns (the Lua hook cannot run inside SQLite);
-- with it the process ends within a second or two of the signal ("query interrupted", or the
-- shell's "interrupted!" raised as pcall returns).
assert(cte_out:find("interrupted", 1, true), cte_out)
assert(os.time() - started < 20)

-- Issue 16 item 7: sl.sql cannot damage the store, and a refused BEGIN breaks no training.
expect_error(function() sl.sql("PRAGMA user_version = 99") end, "sl.sql may not set a PRAGMA")
expect_error(function() sl.sql("DROP TABLE steps") end, "sl.sql may not change the store's schema")
expect_error(function() sl.sql("ATTACH 'elsewhere.db' AS x") end, "sl.sql may not ATTACH or DETACH")
expect_error(function() sl.sql("BEGIN") end, "sl.sql may not control transactions")
local before = #t.run.steps
t:train{steps = 1, quiet = true}
assert(#t.run.steps == before + 1)
assert(sl.sql("PRAGMA user_version")[1].user_version >= 1)

-- Resume: parent_run_id and "resumed from step N of run NAME".
local out_dir = scratch .. "/runs_ckpt"
os.execute("rm -rf " .. out_dir)
local ck = tiny{enable_checkpointing = true, base_output_directory = out_dir, run_name = "resumable",
                checkpoint_period = 2}
local first = sl.trainer(ck)
first:train{steps = 2, quiet = true}
local first_id = first.run_id
first = nil
collectgarbage()
local printed = {}
local saved_print = print
print = function(...) printed[#printed + 1] = table.concat({...}, " ") end
local second = sl.trainer(ck)
print = saved_print
assert(printed[1] == "resumed from step 1 of run resumable", tostring(printed[1]))
assert(second.run.parent_run_id == first_id)
second = nil
collectgarbage()

-- Bad input: clear Lua errors, and the shell goes on.
expect_error(function() sl.runs(5) end, "sl.runs: argument 'options' expected table")
expect_error(function() sl.runs{nam = "x"} end, "sl.runs: unknown key 'nam'")
expect_error(function() sl.runs{status = "DONE"} end, "status must be RUNNING, FINISHED, FAILED or KILLED, got 'DONE'")
expect_error(function() sl.runs{where = "nope = 1"} end, "sl.runs: store: no such column: nope")
expect_error(function() sl.runs{where = "1); DROP TABLE steps; --"} end, "sl.runs: store:")
expect_error(function() sl.runs{params = 3} end, "sl.runs: params must be a table")
expect_error(function() sl.runs{params = {[1] = "x"}} end, "params must map config keys")
expect_error(function() sl.runs{limit = -1} end, "limit must be >= 0")
expect_error(function() sl.runs{since = "yesterday"} end, "sl.runs")
expect_error(function() sl.run() end, "sl.run: argument 'id' expected string")
expect_error(function() sl.run({}) end, "sl.run: argument 'id' expected string")
expect_error(function() sl.run("no-such-run") end, "sl.run: no run with id or name 'no-such-run'")
expect_error(function() t:tag(5) end, "Trainer:tag: argument 'tags' expected table")
expect_error(function() t:tag{[1] = "x"} end, "Trainer:tag: expected {name = string}")
expect_error(function() t:tag{["shardlab.pid"] = "1"} end, "names starting 'shardlab.' are the store's own")
expect_error(function() t:log{acc = "high"} end, "Trainer:log: expected {name = number}")
expect_error(function() t.tag(nil, {}) end, "Trainer:tag")
local unrecorded = sl.trainer(tiny(), nil, {store = false})
assert(unrecorded.run_id == nil and unrecorded.run == nil)
expect_error(function() unrecorded:tag{x = "y"} end, "this trainer records no run")
assert(sl.sql("SELECT 3 AS x")[1].x == 3)  -- the store still answers
print("runs_test: ok")
