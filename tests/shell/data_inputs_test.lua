-- tests/shell/data_inputs_test.lua: issue 30's hangs and lost or wrong data through the shell
-- (items 7, 8, 10 and 15): size limits on sl.pipeline_schedule and config keys, the sl.sql row
-- cap on recursive CTEs, temp tables and views that would shadow the store's, a NUL in a
-- string config value, a huge batch refused before it is allocated, a .npy file whose data
-- does not match its header's shape.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error
local scratch = assert(os.getenv("SHARDLAB_SCRATCH"), "SHARDLAB_SCRATCH not set")

-- 7. Size limits (engine/base/limits.h): refused at once, naming the value and the limit.
expect_error(function() sl.pipeline_schedule{stages = 2 ^ 20, microbatches = 2 ^ 20} end,
             "stages 1048576 is over the limit of 65536")
expect_error(function() sl.pipeline_schedule{stages = 2, microbatches = 2, repeats = 1e9} end,
             "num_pipeline_repeats 1000000000 is over the limit of 65536")
expect_error(function() sl.pipeline_schedule{stages = 64, microbatches = 2048} end,
             "2111 iterations x 64 stages = 135104 cells, over the limit of 65536")
assert(sl.pipeline_schedule{stages = 4, microbatches = 8}.bubble_fraction > 0)
local t0 = os.clock()
expect_error(function() sl.config{[string.rep("x", 1000000)] = 1} end,
             "sl.config: a key of 1000000 characters ('xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...') is over the limit of 256")
expect_error(function() sl.config{lerning_rate = 1} end, "did you mean 'learning_rate'?")
assert(os.clock() - t0 < 5, "did-you-mean took " .. (os.clock() - t0) .. " s")  -- 20 s before

-- 8. A recursive CTE that returns one row but never stops hits the row cap's budget of work.
expect_error(function()
  sl.sql("with recursive r(i) as (select 1 union all select i + 1 from r) select count(*) from r")
end, "a recursive CTE ran past the work of 1000000 rows")
assert(sl.sql("with recursive r(i) as (select 1 union all select i + 1 from r where i < 1000) " ..
              "select count(*) as n from r")[1].n == 1000)

-- 10. A temp table, view or trigger may not shadow (or rewrite) the store's tables; other temp
-- objects still may be made.
local w = {write = true}
expect_error(function() sl.sql("create temp table steps (x)", w) end,
             "sl.sql may not create a temp table named 'steps' like the store's own")
expect_error(function() sl.sql("create temp view RUNS as select 1", w) end,
             "may not create a temp view named 'RUNS' like the store's own")
expect_error(function() sl.sql("create temp view v_run_summary as select 1", w) end,
             "temp view named 'v_run_summary'")
expect_error(function()
  sl.sql("create temp trigger t after insert on steps begin delete from steps; end", w)
end, "may not create a temp trigger 't' on the store's table 'steps'")
sl.sql("create temp table mine (x)", w)
sl.sql("insert into mine values (1)", w)
assert(sl.sql("select count(*) as n from mine")[1].n == 1)
local tiny = {base_num_decoder_layers = 1, max_target_length = 16, per_device_batch_size = 1,
              steps = 3}
local t = sl.trainer(sl.config(tiny))
t:train{quiet = true}
assert(sl.sql("select count(*) as n from steps where run_id = ?", t.run_id)[1].n == 3)
t = nil
collectgarbage()

-- 15. A NUL in a string config value (a path cut short) is refused.
expect_error(function() sl.config{run_name = "a\0b"} end, "config: run_name contains a NUL byte (at character 1)")
expect_error(function() sl.config{base_output_directory = "/tmp/x\0y"} end, "contains a NUL byte")

-- 15. A .npy file whose data does not match its header's shape is refused.
local function npy(path, shape, n)
  local header = "{'descr': '<i4', 'fortran_order': False, 'shape': " .. shape .. ", }"
  header = header .. string.rep(" ", 63 - (10 + #header) % 64) .. "\n"
  local f = assert(io.open(path, "wb"))
  f:write("\x93NUMPY\x01\x00", string.pack("<I2", #header), header)
  for i = 1, n do f:write(string.pack("<i4", i % 200)) end
  f:close()
end
local short = scratch .. "/short.npy"
npy(short, "(100,)", 50)
local cfg = {base_num_decoder_layers = 1, max_target_length = 16, per_device_batch_size = 1,
             steps = 1, dataset = "tokens:" .. short}
expect_error(function() sl.trainer(sl.config(cfg), nil, {store = false}) end,
             "the header's shape holds 100 tokens (400 bytes of 4-byte tokens) but the file has 200 data bytes")
npy(short, "(2, 50)", 100)  -- any shape: its element count
sl.trainer(sl.config(cfg), nil, {store = false}):train{quiet = true}

-- 15. per_device_batch_size = 1e9 is refused before anything batch-sized is allocated: run in
-- a child under ulimit -v (4 GiB), where allocating 8 GB first would fail differently.
local bin = assert(os.getenv("SHARDLAB_BIN"), "SHARDLAB_BIN not set")
local p = assert(io.popen(string.format(
  "ulimit -v %d; %q --db %q -e %q 2>&1; echo status=$?", 4 * 1024 * 1024, bin, scratch .. "/big.db",
  "sl.trainer(sl.config{per_device_batch_size = 1e9, base_num_decoder_layers = 1, " ..
  "max_target_length = 16}, nil, {store = false})")))
local out = p:read("a")
p:close()
if not out:find("AddressSanitizer", 1, true) then  -- ASan reserves terabytes: no ulimit -v
  assert(out:find("sl.trainer: llama-tiny on 1 device(s) needs ", 1, true) and
         out:find(" of this host's memory in all", 1, true) and out:find("status=1", 1, true), out)
end

print("data_inputs_test: ok")
