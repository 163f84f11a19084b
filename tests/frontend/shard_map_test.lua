-- tests/frontend/shard_map_test.lua: sl.shard_map with sl.lax collectives on the examples of
-- JAX's "Manual parallelism with shard_map" tutorial (its meshes and shapes): values against
-- the unsharded computation, the collectives in the per-device program, and bad input.
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")
local np = sl.numpy

local function close(a, b, tol)
  if type(a) == "table" then
    assert(type(b) == "table" and #a == #b, "shapes differ")
    for i = 1, #a do close(a[i], b[i], tol) end
    return
  end
  tol = tol or 1e-5
  assert(math.abs(a - b) <= tol * math.max(1, math.abs(b)), string.format("%.9g vs %.9g", a, b))
end

local mesh = sl.make_mesh({4, 2}, {"x", "y"})
sl.set_mesh(mesh)
local a = sl.device_put(sl.arange(8 * 16.0):reshape(8, 16), sl.P("x", "y"))
local b = sl.device_put(sl.arange(16 * 4.0):reshape(16, 4), sl.P("y", nil))
local want = np.matmul(sl.device_put(a, sl.P()), sl.device_put(b, sl.P())):totable()

-- matmul_basic: blocks a (2, 8), b (8, 4); the partial products psum'd over y.
local seen = {}
local matmul_basic = sl.shard_map(function(ab, bb)
  seen[1], seen[2] = tostring(sl.typeof(ab)), tostring(sl.typeof(bb))
  return sl.lax.psum(np.dot(ab, bb), "y")
end, {mesh = mesh, in_specs = {sl.P("x", "y"), sl.P("y", nil)}, out_specs = sl.P("x", nil)})
local c = matmul_basic(a, b)
-- the blocks' types carry their varying manual axes (JAX's vma): a on x and y, b on y
assert(seen[1] == "f32[2,8]{V:(x,y)}" and seen[2] == "f32[8,4]{V:y}", seen[1] .. " " .. seen[2])
assert(tostring(sl.typeof(c)) == "f32[8@x,4]", sl.typeof(c))
close(c:totable(), want)
local text = matmul_basic:lower(a, b):compile():text()
assert(text:find("all_reduce[axes=(y)]", 1, true), text)
assert(matmul_basic:lower(a, b):compile().cost.collective_bytes.y == 32)

-- matmul_reduce_scatter: psum_scatter over y, result blocks (2, 2) on P('x', 'y').
local mm_rs = sl.shard_map(function(ab, bb)
  return sl.lax.psum_scatter(np.dot(ab, bb), "y", {scatter_dimension = 1, tiled = true})
end, {mesh = mesh, in_specs = {sl.P("x", "y"), sl.P("y", nil)}, out_specs = sl.P("x", "y")})
local crs = mm_rs(a, b)
assert(tostring(sl.typeof(crs)) == "f32[8@x,4@y]")
close(crs:totable(), want)
assert(mm_rs:lower(a, b):compile():text():find("reduce_scatter[dim=1 axes=(y)]", 1, true))

-- all_gather: the tutorial's 1-D mesh of 4 and x = arange(32) on P('i') gathered whole.
local m4 = sl.make_mesh({4}, {"i"})
local x = sl.arange(32.0, {sharding = sl.P("i"), mesh = m4})
-- all_gather's result still varies over i (JAX's vma rule), so out_specs=P() is check_vma's
-- error; P('i') lays the members' (equal) copies side by side.
h.expect_error(function()
  sl.shard_map(function(blk) return sl.lax.all_gather(blk, "i", {tiled = true}) end,
               {mesh = m4, in_specs = {sl.P("i")}, out_specs = sl.P()})(x)
end, "is P() which implies that the corresponding output value is replicated across mesh axis 'i'")
local gathered = sl.shard_map(function(blk) return sl.lax.all_gather(blk, "i", {tiled = true}) end,
                              {mesh = m4, in_specs = {sl.P("i")}, out_specs = sl.P("i")})(x)
