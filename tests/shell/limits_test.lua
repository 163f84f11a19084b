-- tests/shell/limits_test.lua: array sizes are checked against kMaxArrayBytes
-- (engine/base/limits.h) before anything is allocated (issue 16 item 2): the error names the
-- array, its size and the limit, and a shape_only trainer (which allocates nothing) still works.
-- Then the whole state against the memory available (engine/train/state_memory.h).
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error

local huge = sl.config{vocab_size = 2 ^ 30}
expect_error(function() sl.trainer(huge, nil, {store = false}) end,
             "parameter 'params/token_embedder/embedding': array f32 (1073741824, 256) needs " ..
             "1099511627776 bytes, over the limit of 68719476736 bytes per array")
-- Nothing was half-built: the process goes on and a normal trainer works.
local plan = sl.trainer(huge, nil, {shape_only = true})
assert(plan ~= nil)
local t = sl.trainer(sl.config{base_num_decoder_layers = 1, max_target_length = 16,
                               per_device_batch_size = 1, steps = 1}, nil, {store = false})
t:train{quiet = true}
-- The whole state is checked against the memory this process may still allocate before
-- anything is allocated (issue 16): each array here fits the per-array limit, together they do
-- not. Run in a child under `ulimit -v` (RLIMIT_AS), so a binary without the check fails
-- fast on its first big allocation instead of pushing this machine into the OOM killer.
local bin = assert(os.getenv("SHARDLAB_BIN"), "SHARDLAB_BIN not set")
local function limited(kib, code)
  local p = assert(io.popen(string.format("ulimit -v %d; %q --db %q -e %q 2>&1; echo status=$?", kib, bin,
                                          os.getenv("SHARDLAB_SCRATCH") .. "/limits.db", code)))
  local out = p:read("a")
  p:close()
  return out
end
local big = [[sl.trainer(sl.config{vocab_size = 2^20, base_num_decoder_layers = 1, max_target_length = 16,
                                   per_device_batch_size = 1}, sl.mesh{data = 2}, {store = false})]]
local out = limited(2 * 1024 * 1024, big)  -- 2 GiB of address space; the state needs 4+ GiB
if out:find("AddressSanitizer", 1, true) then  -- ASan reserves terabytes of shadow: no ulimit -v
  print("limits_test: ok (the ulimit -v part skipped under AddressSanitizer)")
  return
end
for _, needle in ipairs{"sl.trainer: llama-tiny on 2 device(s) needs ",
                        " of this host's memory in all, but ",
                        " is available (RLIMIT_AS (ulimit -v) less this process's VmSize); largest: ",
                        "params/token_embedder/embedding 2.0 GiB, ",  -- 1 GiB on each of 2 devices
                        "plan it with {shape_only = true}", "status=1"} do
  assert(out:find(needle, 1, true), "missing '" .. needle .. "' in: " .. out)
end
-- The total is the sum of what is listed and more: parse it and compare with the biggest item.
local total = tonumber(out:match("needs [%d.]+ %a+ %((%d+) bytes%)"))
assert(total and total > 4 * 2^30, out)
-- A trainer that fits still trains under the same limit.
assert(limited(2 * 1024 * 1024, [[sl.trainer(sl.config{base_num_decoder_layers = 1, max_target_length = 16,
    per_device_batch_size = 1, steps = 1}, nil, {store = false}):train{quiet = true}]]):find("status=0", 1, true))
print("limits_test: ok")
