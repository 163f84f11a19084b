-- tests/frontend/tutorial_shard_map_collectives_test.lua: the code cells 25-52 of JAX's tutorial
-- "Manual parallelism with shard_map" (docs/notebooks/shard_map.md of jax-ml/jax at commit
-- cec06d1): the collectives tour ("Collectives tutorial": psum, all_gather, psum_scatter,
-- ppermute, all_to_all) and the "Example 1: all-gather on one side" / "Example 2: psum_scatter
-- the result" matmuls, translated as tutorial_shard_map_test.lua translates cells 1-24 (Python
-- syntax to Lua, `jnp.` as `sl.numpy.`, `jax.` as `sl.`, `a @ b` as `jnp.matmul(a, b)`: Lua has
-- no @ operator). The tutorial prints each FINAL RESULT; here each is checked, and the
-- BEFORE/AFTER prints of cells 26-28 (shard_map called outside jit runs eagerly, as JAX's).
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

-- `jax.devices()[:4]` is written `{table.unpack(jax.devices(), 1, 4)}` (Python's slice). Cell 1
-- of the tutorial sets XLA_FLAGS for 8 devices; so does this test, before listing the devices
-- (CTest runs it with SHARDLAB_LOCAL_DEVICES and XLA_FLAGS empty). Mesh's axes are Auto (its
-- default; make_mesh's are Explicit).
os.environ["XLA_FLAGS"] = '--xla_force_host_platform_device_count=8' -- Use 8 CPU devices
local Mesh = jax.sharding.Mesh
local np = sl.numpy  -- numpy's np.array of devices: sl.numpy.array of them
local function first(n) return {table.unpack(jax.devices(), 1, n)} end
assert(#jax.devices() == 8, "cell 1's XLA_FLAGS: 8 devices")

-- cell 25: imports. cell 26
local mesh1d = Mesh(first(4), {'i'})
expect(mesh1d, "Mesh('i': 4, axis_types=(Auto,))", "cell 26 mesh1d")
jax.set_mesh(mesh1d)

local printed = {}
local f1 = jax.shard_map({mesh = mesh1d, in_specs = P('i'), out_specs = P(nil)})(function(x_block)
  print('BEFORE:\n', x_block)
  printed[#printed + 1] = tostring(x_block)
  local y_block = jax.lax.psum(x_block, 'i')
  print('AFTER:\n', y_block)
  printed[#printed + 1] = tostring(y_block)
  return y_block
end)

-- cell 27: f1 runs eagerly (called outside jit): the prints show each device's block.
local x = jnp.array({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2})
expect(jax.typeof(x), "i32[16]", "cell 27 x")
local y = f1(x)
equal(y:totable(), {22, 20, 12, 17}, "cell 27 FINAL RESULT")
expect(jax.typeof(y), "i32[4]", "cell 27 y")
local function blocks(rows)  -- JAX's ShardMapTracer text, one block per device of mesh1d
  local parts = {}
  for d, row in ipairs(rows) do
    parts[d] = string.format("On TFRT_CPU_%d at mesh coordinates (i,) = (%d,):\n%s\n", d - 1, d - 1, row)
  end
  return table.concat(parts, "\n")
end
expect(printed[1], blocks({"[3 1 4 1]", "[5 9 2 6]", "[5 3 5 8]", "[9 7 1 2]"}), "cell 26 BEFORE")
expect(printed[2], blocks({"[22 20 12 17]", "[22 20 12 17]", "[22 20 12 17]", "[22 20 12 17]"}),
       "cell 26 AFTER")

-- cell 28: np.array(jax.devices()[:4]).reshape(2, 2): numpy's object array of devices.
local mesh2d = Mesh(np.array(first(4)):reshape(2, 2), {'i', 'j'})
expect(mesh2d, "Mesh('i': 2, 'j': 2, axis_types=(Auto, Auto))", "cell 28 mesh2d")
jax.set_mesh(mesh2d)

printed = {}
local f2 = jax.shard_map({mesh = mesh2d, in_specs = P('i', 'j'), out_specs = P(nil, 'j')})(
  function(x_block)
    print('BEFORE:\n', x_block)
    printed[#printed + 1] = tostring(x_block)
    local y_block = jax.lax.psum(x_block, 'i')
    print('AFTER:\n', y_block)
    printed[#printed + 1] = tostring(y_block)
    return y_block
  end)

y = f2(jnp.arange(16):reshape(4, 4))
print('FINAL RESULT:\n', y)
equal(y:totable(), {{8, 10, 12, 14}, {16, 18, 20, 22}}, "cell 28 FINAL RESULT")
local function blocks2d(rows)  -- the blocks of mesh2d's devices, (i, j) row-major
  local parts = {}
  for d, row in ipairs(rows) do
    parts[d] = string.format("On TFRT_CPU_%d at mesh coordinates (i, j,) = (%d, %d):\n%s\n", d - 1,
                             (d - 1) // 2, (d - 1) % 2, row)
  end
  return table.concat(parts, "\n")
end
expect(printed[1], blocks2d({"[[0 1]\n [4 5]]", "[[2 3]\n [6 7]]", "[[ 8  9]\n [12 13]]",
                            "[[10 11]\n [14 15]]"}), "cell 28 BEFORE")
expect(printed[2], blocks2d({"[[ 8 10]\n [16 18]]", "[[12 14]\n [20 22]]", "[[ 8 10]\n [16 18]]",
                            "[[12 14]\n [20 22]]"}), "cell 28 AFTER")

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

-- cell 34: psum_scatter written with ppermute: x[k] with a traced k (a dynamic slice),
-- x.at[k]:add(update) (Python's x.at[k].add(update): Lua calls methods with ':'), % of the
-- traced int32 axis_index (np.remainder); partial(jax.lax.ppermute, ...) is a closure and
-- `*x.shape[1:]` is table.unpack(x.shape, 2) (Lua's shape is 1-based).
local function psum_scatter(x, axis_name, opts)
  local tiled = opts ~= nil and opts.tiled
  local size = jax.lax.axis_size(axis_name)
  local idx = jax.lax.axis_index(axis_name)  -- function instance index along axis_name
  if tiled then
    x = x:reshape(size, -1, table.unpack(x.shape, 2))  -- split leading axis
  end
  local perm = {}
  for i = 0, size - 1 do perm[#perm + 1] = {i, (i - 1) % size} end
  local function shift(v) return jax.lax.ppermute(v, axis_name, perm) end
  for i = 1, size - 1 do
    local update = shift(x[(idx + i) % size])
    x = x.at[(idx + i + 1) % size]:add(update)
  end
  return x[idx]
end

-- cell 35
local f8 = jax.shard_map({in_specs = P('i'), out_specs = P('i')})(function(x_block)
  local y_block = psum_scatter(x_block, 'i', {tiled = true})
  return y_block
end)

x = jnp.array({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2})
y = f8(x)
equal(y:totable(), {22, 20, 12, 17}, "cell 35 FINAL RESULT")
assert(y.dtype == "int32", "cell 35: " .. y.dtype)

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

-- cell 43: the rhs blocks go round the ring while each device multiplies its lhs columns
-- sliced at a traced start (lax.dynamic_slice_in_dim with axis_index); `x += y` is x = x + y.
local matmul_allgather_overlapped = jax.jit(
  jax.shard_map({in_specs = {lhs_spec, rhs_spec}, out_specs = rhs_spec})(
    function(lhs_block, rhs_block)
      local size = jax.lax.axis_size('i')
      local idx = jax.lax.axis_index('i')
      local perm = {}
      for i = 0, size - 1 do perm[#perm + 1] = {i, (i + 1) % size} end
      local function shift(v) return jax.lax.ppermute(v, 'i', perm) end

      local B = lhs_block.shape[2] // size
      local lhs_blocks = function(i) return lax.dynamic_slice_in_dim(lhs_block, i * B, B, 1) end

      local out_block = jnp.matmul(lhs_blocks(idx), rhs_block)
      for i = 1, size - 1 do
        rhs_block = shift(rhs_block)
        out_block = out_block + jnp.matmul(lhs_blocks((idx - i) % size), rhs_block)
      end
      return out_block
    end))

-- cell 44: prints True
out = matmul_allgather_overlapped(lhs, rhs)
expect(jnp.allclose(out, jnp.matmul(lhs, rhs), {atol = 1e-3, rtol = 1e-3}), "true", "cell 44")

-- cell 45: both directions, the half blocks padded onto complementary halves (jnp.pad with
-- pairs); `a, b = jnp.split(...)` is table.unpack of the list.
local matmul_allgather_overlapped_bidi = jax.jit(
  jax.shard_map({in_specs = {lhs_spec, rhs_spec}, out_specs = rhs_spec})(
    function(lhs_block, rhs_block)
      local size = jax.lax.axis_size('i')
      local idx = jax.lax.axis_index('i')
      local perm_up, perm_dn = {}, {}
      for i = 0, size - 1 do perm_up[#perm_up + 1] = {i, (i + 1) % size} end
      for i = 0, size - 1 do perm_dn[#perm_dn + 1] = {i, (i - 1) % size} end
      local function shift_up(v) return jax.lax.ppermute(v, 'i', perm_up) end
      local function shift_dn(v) return jax.lax.ppermute(v, 'i', perm_dn) end

      local B = lhs_block.shape[2] // size // 2  -- half-size blocks
      local lhs_blocks = function(i, hi)
        return lax.dynamic_slice_in_dim(lhs_block, (2 * i + hi) * B, B, 1)
      end

      local function block_matmul(rhs_lo, rhs_hi, i_lo, i_hi)
        local lhs_lo = jnp.pad(lhs_blocks(i_lo, 0), {{0, 0}, {0, B}})
        local lhs_hi = jnp.pad(lhs_blocks(i_hi, 1), {{0, 0}, {B, 0}})
        rhs_lo = jnp.pad(rhs_lo, {{0, B}, {0, 0}})
        rhs_hi = jnp.pad(rhs_hi, {{B, 0}, {0, 0}})
        return jnp.matmul(lhs_lo + lhs_hi, rhs_lo + rhs_hi)
      end

      local rhs_block_lo, rhs_block_hi = table.unpack(jnp.split(rhs_block, 2, {axis = 0}))
      local out_block = block_matmul(rhs_block_lo, rhs_block_hi, idx, idx)
      for i = 1, size - 1 do
        rhs_block_lo = shift_up(rhs_block_lo)
        rhs_block_hi = shift_dn(rhs_block_hi)
        out_block = out_block + block_matmul(rhs_block_lo, rhs_block_hi,
                                             (idx - i) % size, (idx + i) % size)
      end
      return out_block
    end))

-- cell 46: prints True
out = matmul_allgather_overlapped_bidi(lhs, rhs)
expect(jnp.allclose(out, jnp.matmul(lhs, rhs), {atol = 1e-3, rtol = 1e-3}), "true", "cell 46")

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

-- cell 49: the partial sums go round the ring, each device adding its product of the lhs
-- block picked by the traced index (lhs_block[(idx + 1) % size]).
local matmul_psumscatter_overlapped = jax.shard_map(
  {in_specs = {lhs_spec, rhs_spec}, out_specs = rhs_spec})(
  function(lhs_block, rhs_block)
    local size = jax.lax.axis_size('i')
    local idx = jax.lax.axis_index('i')
    local perm = {}
    for i = 0, size - 1 do perm[#perm + 1] = {i, (i - 1) % size} end
    local function shift(v) return jax.lax.ppermute(v, 'i', perm) end
    lhs_block = lhs_block:reshape(size, -1, lhs_block.shape[2])  -- split 1st axis

    local out_summand = jnp.matmul(lhs_block[(idx + 1) % size], rhs_block)
    for i = 1, size - 1 do
      out_summand = shift(out_summand)
      out_summand = out_summand + jnp.matmul(lhs_block[(idx + i + 1) % size], rhs_block)
    end
    return out_summand
  end)

-- cell 50: prints True
out = matmul_psumscatter_overlapped(lhs, rhs)
expect(jnp.allclose(out, jnp.matmul(lhs, rhs), {atol = 1e-3, rtol = 1e-3}), "true", "cell 50")

-- cell 51: both directions, half-size blocks sliced at traced starts along axis 0.
local matmul_psumscatter_overlapped_bidi = jax.shard_map(
  {in_specs = {lhs_spec, rhs_spec}, out_specs = rhs_spec})(
  function(lhs_block, rhs_block)
    local size = jax.lax.axis_size('i')
    local idx = jax.lax.axis_index('i')
    local perm_up, perm_dn = {}, {}
    for i = 0, size - 1 do perm_up[#perm_up + 1] = {i, (i + 1) % size} end
    for i = 0, size - 1 do perm_dn[#perm_dn + 1] = {i, (i - 1) % size} end
    local function shift_up(v) return jax.lax.ppermute(v, 'i', perm_up) end
    local function shift_dn(v) return jax.lax.ppermute(v, 'i', perm_dn) end

    local B = lhs_block.shape[1] // size // 2  -- half-size blocks
    local lhs_blocks = function(i, hi)
      return lax.dynamic_slice_in_dim(lhs_block, (2 * i + hi) * B, B, 0)
    end

    local out_summand_lo = jnp.matmul(lhs_blocks((idx - 1) % size, 0), rhs_block)
    local out_summand_hi = jnp.matmul(lhs_blocks((idx + 1) % size, 1), rhs_block)
    for i = 1, size - 1 do
      out_summand_lo = shift_up(out_summand_lo)
      out_summand_hi = shift_dn(out_summand_hi)
      out_summand_lo = out_summand_lo + jnp.matmul(lhs_blocks((idx - i - 1) % size, 0), rhs_block)
      out_summand_hi = out_summand_hi + jnp.matmul(lhs_blocks((idx + i + 1) % size, 1), rhs_block)
    end
    return jnp.concatenate({out_summand_lo, out_summand_hi})
  end)

-- cell 52: prints True
out = matmul_psumscatter_overlapped_bidi(lhs, rhs)
expect(jnp.allclose(out, jnp.matmul(lhs, rhs), {atol = 1e-3, rtol = 1e-3}), "true", "cell 52")

t.report("tutorial shard_map (cells 25-52): cells that do not run (fully) as written:")
