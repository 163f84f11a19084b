-- tests/frontend/tutorial_shard_map_collectives_test.lua: the code cells 25-52 of JAX's tutorial
-- "Manual parallelism with shard_map" (docs/notebooks/shard_map.md of jax-ml/jax at commit
-- cec06d1): the collectives tour ("Collectives tutorial": psum, all_gather, psum_scatter,
-- ppermute, all_to_all) and the "Example 1: all-gather on one side" / "Example 2: psum_scatter
-- the result" matmuls, translated as tutorial_shard_map_test.lua translates cells 1-24 (Python
-- syntax to Lua, `jnp.` as `sl.numpy.`, `jax.` as `sl.`, `a @ b` as `jnp.matmul(a, b)`: Lua has
-- no @ operator). The tutorial prints each FINAL RESULT; here each is checked. Its BEFORE/AFTER
-- prints inside the body show the tracer (shard_map is traced here, not run eagerly).
local jax, jnp = sl, sl.numpy
local lax = sl.lax
local t = dofile(arg[0]:match("^(.*)/") .. "/tutorial.lua")
local cannot, expect = t.cannot, t.expect
local P = jax.sharding.PartitionSpec
local NamedSharding = jax.sharding.NamedSharding
local Auto = jax.sharding.AxisType.Auto

