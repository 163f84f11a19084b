-- tests/shell/crash_inputs_test.lua: inputs that aborted or corrupted the process (issue 30,
-- items 1, 2, 3 and 5) are clear Lua errors naming the value and the limit, and the process goes
-- on working afterwards.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error

-- 1. Rank 9 or more: refused where the shape is made (the runtime's block copies hold 8 dims).
local nine = {1, 1, 1, 1, 1, 1, 1, 1, 1}
local limit = "has 9 dims, over the limit of 8 dims per array"
expect_error(function() sl.zeros(nine) end, "sl.zeros: array: shape (1, 1, 1, 1, 1, 1, 1, 1, 1) " .. limit)
expect_error(function() sl.array({{{{{{{{{1}}}}}}}}}) end,
             "sl.array: values nested 9 deep, over the limit of 8 dims per array")
local x8 = sl.zeros({1, 1, 1, 1, 1, 1, 1, 1})  -- rank 8 is fine
assert(#x8.shape == 8)
expect_error(function() x8:reshape(nine) end, "reshape: shape (1, 1, 1, 1, 1, 1, 1, 1, 1) " .. limit)
expect_error(function() sl.np.broadcast_to(x8, nine) end, "broadcast_to: shape (1, 1, 1, 1, 1, 1, 1, 1, 1) " .. limit)
expect_error(function() return x8[{"newaxis"}] end, limit)
expect_error(function() sl.jit(function(a) return a:reshape(nine) end)(x8) end, limit)
expect_error(function() sl.jit(function(a) return a[{"newaxis"}]:sum() end)(x8) end, limit)

-- 2. Deep and self-referencing pytrees: an error naming the path, no stack corruption.
local c = sl.ones({1})
for _ = 1, 30 do c = {c = c} end
local jitted = sl.jit(function(_) return sl.ones({1}) end)
local r = jitted(c)  -- 30 levels are within the pytree limit of 32
assert(r.shape[1] == 1)
local deep = c
for _ = 1, 10 do deep = {c = deep} end
expect_error(function() jitted(deep) end, "tables nested over 32 deep")
expect_error(function() sl.jit(function(_) return deep end)(sl.ones({1})) end, "nested over 32 deep")
expect_error(function() sl.grad(function(a) return a:sum() end)(deep) end, "nested over 32 deep")
local cyc = {w = sl.ones({2})}
cyc.c = cyc
expect_error(function() jitted(cyc) end, "argument 1.c contains itself")
expect_error(function() sl.vmap(function(a) return a end)(cyc) end, "contains itself")
cyc = nil
collectgarbage()  -- the collector finishes (it spun forever after the corruption)
collectgarbage()

-- 3. Out-of-range integer labels: an error naming the label and the range (eagerly), NaN
-- inside a traced function (jnp.take_along_axis's fill mode); never a read out of bounds.
local xent = sl.nn.softmax_cross_entropy_with_integer_labels
for _, bad in ipairs{1000, -5, 2147483647, -2147483648} do
  expect_error(function() xent(sl.ones({2, 4}), sl.array({1, bad}, {dtype = "int32"})) end,
               "label " .. math.tointeger(bad) .. " at flat index 1 is outside [0, 4)")
end
local traced = sl.jit(function(l, y) return xent(l, y) end)(sl.ones({2, 4}),
                                                             sl.array({1000, 1}, {dtype = "int32"}))
local v = traced:totable()
assert(v[1] ~= v[1], "an out-of-range label's loss is NaN, got " .. tostring(v[1]))
assert(math.abs(v[2] - math.log(4)) < 1e-5, tostring(v[2]))
local g = sl.grad(function(l, y) return xent(l, y):sum() end)(
  sl.ones({2, 4}), sl.array({-2147483648, 2}, {dtype = "int32"}))
local gl = g:totable()
assert(math.abs(gl[1][1] - 0.25) < 1e-6 and math.abs(gl[2][3] + 0.75) < 1e-6, sl.pretty(gl))

-- 5. sl.pretty's depth is bounded (each level is a C frame).
local t = {}
for _ = 1, 100000 do t = {t} end
expect_error(function() sl.pretty(t, {depth = 100000}) end, "sl.pretty: depth 100000 is outside [0, 200]")
assert(sl.pretty(t, {depth = 200}):find("{...}", 1, true))
assert(sl.pretty(t):find("{...}", 1, true))

-- 4. Out of memory inside a step (after the up-front memory check passed) is the step's error,
-- the run ends FAILED; it was std::terminate from the dispatcher thread's scratch reservation.
-- In a child under ulimit -v (not under AddressSanitizer, which reserves terabytes).
local bin = assert(os.getenv("SHARDLAB_BIN"), "SHARDLAB_BIN not set")
local scratch = assert(os.getenv("SHARDLAB_SCRATCH"), "SHARDLAB_SCRATCH not set")
os.remove(scratch .. "/oom.db")
local p = assert(io.popen(string.format("ulimit -v %d; %q --db %q -e %q 2>&1; echo status=$?",
  2300000, bin, scratch .. "/oom.db",
  "t = sl.trainer(sl.config{per_device_batch_size = 256, max_target_length = 512, steps = 2}) " ..
  "print(pcall(t.train, t, {quiet = true})) t = nil collectgarbage() " ..
  "print('run ' .. sl.sql('select status from runs')[1].status)")))
local out = p:read("a")
p:close()
if not out:find("AddressSanitizer", 1, true) then
  assert(not out:find("terminate called", 1, true), out)
  assert(out:find("false\tTrainer:train: step 0 failed on the devices: ", 1, false) and
         out:find("out of memory", 1, true) and out:find("run FAILED", 1, true) and
         out:find("status=0", 1, true), out)
end

print("crash_inputs_test: ok")
