-- tests/frontend/mesh_array_test.lua: sl.make_mesh, sl.set_mesh / sl.use_mesh, arrays on
-- simulated devices (values, types, shards, printing), sl.random, sl.device_put.
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")

-- Meshes, printed as JAX prints them; Explicit by default (jax.make_mesh).
local m = sl.make_mesh({4, 2}, {"X", "Y"})
assert(tostring(m) == "Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))", tostring(m))
assert(m:devices() == 8 and m:mode() == "explicit")
local ma = sl.make_mesh({2, 2}, {"a", "b"}, {axis_types = {sl.AxisType.Auto, sl.AxisType.Auto}})
assert(tostring(ma) == "Mesh('a': 2, 'b': 2, axis_types=(Auto, Auto))", tostring(ma))
assert(tostring(sl.make_mesh({8}, {"i"}, {axis_types = "Auto"})) == "Mesh('i': 8, axis_types=(Auto,))")
h.expect_error(function() sl.make_mesh({2, 2}, {"X"}) end, "2 axis_shapes but 1 axis_names")
h.expect_error(function() sl.make_mesh({2, 0}, {"X", "Y"}) end, "axis_shapes[2] must be a positive integer")
h.expect_error(function() sl.make_mesh({2, 2}, {"X", "X"}) end, "axis 'X' appears more than once")
-- One type per axis (JAX's mixed meshes): a type names the Explicit axes only.
local mixed = sl.make_mesh({2, 2}, {"X", "Y"}, {axis_types = {"Auto", "Explicit"}})
assert(tostring(mixed) == "Mesh('X': 2, 'Y': 2, axis_types=(Auto, Explicit))", tostring(mixed))
assert(mixed:mode() == "mixed" and not (mixed == sl.make_mesh({2, 2}, {"X", "Y"})))
h.expect_error(function() sl.make_mesh({2, 2}, {"X", "Y"}, {axis_types = {"Auto"}}) end,
               "1 axis_types for 2 axes")
h.expect_error(function() sl.make_mesh({2}, {"X"}, {axis_types = "Manual"}) end, "not Explicit or Auto")

-- set_mesh and the scoped use_mesh (restored also when the function raises).
assert(sl.get_mesh():devices() == 1)
sl.use_mesh(m, function() assert(sl.get_mesh() == m) end)
assert(sl.get_mesh():devices() == 1)
h.expect_error(function() sl.use_mesh(m, function() error("boom") end) end, "boom")
assert(sl.get_mesh():devices() == 1, "use_mesh restores the mesh after an error")
sl.set_mesh(m)
assert(sl.get_mesh() == m)

-- The distributed-arrays tutorial's first example: arange(32) as (8, 4) on P('X', 'Y').
local x = sl.device_put(sl.arange(32.0):reshape(8, 4), sl.P("X", "Y"))
assert(tostring(sl.typeof(x)) == "f32[8@X,4@Y]", sl.typeof(x))
assert(x.type == "f32[8@X,4@Y]" and x.dtype == "float32" and x.ndim == 2 and x.size == 32)
assert(x.shape[1] == 8 and x.shape[2] == 4 and tostring(x.sharding.spec) == "P('X', 'Y')")
local t = x:totable()
for i = 1, 8 do for j = 1, 4 do assert(t[i][j] == (i - 1) * 4 + (j - 1)) end end
-- Each device holds only its block: device d = (X, Y) = (d // 2, d % 2) holds rows 2X..2X+1,
-- cols 2Y..2Y+1.
local shards = x:addressable_shards()
assert(#shards == 8)
for _, s in ipairs(shards) do
  local X, Y = s.device // 2, s.device % 2
  assert(s.index[1][1] == 2 * X and s.index[1][2] == 2 * X + 2, "rows of device " .. s.device)
  assert(s.index[2][1] == 2 * Y and s.index[2][2] == 2 * Y + 2)
  assert(s.shape[1] == 2 and s.shape[2] == 2)
  local b = s.data:totable()
  for i = 1, 2 do for j = 1, 2 do assert(b[i][j] == t[2 * X + i][2 * Y + j]) end end
end
local grid = sl.visualize(x)
assert(grid:find("CPU 0", 1, true) and grid:find("CPU 7", 1, true), grid)
assert(grid:find("f32[8@X,4@Y]", 1, true), grid)

-- Printing: small arrays show values as NumPy does, large ones a summary.
assert(tostring(sl.array({{1, 2}, {3, 4}})) == "Array([[1., 2.],\n       [3., 4.]], dtype=float32)",
       tostring(sl.array({{1, 2}, {3, 4}})))
assert(tostring(sl.array({0.5, -1.25})) == "Array([ 0.5 , -1.25], dtype=float32)",
       tostring(sl.array({0.5, -1.25})))
assert(tostring(sl.arange(3)) == "Array([0, 1, 2], dtype=int32)", tostring(sl.arange(3)))
local big = tostring(sl.zeros({100, 100}))
assert(#big < 400 and big:find("...", 1, true), big)
assert(tostring(sl.full({}, 7)) == "Array(7., dtype=float32)", tostring(sl.full({}, 7)))

-- dtypes and creation options.
assert(sl.ones({2}, {dtype = "bfloat16"}).dtype == "bfloat16")
assert(sl.arange(4).dtype == "int32" and sl.arange(0.0, 1.0, 0.25).size == 4)
local z = sl.zeros({8, 2}, {sharding = sl.P("a"), mesh = ma})
-- On an Auto mesh the type names no axis (the layout is the compiler's); x.sharding has it.
assert(tostring(sl.typeof(z)) == "f32[8,2]" and tostring(z.sharding.spec) == "P('a')" and z.mesh == ma)

-- Bad input: each a clear error naming the value.
h.expect_error(function() sl.ones({8, 4}, {sharding = sl.P("Z")}) end, "names axis 'Z'")
h.expect_error(function() sl.ones({8, 4}, {sharding = sl.P("X", "Y", nil)}) end,
               "has 3 entries but the array has rank 2")
h.expect_error(function() sl.ones({6, 4}, {sharding = sl.P("X")}) end,
               "dimension 0 of size 6 is not divisible by 4")
h.expect_error(function() sl.array({{1, 2}, {3}}) end, "ragged values")
h.expect_error(function() sl.array({1, "a"}) end, "values must be numbers")
h.expect_error(function() sl.ones({2}, {dtype = "float64"}) end, "float64")
h.expect_error(function() sl.ones({2}, {dtyp = "float32"}) end, "did you mean 'dtype'")
h.expect_error(function() sl.zeros({-1}) end, "negative")
h.expect_error(function() sl.zeros({1 << 40}) end, "over the limit")
h.expect_error(function() sl.full({2}, "x") end, "expected number")
h.expect_error(function() x:item() end, "size 1")

-- Random: counter-based, so a value depends on the key and its index only (not the sharding).
local k = sl.random.key(0)
local a1 = sl.random.normal(k, {8, 4}):totable()
local a2 = sl.random.normal(k, {8, 4}, {sharding = sl.P("X", "Y")}):totable()
local a3 = sl.random.normal(sl.random.key(1), {8, 4}):totable()
local sum, sq, differ = 0, 0, false
for i = 1, 8 do for j = 1, 4 do
  assert(a1[i][j] == a2[i][j])
  differ = differ or a1[i][j] ~= a3[i][j]
end end
assert(differ, "another key gives other values")
local n = sl.random.normal(k, {10000}):totable()
for _, v in ipairs(n) do sum = sum + v; sq = sq + v * v end
assert(math.abs(sum / 10000) < 0.05 and math.abs(sq / 10000 - 1) < 0.05, "standard normal moments")
local ks = sl.random.split(k, 3)
assert(#ks == 3 and tostring(ks[1]) ~= tostring(ks[2]))

-- device_put re-places values; a reshard through the host keeps them.
local y = sl.device_put(x, sl.P(nil, "X"))
assert(tostring(sl.typeof(y)) == "f32[8,4@X]")
local ty = y:totable()
for i = 1, 8 do for j = 1, 4 do assert(ty[i][j] == t[i][j]) end end
print("mesh_array_test ok")