local function equal(got, want, what)  -- exact, nested (integer results)
  if type(want) == "table" then
    assert(type(got) == "table" and #got == #want,
           string.format("%s: %d values where the tutorial has %d", what, #got, #want))
    for i = 1, #want do equal(got[i], want[i], what) end
    return
  end
  assert(got == want, string.format("%s: %s where the tutorial has %s", what, got, want))
end

-- `jax.devices()[:4]` is written `{table.unpack(jax.devices(), 1, 4)}` (Python's slice); the
-- test runs with SHARDLAB_LOCAL_DEVICES=8 (tests/frontend/CMakeLists.txt), cell 1's
-- XLA_FLAGS device count. Mesh's axes are Auto (its default; make_mesh's are Explicit).
local Mesh = jax.sharding.Mesh
local function first(n) return {table.unpack(jax.devices(), 1, n)} end
assert(#jax.devices() == 8, "run with SHARDLAB_LOCAL_DEVICES=8 (cell 1's device count)")

-- cell 25: imports. cell 26
local mesh1d = Mesh(first(4), {'i'})
expect(mesh1d, "Mesh('i': 4, axis_types=(Auto,))", "cell 26 mesh1d")
jax.set_mesh(mesh1d)

local printed = {}
local f1 = jax.shard_map({mesh = mesh1d, in_specs = P('i'), out_specs = P(nil)})(function(x_block)
  printed[#printed + 1] = tostring(x_block)  -- print('BEFORE:\n', x_block)
  local y_block = jax.lax.psum(x_block, 'i')
  return y_block
end)

-- cell 27
local x = jnp.array({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2})
expect(jax.typeof(x), "i32[16]", "cell 27 x")
local y = f1(x)
equal(y:totable(), {22, 20, 12, 17}, "cell 27 FINAL RESULT")
expect(jax.typeof(y), "i32[4]", "cell 27 y")
assert(printed[1]:find("Traced<i32[4]>", 1, true), "cell 26 BEFORE: " .. printed[1])
cannot(26, "print inside shard_map shows the tracer, not each device's block")

-- cell 28: np.array(jax.devices()[:4]).reshape(2, 2) is numpy's; the nested list it makes is
-- written out.
local d = first(4)
local mesh2d = Mesh({{d[1], d[2]}, {d[3], d[4]}}, {'i', 'j'})
cannot(28, "numpy's np.array(jax.devices()[:4]).reshape(2, 2) (the nested list written out)")
jax.set_mesh(mesh2d)

local f2 = jax.shard_map({mesh = mesh2d, in_specs = P('i', 'j'), out_specs = P(nil, 'j')})(
  function(x_block)
    return jax.lax.psum(x_block, 'i')
  end)

y = f2(jnp.arange(16):reshape(4, 4))
equal(y:totable(), {{8, 10, 12, 14}, {16, 18, 20, 22}}, "cell 28 FINAL RESULT")

-- cell 29
local f3 = jax.shard_map({mesh = mesh2d, in_specs = P('i', 'j'), out_specs = P(nil, nil)})(
  function(x_block)
    return jax.lax.psum(x_block, {'i', 'j'})
  end)

y = f3(jnp.arange(16):reshape(4, 4))
equal(y:totable(), {{20, 24}, {36, 40}}, "cell 29 FINAL RESULT")

-- cell 30
jax.set_mesh(mesh1d)

local f4 = jax.shard_map({mesh = mesh1d, in_specs = P('i'), out_specs = P('i')})(function(x_block)
  return jax.lax.all_gather(x_block, 'i', {tiled = true})
end)

x = jnp.array({3, 9, 5, 2})
y = f4(x)
equal(y:totable(), {3, 9, 5, 2, 3, 9, 5, 2, 3, 9, 5, 2, 3, 9, 5, 2}, "cell 30 FINAL RESULT")

-- cell 31
local f5 = jax.shard_map({mesh = mesh1d, in_specs = P('i'), out_specs = P('i')})(function(x_block)
  return jax.lax.all_gather(x_block, 'i', {tiled = false})
end)

y = f5(x)
local col = {}
for r = 1, 4 do
  for _, v in ipairs({3, 9, 5, 2}) do col[#col + 1] = {v} end
end
equal(y:totable(), col, "cell 31 FINAL RESULT")

-- cell 32
local f6 = jax.shard_map({in_specs = P('i'), out_specs = P('i')})(function(x_block)
  return jax.lax.psum_scatter(x_block, 'i', {tiled = true})
end)

x = jnp.array({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2})
y = f6(x)
equal(y:totable(), {22, 20, 12, 17}, "cell 32 FINAL RESULT")

-- cell 33
local sizes = {}
local f7 = jax.shard_map({in_specs = P('i'), out_specs = P('i')})(function(x_block)
  local sz = jax.lax.axis_size('i')
  sizes[#sizes + 1] = sz
  local perm = {}
  for i = 0, sz - 1 do perm[#perm + 1] = {i, (i + 1) % sz} end
  return jax.lax.ppermute(x_block, 'i', perm)
end)

y = f7(jnp.arange(8))
equal(y:totable(), {6, 7, 0, 1, 2, 3, 4, 5}, "cell 33 FINAL RESULT")
assert(sizes[1] == 4 and math.type(sizes[1]) == "integer", "cell 33 axis_size")

-- cells 34-35: psum_scatter written with ppermute indexes x with the traced axis_index
-- (x[(idx + i) % size], x.at[...].add(update)).
cannot(34, "indexing with a traced index (x[(idx + i) % size]), x.at[...].add, % of an int32 "
           .. "Array")
cannot(35, "the psum_scatter of cell 34")

-- cell 36
local f9 = jax.shard_map({mesh = mesh1d, in_specs = P('i'), out_specs = P('i')})(function(x_block)
  return jax.lax.all_to_all(x_block, 'i', 0, 0, {tiled = true})
end)

x = jnp.array({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2})
y = f9(x)
equal(y:totable(), {3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2}, "cell 36 FINAL RESULT")

-- cell 37: imports. cell 38
local mesh = Mesh(first(4), {'i'})
jax.set_mesh(mesh)

local function device_put(x, pspec)
  return jax.device_put(x, NamedSharding(mesh, pspec))
end

-- cell 39
local lhs_spec = P('i', nil)
local lhs = device_put(jax.random.normal(jax.random.key(0), {8, 8}), lhs_spec)

-- cell 40
local rhs_spec = P('i', nil)
local rhs = device_put(jax.random.normal(jax.random.key(1), {8, 4}), rhs_spec)

-- cell 41
local matmul_allgather = jax.jit(
  jax.shard_map({in_specs = {lhs_spec, rhs_spec}, out_specs = rhs_spec})(
    function(lhs_block, rhs_block)
      local rhs = jax.lax.all_gather(rhs_block, 'i', {tiled = true})
      return jnp.matmul(lhs_block, rhs)
    end))

-- cell 42: prints True
local out = matmul_allgather(lhs, rhs)
expect(jnp.allclose(out, jnp.matmul(lhs, rhs), {atol = 1e-3, rtol = 1e-3}), "true", "cell 42")
assert(not jnp.allclose(out, jnp.matmul(lhs, rhs) + 1), "cell 42: allclose can say false")

-- cells 43-46: the overlapped versions slice with a traced start.
cannot(43, "lax.dynamic_slice_in_dim with a traced start (axis_index), % of an int32 Array")
cannot(44, "matmul_allgather_overlapped (cell 43)")
cannot(45, "lax.dynamic_slice_in_dim with a traced start, jnp.pad with pairs")
cannot(46, "matmul_allgather_overlapped_bidi (cell 45)")

-- cell 47
lhs_spec = P(nil, 'i')
lhs = device_put(lhs, lhs_spec)

rhs_spec = P('i', nil)
rhs = device_put(rhs, rhs_spec)

-- cell 48: prints True
local matmul_psumscatter = jax.shard_map({in_specs = {lhs_spec, rhs_spec}, out_specs = rhs_spec})(
  function(lhs_block, rhs_block)
    local out_summand = jnp.matmul(lhs_block, rhs_block)
    return jax.lax.psum_scatter(out_summand, 'i', {tiled = true})
  end)

out = matmul_psumscatter(lhs, rhs)
expect(jnp.allclose(out, jnp.matmul(lhs, rhs), {atol = 1e-3, rtol = 1e-3}), "true", "cell 48")

-- cells 49-52: the overlapped versions index with the traced axis_index.
cannot(49, "indexing with a traced index (lhs_block[(idx + 1) % size]), % of an int32 Array")
cannot(50, "matmul_psumscatter_overlapped (cell 49)")
cannot(51, "lax.dynamic_slice_in_dim with a traced start")
cannot(52, "matmul_psumscatter_overlapped_bidi (cell 51)")

t.report("tutorial shard_map (cells 25-52): cells that do not run (fully) as written:")
