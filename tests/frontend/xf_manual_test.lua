-- tests/frontend/xf_manual_test.lua: sl.lax.all_to_all inside sl.shard_map (manual mode):
-- values against a plain-Lua reference, the collective in the per-device program and its
-- bytes per axis (c.cost.collective_bytes, as for compiled programs), and bad input.
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")

local m = sl.make_mesh({4, 2}, {"X", "Y"})

-- Tiled: row-sharded to column-sharded without changing the values (the all_to_all JAX's
-- sharding docs use to switch a dimension's axis): x (8, 8) on P('X', None); each device's
-- (2, 8) block becomes its (8, 2) block of P(None, 'X').
local x = sl.device_put(sl.arange(64.0):reshape(8, 8), sl.P("X", nil), m)
local f = sl.shard_map(function(b) return sl.lax.all_to_all(b, "X", 1, 0, {tiled = true}) end,
                       {mesh = m, in_specs = {sl.P("X", nil)}, out_specs = sl.P(nil, "X")})
local y = f(x)
assert(tostring(sl.typeof(y)) == "f32[8,8@X]", sl.typeof(y))
local xt, yt = x:totable(), y:totable()
for i = 1, 8 do for j = 1, 8 do assert(yt[i][j] == xt[i][j], i .. "," .. j) end end
local c = f:lower(x):compile()
assert(c:text():find("all_to_all[split_dim=1 concat_dim=0 axes=(X)]", 1, true), c:text())
-- A device keeps 1 of its 4 chunks: it receives (G - 1) / G of its (2, 8) f32 block.
assert(c.cost.collective_bytes.X == 3 * 16, c.cost.collective_bytes.X)
assert(c.cost.collective_bytes.Y == nil or c.cost.collective_bytes.Y == 0)

-- Untiled (JAX's default): the split axis (size 4 = |X|) goes, the senders' axis appears at
-- concat_axis. Member r gets y_r[j][m] = x_m[r][j], so globally (out_specs P('X')):
-- Y[2r + j][m] = U[4m + r][j].
local u = sl.device_put(sl.arange(32.0):reshape(16, 2), sl.P("X", nil), m)
local g = sl.shard_map(function(b) return sl.lax.all_to_all(b, "X", 0, 1) end,
                       {mesh = m, in_specs = {sl.P("X")}, out_specs = sl.P("X")})
local z = g(u)
assert(tostring(sl.typeof(z)) == "f32[8@X,4]", sl.typeof(z))
local ut, zt = u:totable(), z:totable()
for r = 0, 3 do for j = 0, 1 do for mm = 0, 3 do
  assert(zt[2 * r + j + 1][mm + 1] == ut[4 * mm + r + 1][j + 1], r .. j .. mm)
end end end
local bad = function(fn)
  return sl.shard_map(fn, {mesh = m, in_specs = {sl.P("X", nil)}, out_specs = sl.P("X")})(x)
end
-- Tiled over one axis (split_axis == concat_axis, the shard_map tutorial's cell 36): member r
-- keeps chunk r of every sender, in sender order: out[2r + i][2q + j] = x[2q + i][2r + j].
local same = bad(function(b) return sl.lax.all_to_all(b, "X", 1, 1, {tiled = true}) end)
local st = same:totable()
for r = 0, 3 do for q = 0, 3 do for i = 0, 1 do for j = 0, 1 do
  assert(st[2 * r + i + 1][2 * q + j + 1] == xt[2 * q + i + 1][2 * r + j + 1], r .. q .. i .. j)
end end end end
-- Over both axes (8 members ranked X major, Y minor) and negative axes.
local w = sl.device_put(sl.arange(128.0):reshape(8, 16), sl.P(nil, nil), m)
local both = sl.shard_map(function(b) return sl.lax.all_to_all(b, {"X", "Y"}, -1, 0, {tiled = true}) end,
                          {mesh = m, in_specs = {sl.P()}, out_specs = sl.P(nil, {"X", "Y"})})
local wb = both(w)
assert(tostring(sl.typeof(wb)) == "f32[64,16@XY]" or tostring(sl.typeof(wb)):find("^f32%[64,16@"), sl.typeof(wb))
local wt, bt = w:totable(), wb:totable()
-- Member r's block (64, 2) stacks, for each sender m, columns 2r..2r+1 of m's (replicated) w.
for mm = 0, 7 do for i = 1, 8 do for col = 1, 16 do
  assert(bt[8 * mm + i][col] == wt[i][col])
end end end

-- Bad input: clear errors naming the op and the values.
h.expect_error(function() g(sl.device_put(sl.arange(64.0):reshape(32, 2), sl.P("X", nil), m)) end,
               "all_to_all: the size of split_axis 0 of (8, 2) is 8, but it must equal the size of the mapped axis X (4)")
h.expect_error(function() return sl.lax.all_to_all(x, "X", 0, 1) end,
               "all_to_all: unbound axis name 'X': collectives run inside sl.shard_map")
h.expect_error(function() bad(function(b) return sl.lax.all_to_all(b, "Z", 0, 1) end) end,
               "all_to_all: axis 'Z' is not in")
h.expect_error(function() bad(function(b) return sl.lax.all_to_all(b, "X", 0, 1, {tiled = true}) end) end,
               "split_axis 0 of (2, 8) has size 2, not divisible by the group size 4")
h.expect_error(function() bad(function(b) return sl.lax.all_to_all(b, "X", 5, 0) end) end,
               "all_to_all: split_axis 5 is out of bounds for array of dimension 2")
h.expect_error(function() bad(function(b) return sl.lax.all_to_all(b, "X", 1, 0, {tield = true}) end) end,
               "did you mean 'tiled'")
print("xf_manual_test ok")
