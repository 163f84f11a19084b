-- tests/frontend/tutorial_sharding_test.lua: the code cells of JAX's tutorial "Distributed arrays
-- and automatic parallelization" (docs/new_docs/201/sharding.md of jax-ml/jax at commit cec06d1,
-- August 2026; docs.jax.dev/en/latest/201/sharding.html), translated mechanically: Python
-- syntax to Lua (tuples and lists as tables, keyword arguments as a trailing table, methods
-- with `:`, `None` as nil), `jnp.` read as `sl.numpy.`, `jax.` as `sl.`, numpy's `np.` as
-- `sl.numpy.`, nothing renamed. Each cell checks what the tutorial prints (its comments and
-- text). Cells that cannot run are listed in `missing` with what the engine lacks (also in
-- docs/frontend.md "JAX's tutorials"); the test fails if a cell listed as running fails.
local jax, jnp, np = sl, sl.numpy, sl.numpy
local t = dofile(arg[0]:match("^(.*)/") .. "/tutorial.lua")
local cannot, expect = t.cannot, t.expect

-- cell 1 (`from __future__ import annotations`, `import enum`): Python imports, nothing to run.
-- cell 2: the number of local simulated devices (no device is in use yet).
jax.config.update('jax_num_cpu_devices', 8)
assert(#jax.devices() == 8, "cell 2")

-- cell 3
jax.set_mesh(jax.make_mesh({4, 2}, {'X', 'Y'}))  -- explicit mode by default
local x = jnp.arange(8 * 4.):reshape(8, 4)
x = jax.device_put(x, jax.P('X', 'Y'))
expect(jax.typeof(x), "f32[8@X,4@Y]", "cell 3")  -- the tutorial: f32[8@X, 4@Y]

-- cell 4
local grid = jax.debug.visualize_array_sharding(x)
assert(tostring(grid):find("CPU 0", 1, true) and tostring(grid):find("CPU 7", 1, true),
       "cell 4: " .. tostring(grid))

-- cell 5
local y = jnp.sin(x).T
expect(jax.typeof(y), "f32[4@Y,8@X]", "cell 5")

-- cells 6 and 7 declare Python classes (AbstractMesh, AxisType, Mesh) to explain them.

-- cell 8
local mesh = jax.make_mesh({4, 2}, {'X', 'Y'})
expect(mesh, "Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))", "cell 8")

-- cell 9
jax.set_mesh(mesh)

-- cell 10: Python's `with` block inside the function is a do-block with a to-be-closed
-- variable (its `return` closes it after y * 2 is traced).
local f10 = jax.jit(function(x)
  local abstract_mesh = jax.sharding.AbstractMesh({8}, {'A'}, {jax.sharding.AxisType.Explicit})
  do
    local _ <close> = jax.sharding.use_abstract_mesh(abstract_mesh)
    local y = jax.reshard(x, jax.P('A', nil))
    return y * 2
  end
end)

local z10 = f10(x)
expect(jax.typeof(z10), "f32[8@A,4]", "cell 10")  -- the tutorial: f32[8@A, 4]
-- Not printed by the tutorial: z lives on the devices of the mesh A, each holding its rows.
expect(z10.sharding, "NamedSharding(mesh=Mesh('A': 8, axis_types=(Explicit,)), spec=P('A', None))",
       "cell 10 sharding")
local xv10, zv10 = x:totable(), z10:totable()
for i = 1, 8 do for j = 1, 4 do assert(zv10[i][j] == 2 * xv10[i][j], "cell 10 values") end end
assert(tostring(z10:addressable_shards()[2].data) == tostring(jnp.array({{8., 10., 12., 14.}})),
       "cell 10: device 1 holds row 1")

-- cell 11: x.sharding is a NamedSharding, printed as JAX's without device_ids and memory_kind
-- (a PartitionSpec prints P(...) here, PartitionSpec(...) in JAX).
expect(x.sharding, "NamedSharding(mesh=Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)), "
                   .. "spec=P('X', 'Y'))", "cell 11")
expect(x.sharding.spec, "P('X', 'Y')", "cell 11 spec")
jax.debug.visualize_array_sharding(x)

-- cell 12: addressable_shards is a method here (a property in JAX).
local shards = x:addressable_shards()
assert(#shards == 8)
expect(shards[1].device, "0", "cell 12 device")
local d0 = shards[1].data:totable()
assert(d0[1][1] == 0 and d0[1][2] == 1 and d0[2][1] == 4 and d0[2][2] == 5, "cell 12 data")
local d1 = shards[2].data:totable()
assert(d1[1][1] == 2 and d1[2][2] == 7, "cell 12: device 1 holds columns 2:4")

-- cell 13
y = jax.device_put(x, jax.P('Y', 'X'))
expect(y.sharding.spec, "P('Y', 'X')", "cell 13")
jax.debug.visualize_array_sharding(y)

-- cell 14
y = jax.device_put(x, jax.P('X', nil))
expect(y.sharding.spec, "P('X', None)", "cell 14")
jax.debug.visualize_array_sharding(y)

-- cell 15: replicated over Y: devices 0 and 1 hold the same rows 0:2.
shards = y:addressable_shards()
assert(#shards[1].data:totable() == 2 and #shards[1].data:totable()[1] == 4, "cell 15 shape")
assert(shards[2].data:totable()[2][4] == shards[1].data:totable()[2][4], "cell 15 replica")

-- cell 16
y = jax.device_put(x, jax.P({'X', 'Y'}))
expect(y.sharding.spec, "P(('X', 'Y'))", "cell 16")
jax.debug.visualize_array_sharding(y)

-- cell 17: `unreduced={'Y'}` is the trailing keyword table. (JAX prints the spec
-- PartitionSpec('X', None, unreduced={'Y'}).)
y = jax.device_put(x, jax.P('X', nil, {unreduced = {'Y'}}))
expect(y.sharding, "NamedSharding(mesh=Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)), "
                   .. "spec=P('X', None, unreduced={'Y'}))", "cell 17")
expect(jax.typeof(y), "f32[8@X,4]{U:Y}", "cell 17 type")
expect(y, "Array(shape=(8, 4), dtype=float32, sharding=" .. tostring(y.sharding) .. ")",
       "cell 17 repr")

-- cell 18: the logical value is the sum over Y of the shards: each (X, Y=0) device holds its
-- rows of x, each (X, Y=1) device zeros (JAX's device_put to unreduced).
shards = y:addressable_shards()
assert(#shards == 8)
local xv = x:totable()
for d = 1, 8 do
  local s = shards[d]
  local blk = s.data:totable()
  expect(s.device, tostring(d - 1), "cell 18 device")
  assert(#blk == 2 and #blk[1] == 4, "cell 18 shape")
  local row0 = (d - 1) // 2 * 2  -- X = (d-1) // 2 holds rows 2X, 2X+1
  for i = 1, 2 do
    for j = 1, 4 do
      local want = (d - 1) % 2 == 0 and xv[row0 + i][j] or 0
      assert(blk[i][j] == want, string.format("cell 18: device %d [%d][%d] = %s", d - 1, i, j, blk[i][j]))
    end
  end
end
-- Not in the tutorial: the value is the sum, and reshard to a reduced spec all-reduces over Y.
local yv = y:totable()
for i = 1, 8 do for j = 1, 4 do assert(yv[i][j] == xv[i][j], "unreduced value") end end
local reduced = jax.reshard(y, jax.P('X', nil))
expect(jax.typeof(reduced), "f32[8@X,4]", "reshard of the unreduced array")
local rv = reduced:totable()
for i = 1, 8 do for j = 1, 4 do assert(rv[i][j] == xv[i][j], "reshard's all-reduce") end end
local reduce_text = jax.jit(function(a) return jax.reshard(a, jax.P('X', nil)) end):lower(y)
                    :compile():text()
assert(reduce_text:find("all_reduce[axes=(Y)]", 1, true), reduce_text)

-- cell 19: NamedSharding on another mesh (y is cell 17's).
local mesh2 = jax.make_mesh({8}, {'A'})
local z = jax.device_put(x, jax.NamedSharding(mesh2, jax.P('A', nil)))
expect(z.sharding.spec, "P('A', None)", "cell 19")
expect(z.mesh, "Mesh('A': 8, axis_types=(Explicit,))", "cell 19 mesh")
expect(y.sharding.spec, "P('X', None, unreduced={'Y'})", "cell 19")


-- cells 20 and 21: the type's sharding, at the top level and inside jit (explicit mode).
expect(jax.typeof(x).sharding, tostring(x.sharding), "cell 20")
local printed21
jax.jit(function(x) printed21 = tostring(jax.typeof(x).sharding) end)(x)
expect(printed21, tostring(x.sharding), "cell 21")

-- cell 22: numpy's int arrays place, type and add (int32) as the tutorial's.
local arg0 = jax.device_put(np.arange(4):reshape(4, 1), jax.P("X", nil))
local arg1 = jax.device_put(np.arange(8):reshape(1, 8), jax.P(nil, "Y"))
local result = arg0 + arg1
expect(jax.typeof(arg0), "i32[4@X,1]", "cell 22 arg0")
expect(jax.typeof(arg1), "i32[1,8@Y]", "cell 22 arg1")
expect(jax.typeof(result), "i32[4@X,8@Y]", "cell 22 result")

-- cell 23: the same types printed under a jit; the sum is arg0[i] + arg1[j].
local printed23 = {}
local add_arrays = jax.jit(function(x, y)
  local ans = x + y
  printed23 = {tostring(jax.typeof(arg0)), tostring(jax.typeof(arg1)), tostring(jax.typeof(result))}
  return ans
end)
local ans = add_arrays(arg0, arg1)
expect(table.concat(printed23, " "), "i32[4@X,1] i32[1,8@Y] i32[4@X,8@Y]", "cell 23 types")
expect(jax.typeof(ans), "i32[4@X,8@Y]", "cell 23 ans")
local ansv = ans:totable()
for i = 1, 4 do for j = 1, 8 do assert(ansv[i][j] == (i - 1) + (j - 1), "cell 23 values") end end

-- cell 24
x = jax.random.normal(jax.random.key(0), {8, 4}, {out_sharding = jax.P('X', 'Y')})
expect(jax.typeof(x), "f32[8@X,4@Y]", "cell 24")

-- cell 25
y = x:sum(0)
expect(jax.typeof(y), "f32[4@Y]", "cell 25")

-- cell 26: the compiled program in HLO text (engine/compile/hlo_text.h) has the all-reduce over X:
-- the tutorial prints True. Its replica groups are the devices that differ only along X.
local compile_txt = jax.jit(function(x) return x:sum(0) end):lower(x):compile():as_text()
expect(compile_txt:find('all-reduce(', 1, true) ~= nil, "true", "cell 26")
assert(compile_txt:find("replica_groups={{0,2,4,6},{1,3,5,7}}", 1, true), compile_txt)

-- cell 27: contracting dims sharded on both sides (f32[8,4@X] . f32[4@X,16]) are JAX's error.
x = jax.device_put(jnp.arange(8 * 4.):reshape(8, 4), jax.P(nil, 'X'))
y = jax.device_put(jnp.arange(4 * 16.):reshape(4, 16), jax.P('X', nil))
local ok, e = pcall(function() return jnp.dot(x, y) end)
assert(not ok and tostring(e):find("Contracting dimensions are sharded and it is ambiguous how "
                                   .. "the output should be sharded. Please specify the output "
                                   .. "sharding via the `out_sharding` parameter. Got "
                                   .. "lhs_contracting_spec=('X',) and "
                                   .. "rhs_contracting_spec=('X',)", 1, true), tostring(e))
-- (and, as the text after it says, one sharded side is no error: f32[8,4] . f32[4@X,16] is
-- f32[8,16], y gathered)
expect(jax.typeof(jnp.dot(jax.device_put(x, jax.P()), y)), "f32[8,16]", "cell 27 one side")

-- cell 28
z = jnp.dot(x, y, {out_sharding = jax.P('X', nil)})
expect(jax.typeof(z), "f32[8@X,16]", "cell 28")

-- cell 29: i32[4@X,4] + i32[4,4@X] would mention X twice: JAX's error.
local auto_axes, explicit_axes = jax.sharding.auto_axes, jax.sharding.explicit_axes
assert(auto_axes == sl.auto_axes and explicit_axes == sl.explicit_axes)
x = jax.device_put(np.arange(16):reshape(4, 4), jax.P("X", nil))
y = jax.device_put(np.arange(16):reshape(4, 4), jax.P(nil, "X"))
local ok29, e29 = pcall(function() return x + y end)
assert(not ok29 and tostring(e29):find("add operation with inputs: i32[4@X,4], i32[4,4@X] "
                                       .. "produces an illegally sharded result: i32[4@X,4@X]",
                                       1, true), tostring(e29))

-- cell 30: auto_axes with out_sharding at the call (the trailing keyword table).
local printed30
local add2 = auto_axes(function(x, y)
  printed30 = "We're in auto-sharding mode here. This is the current mesh:\n"
              .. tostring(jax.sharding.get_abstract_mesh())
  return x + y
end)

local result = add2(x, y, {out_sharding = jax.P("X", nil)})
expect(printed30, "We're in auto-sharding mode here. This is the current mesh:\n"
                  .. "AbstractMesh('X': 4, 'Y': 2, axis_types=(Auto, Auto))", "cell 30 inside")
expect("Result type: " .. jax.typeof(result), "Result type: i32[4@X,4]", "cell 30")

-- cell 31
local Auto = jax.sharding.AxisType.Auto
local auto_mesh = jax.make_mesh({4, 2}, {'X', 'Y'}, {Auto, Auto})
jax.set_mesh(auto_mesh)
x = jax.device_put(jnp.arange(8 * 4.):reshape(8, 4), jax.P(nil, 'X'))
y = jax.device_put(jnp.arange(4 * 16.):reshape(4, 16), jax.P('X', nil))
z = jnp.dot(x, y)  -- not an error!
local want = {}
for i = 0, 7 do
  want[i + 1] = {}
  for j = 0, 15 do
    local s = 0
    for k = 0, 3 do s = s + (4 * i + k) * (16 * k + j) end
    want[i + 1][j + 1] = s
  end
end
local got = z:totable()
for i = 1, 8 do for j = 1, 16 do assert(got[i][j] == want[i][j], "cell 31 values") end end

-- cell 32: the compiler's choice (JAX's XLA picked its own; the tutorial does not print it).
assert(tostring(z.sharding):find("P(", 1, true))

-- cell 33
local f = jax.jit(function(x, y)
  local z = jnp.dot(x, y)
  z = jax.lax.with_sharding_constraint(z, jax.P('X', nil))
  return z
end)
z = f(x, y)
expect(z.sharding.spec, "P('X', None)", "cell 33")

-- cell 34: explicit_axes inside a jit of the Auto mesh (cell 31's): part of the jit's program,
-- Explicit inside. print's lines are collected in `printed34` (the f-string's
-- `{jax.typeof(y) = }` is its text and the value; JAX prints ShapedArray(float32[4@X,4@Y])).
local printed34 = {}
local explicit_g = explicit_axes(function(y)
  printed34[#printed34 + 1] = 'mesh inside g: ' .. tostring(jax.sharding.get_abstract_mesh())
  printed34[#printed34 + 1] = 'y.sharding inside g: jax.typeof(y) = ' .. tostring(jax.typeof(y))
  local z = y * 2
  printed34[#printed34 + 1] = 'z.sharding inside g: jax.typeof(z) = ' .. tostring(jax.typeof(z))
  return z
end)

f = jax.jit(function(arr1)
  printed34[#printed34 + 1] = 'mesh inside f: ' .. tostring(jax.sharding.get_abstract_mesh())
  local x = jnp.sin(arr1)
  local z = explicit_g(x, {in_sharding = jax.P("X", "Y")})
  return z + 1
end)

x = jax.device_put(np.arange(16):reshape(4, 4), jax.P("X", "Y"))
local out34 = f(x)
expect(table.concat(printed34, "\n"), table.concat({
  "mesh inside f: AbstractMesh('X': 4, 'Y': 2, axis_types=(Auto, Auto))",
  "mesh inside g: AbstractMesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))",
  "y.sharding inside g: jax.typeof(y) = f32[4@X,4@Y]",
  "z.sharding inside g: jax.typeof(z) = f32[4@X,4@Y]"}, "\n"), "cell 34")
local v34 = out34:totable()
for i = 1, 4 do
  for j = 1, 4 do
    local want = 2 * math.sin((i - 1) * 4 + (j - 1)) + 1
    assert(math.abs(v34[i][j] - want) <= 1e-5, string.format("cell 34 [%d][%d]: %s", i, j, v34[i][j]))
  end
end

-- cell 35: the concrete sharding and the type's, at the top level (Explicit) and under
-- auto_axes (Auto: the type names no axis). print's lines are collected in `printed35`.
jax.set_mesh(jax.make_mesh({4, 2}, {'X', 'Y'}))  -- Explicit mode

local printed35 = {}
local function compare_shardings(x)
  printed35[#printed35 + 1] = "=== with mesh: " .. tostring(jax.sharding.get_abstract_mesh()) .. " ==="
  printed35[#printed35 + 1] = "Concrete value sharding: " .. tostring(x.sharding.spec)
  printed35[#printed35 + 1] = "Type-specified sharding: " .. tostring(jax.typeof(x).sharding.spec)
end

local my_array = jnp.sin(jax.device_put(np.arange(8), jax.P("X")))
compare_shardings(my_array)

local check_in_auto_context = auto_axes(function(x)
  compare_shardings(x)
  return x
end)

check_in_auto_context(my_array, {out_sharding = jax.P("X")})
expect(table.concat(printed35, "\n"), table.concat({
  "=== with mesh: AbstractMesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)) ===",
  "Concrete value sharding: P('X')",
  "Type-specified sharding: P('X')",
  "=== with mesh: AbstractMesh('X': 4, 'Y': 2, axis_types=(Auto, Auto)) ===",
  "Concrete value sharding: P('X')",
  "Type-specified sharding: P(None)"}, "\n"), "cell 35")

-- cell 36: shard_map with out_specs only: in_specs from the arguments' types.
mesh = jax.make_mesh({4, 2}, {'X', 'Y'})
jax.set_mesh(mesh)

x = jax.device_put(jnp.arange(8 * 4.):reshape(8, 4), jax.P(nil, 'X'))
y = jax.device_put(jnp.arange(4 * 16.):reshape(4, 16), jax.P('X', nil))

local matmul = jax.shard_map(function(x_shard, y_shard)
  local z_summand = jnp.dot(x_shard, y_shard)
  return jax.lax.psum_scatter(z_summand, 'X', {tiled = true})
end, {out_specs = jax.P('X', nil)})

z = matmul(x, y)
expect(jax.typeof(z), "f32[8@X,16]", "cell 36")

local z_ref = jnp.dot(x, y, {out_sharding = jax.P('X', nil)})
expect(jnp.allclose(z_ref, z), "true", "cell 36 allclose")
local a, b = z_ref:totable(), z:totable()
for i = 1, 8 do for j = 1, 16 do assert(a[i][j] == b[i][j], "cell 36 values") end end

t.report("tutorial 201/sharding: cells that do not run as written:")
