-- tests/frontend/mesh_context_test.lua: `with jax.set_mesh(m):` as a Lua to-be-closed variable,
-- numpy's np.array of devices for Mesh, os.environ["XLA_FLAGS"], sl.make_jaxpr, and shard_map
-- run eagerly outside sl.jit (engine/frontend/eager_manual.h; docs/frontend.md).
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")
local jnp, P = sl.numpy, sl.P

-- os.environ: XLA_FLAGS' device count applies until the devices are first listed (CTest runs
-- this with neither SHARDLAB_LOCAL_DEVICES nor XLA_FLAGS set).
h.expect_error(function() os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=0" end,
               "XLA_FLAGS has --xla_force_host_platform_device_count=0, which is not a device count")
os.environ["XLA_FLAGS"] = "--xla_foo --xla_force_host_platform_device_count=4"
assert(os.environ["XLA_FLAGS"] == "--xla_foo --xla_force_host_platform_device_count=4")
assert(#sl.devices() == 4, "XLA_FLAGS' count: " .. #sl.devices())
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"  -- too late: ignored, as JAX
assert(#sl.devices() == 4 and #sl.local_devices() == 4, "the count is fixed once listed")
os.environ["SHARDLAB_TEST_VAR"] = "x"
assert(os.getenv("SHARDLAB_TEST_VAR") == "x")
os.environ["SHARDLAB_TEST_VAR"] = nil
assert(os.getenv("SHARDLAB_TEST_VAR") == nil and os.environ.SHARDLAB_TEST_VAR == nil)
h.expect_error(function() os.environ.X = 3 end, "os.environ")

-- set_mesh: a global setter whose result, closed, restores the mesh before it
local m1 = sl.make_mesh({2}, {"a"})
local m2 = sl.make_mesh({2, 2}, {"x", "y"})
sl.set_mesh(m1)
do
  local _ <close> = sl.set_mesh(m2)
  assert(tostring(sl.get_mesh()) == tostring(m2))
  do
    local _ <close> = sl.sharding.use_mesh(m1)  -- use_mesh without a function: the same
    assert(tostring(sl.get_mesh()) == tostring(m1))
  end
  assert(tostring(sl.get_mesh()) == tostring(m2), "inner with restored m2")
end
assert(tostring(sl.get_mesh()) == tostring(m1), "outer with restored m1")
-- restored also when the block raises
local ok = pcall(function()
  local _ <close> = sl.set_mesh(m2)
  error("boom")
end)
assert(not ok and tostring(sl.get_mesh()) == tostring(m1), "restored after an error")
assert(tostring(sl.set_mesh(m1)) == "set_mesh(" .. tostring(m1) .. ")")
do local _ <close> = sl.set_mesh(nil) end  -- nil: one device inside, m1 again after
assert(tostring(sl.get_mesh()) == tostring(m1))
local ctx = sl.set_mesh(m2)
sl.set_mesh(m1)
local close_meta = getmetatable(ctx)
assert(close_meta == "set_mesh", tostring(close_meta))
sl.set_mesh(nil)

-- np.array of devices: numpy's object array, :reshape, .shape; Mesh takes it
local devs = jnp.array({table.unpack(sl.devices(), 1, 4)})
assert(tostring(devs) == "array([CpuDevice(id=0), CpuDevice(id=1), CpuDevice(id=2), CpuDevice(id=3)], dtype=object)")
local grid = devs:reshape(2, 2)
assert(grid.ndim == 2 and grid.shape[1] == 2 and grid.shape[2] == 2 and grid.size == 4)
assert(tostring(grid) == "array([[CpuDevice(id=0), CpuDevice(id=1)],\n       [CpuDevice(id=2), CpuDevice(id=3)]], dtype=object)", tostring(grid))
assert(tostring(sl.sharding.Mesh(grid, {"i", "j"})) == "Mesh('i': 2, 'j': 2, axis_types=(Auto, Auto))")
assert(tostring(sl.sharding.Mesh(devs:reshape(-1, 1), {"i", "j"})) == "Mesh('i': 4, 'j': 1, axis_types=(Auto, Auto))")
h.expect_error(function() devs:reshape(3, 2) end, "cannot reshape array of size 4 into shape (3, 2)")
h.expect_error(function() jnp.array({sl.devices()[1], {sl.devices()[2]}}) end, "ragged")

-- make_jaxpr of a jitted-style function: the engine's ops, no shard_map equation
local text = tostring(sl.make_jaxpr(function(a, b) return jnp.tanh(a) * b end)(jnp.ones({3}), jnp.ones({3})))
assert(text:find("{ lambda ; a:f32[3] b:f32[3]. let", 1, true) and text:find("= tanh a", 1, true)
       and text:find("= mul c b", 1, true), text)
h.expect_error(function() sl.make_jaxpr(3) end, "make_jaxpr")
-- a closed-over array is a constvar, named first as JAX names them
local k = jnp.ones({1, 1})
text = sl.make_jaxpr(function(a) return a * k end)(jnp.ones({1, 1}))
assert(text:find("{ lambda a:f32[1,1]; b:f32[1,1]. let\n    c:f32[1,1] = mul b a\n  in (c,) }", 1, true), text)

-- eager shard_map: per-device values while the body runs; jit compiles it as one program
local mesh = sl.make_mesh({2, 2}, {"x", "y"})
sl.set_mesh(mesh)
local seen = {}
local f = sl.shard_map(function(b)
  seen.shape, seen.type = b.shape, tostring(sl.typeof(b))
  local s = sl.lax.psum(b, "y")
  seen.s = tostring(sl.typeof(s))
  seen.idx = tostring(sl.lax.axis_index("x"))
  if not seen.total then  -- the eager call (sl.jit(f) below traces the body: no values)
    seen.total = sl.lax.psum(b, {"x", "y"}):totable()  -- invariant: its block (JAX's too)
    seen.err = select(2, pcall(function() return b:item() end))
  end
  return s * 2
end, {in_specs = P("x", "y"), out_specs = P("x", nil)})
local x = sl.device_put(jnp.arange(16.):reshape(4, 4), P("x", "y"))
local y = f(x)
assert(seen.shape[1] == 2 and seen.shape[2] == 2 and seen.type == "f32[2,2]{V:(x,y)}", seen.type)
assert(seen.s == "f32[2,2]{V:x}", seen.s)
assert(seen.idx == "On TFRT_CPU_0 at mesh coordinates (x, y,) = (0, 0):\n0\n\n"
       .. "On TFRT_CPU_1 at mesh coordinates (x, y,) = (0, 1):\n0\n\n"
       .. "On TFRT_CPU_2 at mesh coordinates (x, y,) = (1, 0):\n1\n\n"
       .. "On TFRT_CPU_3 at mesh coordinates (x, y,) = (1, 1):\n1\n", seen.idx)
assert(seen.total[1][1] == 0 + 2 + 8 + 10 and seen.total[2][2] == 5 + 7 + 13 + 15)
assert(tostring(seen.err):find("Array:item: this shard_map value varies over mesh axes (x, y): one "
                               .. "block per device", 1, true), tostring(seen.err))
local want = {{4, 8}, {20, 24}, {36, 40}, {52, 56}}  -- 2 (x[r, k] + x[r, k + 2])
for r = 1, 4 do for k = 1, 2 do assert(y:totable()[r][k] == want[r][k]) end end
assert(f:cache_info().compiles == 0, "eager: no program of f's own")
local fj = sl.jit(f)
assert(fj ~= f)
local yj = fj(x)
for r = 1, 4 do for k = 1, 2 do assert(yj:totable()[r][k] == want[r][k]) end end
assert(fj:cache_info().compiles == 1, "jit: one program")
assert(sl.jit(fj) == fj, "jit of the jitted shard_map: itself")
-- what an eager body cannot do, and values that escape it
h.expect_error(function()
  sl.shard_map(function(b) return sl.grad(function(v) return jnp.sum(v) end)(b) end,
               {in_specs = P("x", "y"), out_specs = P("x", "y")})(x)
end, "inside a shard_map called outside sl.jit (an eager shard_map) are not supported: wrap the shard_map in sl.jit")
local leaked
sl.shard_map(function(b) leaked = b; return b end, {in_specs = P("x", "y"), out_specs = P("x", "y")})(x)
h.expect_error(function() return leaked + 1 end, "Encountered an unexpected tracer")
-- a closed-over sharded array is the whole array on every device (invariant)
local whole = sl.shard_map(function() return x end, {in_specs = {}, out_specs = P()})()
assert(whole:totable()[4][4] == 15 and whole.shape[1] == 4)
sl.set_mesh(nil)
print("mesh_context_test ok")