local gv = gathered:totable()
assert(#gv == 128)
for k = 1, 128 do assert(gv[k] == (k - 1) % 32, "all_gather copy " .. k) end
local stacked = sl.shard_map(function(blk) return sl.lax.all_gather(blk, "i") end,
                             {mesh = m4, in_specs = {sl.P("i")}, out_specs = sl.P("i")})(x)
assert(stacked.shape[1] == 16 and stacked.shape[2] == 8, "untiled all_gather stacks a new axis")
close(stacked:totable()[3], {16, 17, 18, 19, 20, 21, 22, 23})

-- psum_scatter untiled: the scattered dim has the group's size and disappears.
local ps = sl.shard_map(function(blk) return sl.lax.psum_scatter(blk, "i") end,
                        {mesh = m4, in_specs = {sl.P(nil)}, out_specs = sl.P("i")})(sl.ones({4, 2}, {mesh = m4}))
assert(#ps.shape == 1 and ps.shape[1] == 8)  -- 4 members' (2,) blocks along P('i')
close(ps:totable(), {4, 4, 4, 4, 4, 4, 4, 4})

-- ppermute: a cyclic shift and a partial one (zeros where nothing arrives); axis_index.
local shift = function(perm)
  return sl.shard_map(function(blk) return sl.lax.ppermute(blk, "i", perm) end,
                      {mesh = m4, in_specs = {sl.P("i")}, out_specs = sl.P("i")})
end
local y = sl.arange(8.0, {sharding = sl.P("i"), mesh = m4})
close(shift({{0, 1}, {1, 2}, {2, 3}, {3, 0}})(y):totable(), {6, 7, 0, 1, 2, 3, 4, 5})
close(shift({{1, 0}, {2, 1}, {3, 2}, {0, 3}})(y):totable(), {2, 3, 4, 5, 6, 7, 0, 1})
close(shift({{0, 1}, {1, 2}, {2, 3}})(y):totable(), {0, 0, 0, 1, 2, 3, 4, 5})
local idx = sl.shard_map(function(blk) return blk + np.astype(sl.lax.axis_index("i"), "float32") end,
                         {mesh = m4, in_specs = {sl.P("i")}, out_specs = sl.P("i")})
close(idx(sl.zeros({8}, {mesh = m4})):totable(), {0, 0, 1, 1, 2, 2, 3, 3})

-- Inside jit, shard_map is traced as its own program; compiled once per signature.
assert(matmul_basic:cache_info().compiles == 1)

-- Bad input.
h.expect_error(function() sl.lax.psum(a, "x") end, "psum: unbound axis name 'x'")
h.expect_error(function()
  sl.shard_map(function(t) return sl.lax.psum(t, "z") end, {in_specs = {sl.P()}, out_specs = sl.P()})(a)
end, "psum: axis 'z' is not in Mesh('x': 4, 'y': 2")
h.expect_error(function()
  sl.shard_map(function(t) return t end, {in_specs = {sl.P("q")}, out_specs = sl.P()})(a)
end, "in_specs[1]: sharding: spec P('q') names axis 'q'")
h.expect_error(function()
  sl.shard_map(function(t) return t end, {in_specs = {sl.P("x")}, out_specs = sl.P(nil, nil, "x")})(a)
end, "out_specs[1]: P(None, None, 'x') is longer than the result's rank 2")
h.expect_error(function()  -- out_specs left out is JAX's out_specs=None: f returns nothing
  sl.shard_map(function(t) return t end, {in_specs = {sl.P("x")}})(a)
end, "out_specs is None (not given), but the function returned 1 values")
h.expect_error(function()
  shift({{0, 2}, {1, 0}})(y)
end, "ppermute: only shifts are in the op set")
h.expect_error(function()
  sl.shard_map(function(t) return sl.lax.psum_scatter(t, "i") end, {mesh = m4, in_specs = {sl.P()}, out_specs = sl.P("i")})(sl.ones({3}, {mesh = m4}))
end, "not equal to the group size 4")
h.expect_error(function()
  sl.shard_map(function(t) return sl.reshard(t, sl.P()) end, {mesh = m4, in_specs = {sl.P("i")}, out_specs = sl.P("i")})(y)
end, "inside sl.shard_map values are per-device blocks")
h.expect_error(function()
  sl.shard_map(function(t, u) return t end, {mesh = m4, in_specs = {sl.P("i")}, out_specs = sl.P("i")})(y, y)
end, "in_specs has no spec for argument 2")
h.expect_error(function()
  sl.jit(function(t) return matmul_basic(t, b) end)(a)
end, "sl.shard_map inside sl.jit (or grad) is not supported yet")
-- in_specs left out: each argument is split as its type says (Explicit axes); on an Auto mesh a
-- sharded argument's type names no axis, so that is an error asking for in_specs.
local blocks = sl.shard_map(function(t) return t * 2 end, {mesh = m4, out_specs = sl.P("i")})
local yi = sl.device_put(sl.arange(8.0), sl.NamedSharding(m4, sl.P("i")))
assert(tostring(sl.typeof(blocks(yi))) == "f32[8@i]" and blocks(yi):totable()[8] == 14)
local ma4 = sl.make_mesh({4}, {"i"}, {axis_types = {sl.AxisType.Auto}})
local ya = sl.device_put(sl.arange(8.0), sl.NamedSharding(ma4, sl.P("i")))
h.expect_error(function()
  sl.shard_map(function(t) return t end, {mesh = ma4, out_specs = sl.P("i")})(ya)
end, "in_specs not given, so argument 1 is split as its type says, but on Mesh('i': 4, axis_types=(Auto,)) (not Explicit) its type names no mesh axis though it is laid out P('i'): pass in_specs")
print("shard_map_test ok")
