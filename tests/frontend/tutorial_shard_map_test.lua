-- tests/frontend/tutorial_shard_map_test.lua: the code cells of the first part of JAX's tutorial
-- "Manual parallelism with shard_map" (docs/notebooks/shard_map.md of jax-ml/jax at commit
-- 019c6d6: "So, let's see a shard_map!" and "Slow down, start with the basics!", its code
-- cells 1-24 up to the scan examples), translated mechanically: Python syntax to Lua (tuples as
-- tables, keyword arguments as a trailing table, decorators as calls, `None` as nil), `jnp.`
-- read as `sl.numpy.`, `jax.` as `sl.`, nothing renamed. Each cell checks the values and types
-- the tutorial prints (its comments); what cannot run is listed in `missing` and asserted to
-- still fail where it is an error. Cells 18-21 follow commit cec06d1, whose texts changed
-- since 019c6d6: types print their varying manual axes as {V:i} (019c6d6's comments: {i}) and
-- cell 19 reads jax.typeof(y).manual_axis_type.varying (019c6d6: .vma; both work here).
-- Cells 25-52 (the collectives tutorial and the matmul examples) are
-- tutorial_shard_map_collectives_test.lua, the neural-network examples (53-69)
-- tutorial_shard_map_nn_test.lua (docs/frontend.md "JAX's tutorials").
local jax, jnp = sl, sl.numpy
local t = dofile(arg[0]:match("^(.*)/") .. "/tutorial.lua")
local cannot, expect, fails = t.cannot, t.expect, t.fails
local function same(a, b, what)  -- a check of this test, not a cell: nested tables equal
  if type(a) == "table" then
    assert(type(b) == "table" and #a == #b, what .. ": shapes differ")
    for i = 1, #a do same(a[i], b[i], what) end
    return
  end
  assert(math.abs(a - b) <= 1e-2 + 1e-2 * math.abs(b), string.format("%s: %s vs %s", what, a, b))
end

-- cell 1: os.environ is Python's (shardlab puts it in Lua's os table): XLA_FLAGS' device count
-- becomes the number of simulated local devices, as JAX reads it when its backend starts (CTest
-- runs this test with SHARDLAB_LOCAL_DEVICES and XLA_FLAGS empty: tests/frontend/CMakeLists.txt).
os.environ["XLA_FLAGS"] = '--xla_force_host_platform_device_count=8' -- Use 8 CPU devices
assert(os.getenv("XLA_FLAGS") == '--xla_force_host_platform_device_count=8', "cell 1: setenv")
assert(#jax.devices() == 8, "cell 1: jax.devices() lists " .. #jax.devices())

-- cell 2: `from functools import partial` is Python's.
local P = jax.sharding.PartitionSpec
local Explicit = jax.sharding.AxisType.Explicit
local Auto = jax.sharding.AxisType.Auto
local Mesh = jax.sharding.Mesh
assert(P and Explicit and Auto and Mesh)

-- cell 3
local mesh = jax.make_mesh({4, 2}, {'x', 'y'})
jax.set_mesh(mesh)

local a = jax.device_put(jnp.arange(8 * 16.):reshape(8, 16), P('x', 'y'))
local b = jax.device_put(jnp.arange(16 * 4.):reshape(16, 4), P('y', nil))

local blocks = {}
local matmul_basic = jax.shard_map({in_specs = {P('x', 'y'), P('y', nil)}, out_specs = P('x', nil)})(
  function(a_block, b_block)
    blocks[1], blocks[2] = jax.typeof(a_block), jax.typeof(b_block)  -- f32[2, 8], f32[8, 4]
    local c_partialsum = jnp.dot(a_block, b_block)
    local c_block = jax.lax.psum(c_partialsum, 'y')
    -- c_block: f32[2, 4]
    return c_block
  end)

local c = matmul_basic(a, b)  -- c: f32[8, 4]
-- (the tutorial's comments give the shapes; jax.typeof adds the varying manual axes)
expect(blocks[1], "f32[2,8]{V:(x,y)}", "cell 3 a_block")
expect(blocks[2], "f32[8,4]{V:y}", "cell 3 b_block")
expect(jax.typeof(c), "f32[8@x,4]", "cell 3 c")

-- cell 4: prints True. functools.partial(jnp.allclose, atol=1e-2, rtol=1e-2) is written as
-- the function it makes (Lua has no partial).
local tree_map, tree_all = jax.tree_util.tree_map, jax.tree_util.tree_all

local function allclose(a, b)
  return tree_all(tree_map(function(x, y) return jnp.allclose(x, y, {atol = 1e-2, rtol = 1e-2}) end,
                           a, b))
end

expect(allclose(c, jnp.dot(a, b, {out_sharding = P('x', nil)})), "true", "cell 4")
same(c:totable(), jnp.dot(a, b, {out_sharding = P('x', nil)}):totable(), "cell 4 values")
assert(not allclose(c, jnp.dot(a, b, {out_sharding = P('x', nil)}) * 2), "cell 4: can be false")

-- cell 5: c's rows on x, replicated over y.
local grid = tostring(jax.debug.visualize_array_sharding(c))
assert(grid:find("CPU 0,1", 1, true) and grid:find("CPU 6,7", 1, true), "cell 5: " .. grid)

-- cell 6 (NamedSharding is imported, not used)
assert(jax.sharding.NamedSharding)
a = jax.device_put(a, P('x', 'y'))
b = jax.device_put(b, P('y', nil))

local matmul_reference = jax.jit(function(a, b)
  return jnp.dot(a, b, {out_sharding = P('x', nil)})
end)

local c_ref = matmul_reference(a, b)
expect(allclose(c_ref, jnp.dot(a, b, {out_sharding = P('x', nil)})), "true", "cell 6")
expect(jax.typeof(c_ref), "f32[8@x,4]", "cell 6 c_ref")

-- cell 7
print('a blocks:'); jax.debug.visualize_array_sharding(a)
print('b blocks:'); jax.debug.visualize_array_sharding(b)
print('c blocks:'); jax.debug.visualize_array_sharding(c)

-- cell 8: prints True. `x @ x` is jnp.matmul(x, x) (Lua has no @), the list comprehension a
-- loop over the rows; jnp.arange(12) is int32, so these are int32 matmuls.
local vmap_printed
local function check_vmap(f, xs)
  local ans = jax.vmap(f, {in_axes = {0}, out_axes = 0})(xs)
  local rows = {}
  for i = 0, xs.shape[1] - 1 do rows[#rows + 1] = f(xs[i]) end  -- [f(x) for x in xs]
  local expected = jnp.stack(rows)  -- vmap reference semantics
  vmap_printed = allclose(ans, expected)
  expect(jax.typeof(ans), "i32[4]", "cell 8 ans")
  same(ans:totable(), {5, 50, 149, 302}, "cell 8 values")  -- row r: sum of (3r + k)^2
end

check_vmap(function(x) return jnp.matmul(x, x) end, jnp.arange(12):reshape(4, 3))
expect(vmap_printed, "true", "cell 8")

-- cell 9: prints True. `import numpy as np` is sl.numpy, whose np.array of devices is numpy's
-- object array of them; jax.devices()[:4] is Python's slice, {table.unpack(jax.devices(), 1, 4)}.
local np = sl.numpy
local devices = np.array({table.unpack(jax.devices(), 1, 4)})
expect(devices, "array([CpuDevice(id=0), CpuDevice(id=1), CpuDevice(id=2), CpuDevice(id=3)], "
                  .. "dtype=object)", "cell 9 devices")
mesh = Mesh(devices, {'i'})  -- mesh.shape['i'] = 4
expect(mesh, "Mesh('i': 4, axis_types=(Auto,))", "cell 9 mesh")
jax.set_mesh(mesh)

local shmap_printed
local function check_shmap(f, y)
  local ans = jax.shard_map(f, {in_specs = P('i'), out_specs = P('i')})(y)
  local blocks = {}
  for _, y_blk in ipairs(jnp.split(y, mesh.shape['i'])) do blocks[#blocks + 1] = f(y_blk) end
  local expected = jnp.concatenate(blocks)
  shmap_printed = allclose(ans, expected)
end

check_shmap(function(x) return jnp.matmul(x.T, x) end, jnp.arange(32):reshape(8, 4))
expect(shmap_printed, "true", "cell 9")

-- cell 10
mesh = jax.make_mesh({4, 2}, {'i', 'j'})
jax.set_mesh(mesh)

local printed
local f1 = jax.shard_map({in_specs = P('i', nil), out_specs = P('i', 'j')})(function(x_block)
  printed = x_block.shape  -- prints (3, 12)
  return x_block
end)

local x1 = jax.device_put(jnp.arange(12 * 12):reshape(12, 12), P('i', nil))
local y = f1(x1)
assert(printed[1] == 3 and printed[2] == 12, "cell 10: the block shape")
expect(jax.typeof(y), "i32[12@i,24@j]", "cell 10 y")  -- the (12, 24) the text describes

-- cell 11
local f2 = jax.shard_map({in_specs = P('i', 'j'), out_specs = P('i', 'j')})(function(x_block)
  printed = x_block.shape
  return x_block
end)

local x = jnp.arange(12 * 12):reshape(12, 12)
local x_ = jnp.tile(x, {1, mesh.shape['j']})  -- x_ has shape (12, 24)
assert(x_.shape[1] == 12 and x_.shape[2] == 24, "cell 11: jnp.tile(x, (1, mesh.shape['j']))")
x_ = jax.device_put(x, P('i', 'j'))
y = f2(x_)  -- the tutorial's comment says (3,12); x_ is x placed, so each block is (3, 6)
assert(printed[1] == 3 and printed[2] == 6, "cell 11: the block shape")

-- cell 12: `with jax.set_mesh(auto_mesh):` is a to-be-closed variable in a block: set_mesh's
-- object restores the mesh of before at `end`. `lambda: x` is a function of no arguments and
-- in_specs=() an empty table. Each z prints as the jnp.tile the comment names.
local auto_mesh = jax.make_mesh({4, 2}, {'i', 'j'}, {Auto, Auto})
local tiles = {}
do local _ <close> = jax.set_mesh(auto_mesh)
  local x = jnp.array({{3.}})

  local z = jax.shard_map(function() return x end, {in_specs = {}, out_specs = P('i', 'j')})()
  print(z)  -- prints the same as jnp.tile(x, (4, 2))
  tiles[1] = {tostring(z), tostring(jnp.tile(x, {4, 2})), z}

  z = jax.shard_map(function() return x end, {in_specs = {}, out_specs = P('i', nil)})()
  print(z)  -- prints the same as jnp.tile(x, (4, 1)), or just jnp.tile(x, (4,))
  tiles[2] = {tostring(z), tostring(jnp.tile(x, {4, 1})), z}

  z = jax.shard_map(function() return x end, {in_specs = {}, out_specs = P(nil, nil)})()
  print(z)  -- prints the same as jnp.tile(x, (1, 1)), or just x
  tiles[3] = {tostring(z), tostring(x), z}
  expect(jax.get_mesh(), tostring(auto_mesh), "cell 12: the mesh inside the with block")
end
expect(jax.get_mesh(), tostring(mesh), "cell 12: the mesh after the with block")
for k, t in ipairs(tiles) do expect(t[1], t[2], "cell 12 z " .. k) end
expect(tiles[1][1], "Array([[3., 3.],\n       [3., 3.],\n       [3., 3.],\n       [3., 3.]], "
                    .. "dtype=float32)", "cell 12 z 1 as printed")
expect(jax.typeof(tiles[1][3]), "f32[4,2]", "cell 12 z 1")  -- (4 * 1, 2 * 1); Auto axes
expect(jax.typeof(tiles[2][3]), "f32[4,1]", "cell 12 z 2")
expect(jax.typeof(tiles[3][3]), "f32[1,1]", "cell 12 z 3")

-- cell 13: psum of int32 blocks. The tutorial prints y3.shape, (12, 6); the values are checked
-- too: row r of y3 is the sum of row r's two column blocks.
local f3 = jax.shard_map({in_specs = P('i', 'j'), out_specs = P('i', nil)})(function(x_block)
  return jax.lax.psum(x_block, 'j')
end)
x = jax.device_put(jnp.arange(12 * 12):reshape(12, 12), P('i', 'j'))
local y3 = f3(x)
assert(y3.shape[1] == 12 and y3.shape[2] == 6, "cell 13: print(y3.shape), (12, 6)")
local y3v = y3:totable()
assert(y3v[1][1] == 0 + 6 and y3v[12][6] == (11 * 12 + 5) + (11 * 12 + 11), "cell 13 values")

-- cell 14
local f4 = jax.shard_map({in_specs = P('i', 'j'), out_specs = P(nil, 'j')})(function(x_block)
  return jax.lax.psum(x_block, 'i')
end)
x = jax.device_put(jnp.arange(12 * 12):reshape(12, 12), P('i', 'j'))
local y4 = f4(x)
assert(y4.shape[1] == 3 and y4.shape[2] == 12, "cell 14: print(y4.shape)  # (3,12)")

local f5 = jax.shard_map({in_specs = P('i', 'j'), out_specs = P(nil, nil)})(function(x_block)
  return jax.lax.psum(x_block, {'i', 'j'})
end)
local y5 = f5(x)
assert(y5.shape[1] == 3 and y5.shape[2] == 6, "cell 14: print(y5.shape)  # (3,6)")
-- y5[0, 0] sums x[3a, 6b] = 36a + 6b over the 8 blocks (a < 4, b < 2): 2 * 36 * 6 + 4 * 6
assert(y5:totable()[1][1] == 2 * 36 * 6 + 4 * 6, "cell 14 y5 values")

-- cell 15: called outside jit, shard_map runs eagerly (as JAX's): `print(x)` shows each
-- device's block as JAX prints it.
mesh = jax.make_mesh({2}, {'i'})
jax.set_mesh(mesh)

local f = jax.shard_map({in_specs = P('i'), out_specs = P('i')})(function(x)
  print(x)
  printed = tostring(x)
  return 2 * x
end)

x = jax.device_put(jnp.arange(6.), P('i'))
same(f(x):totable(), {0, 2, 4, 6, 8, 10}, "cell 15")
expect(printed, "On TFRT_CPU_0 at mesh coordinates (i,) = (0,):\n[0. 1. 2.]\n\n"
                .. "On TFRT_CPU_1 at mesh coordinates (i,) = (1,):\n[3. 4. 5.]\n", "cell 15 print(x)")

-- cell 16
f = jax.shard_map({in_specs = P(), out_specs = P()})(function(x)
  printed = tostring(x)
  return 2 * x
end)

x = jnp.arange(6.)
same(f(x):totable(), {0, 2, 4, 6, 8, 10}, "cell 16")
expect(printed, "On TFRT_CPU_0 at mesh coordinates (i,) = (0,):\n[0. 1. 2. 3. 4. 5.]\n\n"
                .. "On TFRT_CPU_1 at mesh coordinates (i,) = (1,):\n[0. 1. 2. 3. 4. 5.]\n",
       "cell 16 print(x)")
-- inside jit the body is traced: print shows the tracer (JAX's too)
printed = nil
same(jax.jit(f)(x):totable(), {0, 2, 4, 6, 8, 10}, "cell 16 jitted")
assert(printed:find("Traced<f32[6]>", 1, true), "cell 16 jitted: " .. printed)

-- cell 17: psum over i of [0 1 2] and [3 4 5].
f = jax.shard_map({in_specs = P('i'), out_specs = P()})(function(x)
  local y = jax.lax.psum(x, 'i')
  printed = tostring(y)
  return y
end)

x = jax.device_put(jnp.arange(6.), P('i'))
same(f(x):totable(), {3, 5, 7}, "cell 17")
expect(printed, "On TFRT_CPU_0 at mesh coordinates (i,) = (0,):\n[3. 5. 7.]\n\n"
                .. "On TFRT_CPU_1 at mesh coordinates (i,) = (1,):\n[3. 5. 7.]\n", "cell 17 print(y)")

-- cell 18: the types carry their varying manual axes (JAX's vma).
local types = {}
f = jax.shard_map({in_specs = P('i'), out_specs = P()})(function(x)
  types[1] = jax.typeof(x)  -- f32[3]{V:i}
  local y = jax.lax.psum(x, 'i')
  types[2] = jax.typeof(y)  -- f32[3]
  return y
end)
x = jax.device_put(jnp.arange(6.), P('i'))
f(x)
expect(types[1], "f32[3]{V:i}", "cell 18 x")
expect(types[2], "f32[3]", "cell 18 y")

-- cell 19: `assert jax.typeof(y).manual_axis_type.varying == {'i'}` compares sets; the Lua
-- table {'i'} compares equal to the type's set (its __eq).
mesh = jax.make_mesh({4, 2}, {'i', 'j'})
jax.set_mesh(mesh)

f = jax.shard_map({in_specs = P('i', 'j'), out_specs = P('i')})(function(x)
  types[1] = jax.typeof(x)  -- f32[2,2]{V:(i,j)}
  local y = jax.lax.psum(x, 'j')
  assert(jax.typeof(y).manual_axis_type.varying == {'i'})
  types[2] = jax.typeof(y)  -- f32[2,2]{V:i}
  return y
end)

x = jax.device_put(jnp.arange(8 * 4.):reshape(8, 4), P('i', 'j'))
f(x)
expect(types[1], "f32[2,2]{V:(i,j)}", "cell 19 x")
expect(types[2], "f32[2,2]{V:i}", "cell 19 y")
assert(not (jax.typeof(x).manual_axis_type.varying == {'i'}), "cell 19: the set compare can fail")
assert(types[2].vma == {'i'}, "cell 19 at 019c6d6: jax.typeof(y).vma == {'i'}")
same(f(x):totable()[1], {0 + 2, 1 + 3}, "cell 19 values")  -- row 0: x[0, 0:2] + x[0, 2:4]

-- cell 20: check_vma's error: out_specs=P() for a result varying over i. (JAX names the
-- function '<lambda>'; a Lua function has no name, so it is shard_map's.)
mesh = jax.make_mesh({2}, {'i'})
jax.set_mesh(mesh)

x = jax.device_put(jnp.arange(6.), P('i'))
local ok, e = pcall(function()
  local y = jax.shard_map(function(x) return x end, {in_specs = P('i'), out_specs = P()})(x)
  return y
end)
print(e)
assert(not ok and tostring(e):find("was given out_specs which require replication which can't "
                                   .. "be statically inferred given the mesh", 1, true)
         and tostring(e):find("The mesh given has shape (2,) with corresponding axis names "
                              .. "('i',).", 1, true)
         and tostring(e):find("replicated across mesh axis 'i', but could not infer replication "
                              .. "over any axes", 1, true), "cell 20: " .. tostring(e))

-- cell 21: out_specs=None is out_specs left out (nil); the tutorial's comment says f32[6]{i},
-- JAX at cec06d1 prints f32[6]{V:i} (core._vma_ur_str), as cells 18 and 19 show.
f = jax.shard_map({in_specs = P(), out_specs = nil})(function(x)
  types[1] = jax.typeof(x)  -- f32[6]
  local y = jax.lax.pcast(x, 'i', {to = 'varying'})
  types[2] = jax.typeof(y)  -- f32[6]{i}
end)

x = jnp.arange(6.)
f(x)
expect(types[1], "f32[6]", "cell 21 x")
expect(types[2], "f32[6]{V:i}", "cell 21 y")

-- cell 22: jax.make_jaxpr's text: the engine's ops (mul is JAX's name too), the types with their
-- varying manual axes, and the pvary JAX inserts to make y vary like x.
f = jax.shard_map({in_specs = {P('i'), P()}, out_specs = P('i')})(function(x, y)
  return x * y
end)

x = jax.device_put(jnp.arange(6.), P('i'))
y = jnp.arange(3.)
local jaxpr = tostring(jax.make_jaxpr(f)(x, y))
print(jaxpr)
for _, line in ipairs({"{ lambda ; a:f32[6] b:f32[3]. let", "c:f32[6] = shard_map[",
                       "in_specs=(P('i'), P())", "jaxpr={ lambda ; d:f32[3]{V:i} e:f32[3]. let",
                       "f:f32[3]{V:i} = pvary[axes=('i',)] e", "g:f32[3]{V:i} = mul d f",
                       "in (g,) }", "out_specs=(P('i'),)", "] a b", "in (c,) }"}) do
  assert(jaxpr:find(line, 1, true), "cell 22: no " .. line .. " in\n" .. jaxpr)
end
same(f(x, y):totable(), {0, 1, 4, 0, 4, 10}, "cell 22 f(x, y)")

-- cell 23: scan's carry must keep its type, varying manual axes included. `(x_, y_), _ =
-- jax.lax.scan(...)` unpacks the returned carry with table.unpack; xs=() is {}.
mesh = jax.make_mesh({2}, {'i'})
jax.set_mesh(mesh)

f = jax.shard_map({in_specs = {P('i'), P()}, out_specs = P('i')})(function(x, y)
  local function body(carry, _)
    local c1, c2 = table.unpack(carry)
    return {c2, c1}, {}  -- swap the carry
  end
  local carry, _ = jax.lax.scan(body, {x, y}, {}, {length = 2})
  local x_, y_ = table.unpack(carry)
  return x_, y_
end)

x = jnp.arange(6.)
y = jnp.arange(3.)

ok, e = pcall(function() return f(x, y) end)
print(e)
local want23 = "scan body function carry input and carry output must have equal types, but they "
  .. "differ:\n\n  * the input carry component carry[0] has type float32[3]{V:i} but the "
  .. "corresponding output carry component has type float32[3], so the manual axis types do not "
  .. "match;\n  * the input carry component carry[1] has type float32[3] but the corresponding "
  .. "output carry component has type float32[3]{V:i}, so the manual axis types do not match.\n\n"
  .. "This might be fixed by applying `jax.lax.pcast(..., ('i',), to='varying')`, to the initial "
  .. "carry value corresponding to the input carry component carry[1].\nSee "
  .. "https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for more information.\n\n"
  .. "Revise the function so that all output types match the corresponding input types."
assert(not ok and tostring(e):find(want23, 1, true), "cell 23: " .. tostring(e))

-- cell 24: with y cast to varying the swap type-checks; after two swaps each is itself again.
mesh = jax.make_mesh({2}, {'i'})
jax.set_mesh(mesh)

f = jax.shard_map({in_specs = {P('i'), P()}, out_specs = P('i')})(function(x, y)
  local function body(carry, _)
    local c1, c2 = table.unpack(carry)
    return {c2, c1}, {}  -- swap the carry
  end

  y = jax.lax.pcast(y, 'i', {to = 'varying'})  -- apply pcast to fix the error
  local carry, _ = jax.lax.scan(body, {x, y}, {}, {length = 2})
  local x_, y_ = table.unpack(carry)
  return x_, y_
end)

x = jax.device_put(jnp.arange(6.), P('i'))
y = jnp.arange(3.)

local x_, y_ = f(x, y)
same(x_:totable(), {0, 1, 2, 3, 4, 5}, "cell 24 x_")
same(y_:totable(), {0, 1, 2, 0, 1, 2}, "cell 24 y_")  -- y's copy on each device, concatenated
expect(jax.typeof(y_), "f32[6@i]", "cell 24 y_")  -- make_mesh: Explicit
local jx_, jy_ = jax.jit(f)(x, y)  -- traced: the scan unrolled into the one program
same(jy_:totable(), {0, 1, 2, 0, 1, 2}, "cell 24 jitted y_")

t.report("tutorial shard_map (cells 1-24): cells that do not run (fully) as written:")
