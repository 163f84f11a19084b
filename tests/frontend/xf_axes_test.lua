-- tests/frontend/xf_axes_test.lua: sl.auto_axes / sl.explicit_axes, the explicit-sharding
-- tutorial's examples ("Working around unimplemented sharding rules using auto_sharding",
-- "Using a mixture of sharding modes"), and their errors.
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")

local m = sl.make_mesh({4, 2}, {"X", "Y"})
sl.set_mesh(m)
-- f32[4@X, 4] + f32[4, 4@X] is an error in explicit mode (X would shard both dims) ...
local some_x = sl.reshard(sl.arange(16.0):reshape(4, 4), sl.P("X", nil))
local some_y = sl.reshard(sl.arange(16.0):reshape(4, 4), sl.P(nil, "X"))
h.expect_error(function() return some_x + some_y end,
               "add operation with inputs: f32[4@X,4], f32[4,4@X] produces an illegally sharded "
               .. "result: f32[4@X,4@X]")
-- ... and fine with auto_axes: the compiler chooses (here an all_to_all of y) and the result
-- is placed by out_sharding.
local add = sl.auto_axes(function(x, y) return x + y end,
                         {out_sharding = sl.P("X", nil), name = "add_auto"})
local r = add(some_x, some_y)
assert(tostring(sl.typeof(r)) == "f32[4@X,4]", sl.typeof(r))
local xt, rt = some_x:totable(), r:totable()
for i = 1, 4 do for j = 1, 4 do assert(rt[i][j] == 2 * xt[i][j]) end end
assert(r.mesh == m, "the result is back on the caller's (explicit) mesh")
local c = add:lower(some_x, some_y):compile()
assert(c:text():find("all_to_all", 1, true) or c:text():find("all_gather", 1, true), c:text())
assert(add:cache_info().compiles == 1)
add(some_x, some_y)
assert(add:cache_info().compiles == 1, "cached like sl.jit")
-- out_sharding at the call (JAX's `add2(x, y, out_sharding=P(...))`): the trailing table; each
-- spec is its own cached variant, and the function's own cache is untouched.
local add_kw = sl.auto_axes(function(x, y) return x + y end)
local r1 = add_kw(some_x, some_y, {out_sharding = sl.P("X", nil)})
local r2 = add_kw(some_x, some_y, {out_sharding = sl.P(nil, "X")})
assert(tostring(sl.typeof(r1)) == "f32[4@X,4]" and tostring(sl.typeof(r2)) == "f32[4,4@X]",
       tostring(sl.typeof(r1)) .. " " .. tostring(sl.typeof(r2)))
for i = 1, 4 do for j = 1, 4 do assert(r1:totable()[i][j] == rt[i][j] and r2:totable()[i][j] == rt[i][j]) end end
add_kw(some_x, some_y, {out_sharding = sl.P("X", nil)})
h.expect_error(function() add(some_x, some_y, {out_sharding = sl.P(nil, "X")}) end,
               "out_sharding is given at the call and already at sl.auto_axes(f, {out_sharding = ...})")
-- A misspelled keyword holding a spec is an error, not a dict argument (regression: it was read
-- as a third argument).
h.expect_error(function() add_kw(some_x, some_y, {out_shardings = sl.P("X", nil)}) end,
               "unknown keyword 'out_shardings' in the call's last table (sl.auto_axes takes out_sharding at the call)")
h.expect_error(function() add_kw(some_x, some_y, {out_shardings = {sl.P("X", nil), sl.P()}}) end,
               "unknown keyword 'out_shardings'")
h.expect_error(function() add_kw(some_x, some_y, {out_sharding = sl.P("X", nil), donate = 1}) end,
               "unknown keyword 'donate'")
-- Inside a jit of the same mode the function would be inlined and the spec ignored: refused.
local am = sl.make_mesh({4, 2}, {"X", "Y"}, {axis_types = {sl.AxisType.Auto, sl.AxisType.Auto}})
local ax = sl.device_put(sl.arange(16.0):reshape(4, 4), sl.NamedSharding(am, sl.P("X", nil)))
h.expect_error(function()
  sl.jit(function(t) return add_kw(t, t, {out_sharding = sl.P(nil, "X")}) end)(ax)
end, "sl.auto_axes with out_sharding inside sl.jit (or grad, vmap) of the same mode is not supported")
local scale = sl.explicit_axes(function(x) return x * 2 end)
assert(tostring(sl.typeof(scale(some_x, {in_sharding = sl.P(nil, "X")}))) == "f32[4,4@X]")
-- The result can feed explicit-mode ops again.
assert(tostring(sl.typeof(r * 2)) == "f32[4@X,4]")

-- explicit_axes on an Auto mesh: inside, shardings are part of the types.
local am = sl.make_mesh({2, 4}, {"X", "Y"}, {axis_types = "Auto"})
sl.use_mesh(am, function()
  local x = sl.device_put(sl.arange(16.0):reshape(4, 4), sl.P("X", "Y"))
  local seen
  local g = sl.explicit_axes(function(y)
    local z = y * 2
    seen = tostring(sl.typeof(z))
    return z
  end, {in_sharding = sl.P("X", "Y")})
  local z = g(x)
  assert(seen == "f32[4@X,4@Y]", seen)
  assert(z.mesh == am)
  local zt = z:totable()
  assert(zt[4][4] == 30 and zt[1][2] == 2)
  -- Explicit mode's errors apply inside.
  local bad = sl.explicit_axes(function(a, b) return a + b end)
  h.expect_error(function() bad(sl.device_put(x, sl.P("X", nil)), sl.device_put(x, sl.P(nil, "X"))) end,
                 "add operation with inputs: f32[4@X,4], f32[4,4@X] produces an illegally "
                 .. "sharded result: f32[4@X,4@X]")
  h.expect_error(function() sl.jit(function(t) return g(t) end)(x) end,
                 "sl.explicit_axes inside sl.jit (or grad, vmap) is not supported")
end)

-- Errors: an engine mesh has one axis type, so the switch covers every axis.
h.expect_error(function() sl.auto_axes(function(t) return t end, {axes = "X", out_sharding = sl.P()})(some_x) end,
               "auto_axes: axes (X) are not all the axes of Mesh('X': 4, 'Y': 2")
assert(sl.auto_axes(function(t) return t * 1 end, {axes = {"Y", "X"}, out_sharding = sl.P()})(some_x))
h.expect_error(function() sl.jit(function(a, b) return add(a, b) end)(some_x, some_y) end,
               "sl.auto_axes inside sl.jit (or grad, vmap) is not supported")
h.expect_error(function() sl.auto_axes(function(t) return t end, {out_shardings = sl.P()}) end,
               "did you mean 'out_sharding'")
h.expect_error(function() sl.auto_axes(function(t) return t end, {out_sharding = sl.P("Z")})(some_x) end,
               "'Z'")
print("xf_axes_test ok")
