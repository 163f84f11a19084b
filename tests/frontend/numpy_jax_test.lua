-- tests/frontend/numpy_jax_test.lua: JAX's jax.numpy / jax.nn names of issue 29 (docs/frontend.md
-- "JAX's numpy names"): values against hand-computed results, the creation functions' dtype and
-- out_sharding, shardings the ops keep, gradients (take's goes through embed_lookup, which
-- sl.grad refused before has_vjp came from the VJP table), and bad input.
local np = sl.numpy

local function close(a, b, tol)
  if type(a) == "table" then
    assert(type(b) == "table" and #a == #b, "shapes differ: " .. #a .. " vs " .. tostring(#b))
    for i = 1, #a do close(a[i], b[i], tol) end
    return
  end
  tol = tol or 1e-6
  if b ~= b then assert(a ~= a, string.format("%.9g vs NaN", a)) return end
  assert(math.abs(a - b) <= tol * math.max(1, math.abs(b)), string.format("%.9g vs %.9g", a, b))
end
local function fails(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error matching " .. pattern)
  assert(tostring(err):find(pattern, 1, true), "error was: " .. tostring(err))
end

-- ---- creation: dtype and out_sharding ------------------------------------------------------
assert(np.zeros == sl.zeros and np.arange == sl.arange)  -- sl's names stay, as aliases
local m = sl.make_mesh({4, 2}, {"X", "Y"})
sl.set_mesh(m)
local z = np.zeros({8, 4}, {dtype = np.float32, out_sharding = sl.P("X", "Y")})
assert(tostring(sl.typeof(z)) == "f32[8@X,4@Y]", sl.typeof(z))
assert(tostring(sl.typeof(np.ones({8}, np.int32))) == "i32[8]")
assert(tostring(sl.typeof(np.full({4, 2}, 7, {dtype = "bfloat16", out_sharding = sl.P(nil, "Y")}))) ==
       "bf16[4,2@Y]")
close(np.full({2}, 7):totable(), {7, 7})
close(np.empty({3}):totable(), {0, 0, 0})
assert(tostring(sl.typeof(np.arange(8, {out_sharding = sl.P("X")}))) == "i32[8@X]")
close(np.linspace(0, 1, 5):totable(), {0, 0.25, 0.5, 0.75, 1})
close(np.linspace(0, 1, {num = 4, endpoint = false}):totable(), {0, 0.25, 0.5, 0.75})
local opts = {num = 4, endpoint = false}
np.linspace(0, 1, opts)
assert(opts.num == 4 and opts.endpoint == false)  -- the caller's options table is left alone
close(np.eye(3):totable(), {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}})
close(np.eye(2, 3, 1):totable(), {{0, 1, 0}, {0, 0, 1}})
local x = sl.device_put(sl.arange(32.0):reshape(8, 4), sl.P("X", "Y"))
assert(tostring(sl.typeof(np.zeros_like(x))) == "f32[8@X,4@Y]")            -- a's sharding
assert(tostring(sl.typeof(np.ones_like(x, np.int32))) == "i32[8@X,4@Y]")
close(np.full_like(x, 2):totable()[8], {2, 2, 2, 2})
assert(tostring(sl.typeof(np.zeros_like(x, {out_sharding = sl.P(nil, "X")}))) == "f32[8,4@X]")
-- inside jit, *_like of a tracer is a constant resharded like it
local fl = sl.jit(function(t) return np.full_like(t, 3) + t end)(x)
assert(tostring(sl.typeof(fl)) == "f32[8@X,4@Y]", sl.typeof(fl))
close(fl:totable()[1], {3, 4, 5, 6})

-- ---- elementwise -----------------------------------------------------------------------------
local v = sl.array({-2.5, -1, 0, 0.5, 4})
close(np.square(v):totable(), {6.25, 1, 0, 0.25, 16})
close(np.abs(v):totable(), {2.5, 1, 0, 0.5, 4})
close(np.sign(v):totable(), {-1, -1, 0, 1, 1})
close(np.floor(v):totable(), {-3, -1, 0, 0, 4})
close(np.sqrt(sl.array({0, 1, 4, 2})):totable(), {0, 1, 2, math.sqrt(2)})
close(np.sin(v):totable()[4], math.sin(0.5))
close(np.cos(v):totable()[1], math.cos(-2.5))
-- int32 promotes to float32 as JAX's promote_args_inexact (jnp.sin(np.arange(8)) is f32[8]);
-- abs / sign / floor keep int32 in JAX, which the engine's kernels lack: still an error (below).
assert(tostring(sl.typeof(np.sin(np.arange(3)))) == "f32[3]", sl.typeof(np.sin(np.arange(3))))
close(np.sqrt(np.arange(3)):totable(), {0, 1, math.sqrt(2)})
close(np.log1p(sl.array({1e-7}))[0]:item(), 1e-7 - 0.5e-14, 1e-12)  -- exact near 0
close(np.expm1(sl.array({1e-7}))[0]:item(), 1e-7 + 0.5e-14, 1e-12)
close(np.power(v, 2):totable(), {6.25, 1, 0, 0.25, 16})
close(np.power(v, 3):totable(), {-15.625, -1, 0, 0.125, 64})
close(np.power(sl.array({2, 4}), -1):totable(), {0.5, 0.25})
close(np.power(sl.array({2, 4}), 0.5):totable(), {math.sqrt(2), 2})
close(np.power(sl.array({2, 4}), sl.array({3, 0.5})):totable(), {8, 2}, 1e-5)
close(np.clip(v, -1, 1):totable(), {-1, -1, 0, 0.5, 1})
close(np.clip(v, nil, 0):totable(), {-2.5, -1, 0, 0, 0})
close(np.clip(v, {min = 0}):totable(), {0, 0, 0, 0.5, 4})
close(np.logaddexp(sl.array({0, 100}), sl.array({0, 100})):totable(),
      {math.log(2), 100 + math.log(2)})  -- stable: no overflow at 100
close(sl.nn.relu(v):totable(), {0, 0, 0, 0.5, 4})
close(sl.nn.softplus(sl.array({0, 50})):totable(), {math.log(2), 50})

-- ---- reductions --------------------------------------------------------------------------------
local a = sl.array({{1, 2, 3}, {4, 5, 6}})
close(np.prod(a):item(), 720)
close(np.prod(a, 1):totable(), {6, 120})
close(np.prod(a, {axis = 0, keepdims = true}):totable(), {{4, 10, 18}})
close(np.var(a):item(), 35 / 12)
close(np.var(a, {axis = 1, ddof = 1}):totable(), {1, 1})
close(np.std(a, 0):totable(), {1.5, 1.5, 1.5})
close(np.any(sl.array({{0, 0}, {0, 3}}), 1):totable(), {0, 1})   -- a float mask
close(np.all(sl.array({{1, 0}, {2, 3}}), 1):totable(), {0, 1})
close(np.argmax(a, {axis = 1, keepdims = true}):totable(), {{2}, {2}})
close(sl.nn.logsumexp(a, 1):totable(), {3 + math.log(1 + math.exp(-1) + math.exp(-2)),
                                        6 + math.log(1 + math.exp(-1) + math.exp(-2))})
close(np.cumsum(a, 1):totable(), {{1, 3, 6}, {4, 9, 15}})
close(np.cumsum(a):totable(), {1, 3, 6, 10, 15, 21})

-- ---- shape moves, take, one_hot --------------------------------------------------------------
close(np.stack({sl.array({1, 2}), sl.array({3, 4})}):totable(), {{1, 2}, {3, 4}})
close(np.stack({sl.array({1, 2}), sl.array({3, 4})}, 1):totable(), {{1, 3}, {2, 4}})
local parts = np.split(sl.arange(6.0), 3)
assert(#parts == 3)
close(parts[2]:totable(), {2, 3})
close(np.split(sl.arange(6.0), {1, 4})[2]:totable(), {1, 2, 3})
assert(np.expand_dims(a, 1).shape[2] == 1 and #np.expand_dims(a, -1).shape == 3)
close(np.squeeze(sl.array({{{1}, {2}}})):totable(), {1, 2})
close(np.swapaxes(a, 0, 1):totable(), {{1, 4}, {2, 5}, {3, 6}})
assert(table.concat(np.moveaxis(np.zeros({2, 3, 4}), 0, -1).shape, ",") == "3,4,2")
close(np.tile(sl.array({1, 2}), 2):totable(), {1, 2, 1, 2})
close(np.tile(a, {2, 1}):totable(), {{1, 2, 3}, {4, 5, 6}, {1, 2, 3}, {4, 5, 6}})
close(np.take(a, {2, 0}, 1):totable(), {{3, 1}, {6, 4}})
close(np.take(a, -1, 0):totable(), {4, 5, 6})
close(np.take(a, sl.array({{1}, {0}}, {dtype = "int32"})):totable(), {{2}, {1}})  -- flattened
close(sl.nn.one_hot(sl.array({0, 2}, {dtype = "int32"}), 3):totable(), {{1, 0, 0}, {0, 0, 1}})
close(sl.nn.one_hot(sl.array({1}), 2, {axis = 0}):totable(), {{0}, {1}})

-- ---- shardings kept (explicit mode: they are types) ---------------------------------------
assert(tostring(sl.typeof(np.sin(x))) == "f32[8@X,4@Y]")
assert(tostring(sl.typeof(np.swapaxes(x, 0, 1))) == "f32[4@Y,8@X]")
assert(tostring(sl.typeof(np.square(x))) == "f32[8@X,4@Y]")
assert(tostring(sl.typeof(np.prod(x, 1))) == "f32[8@X]", sl.typeof(np.prod(x, 1)))
close(np.cumsum(x, 0):totable()[8], {112, 120, 128, 136})  -- over the sharded axis

-- ---- gradients ---------------------------------------------------------------------------------
sl.set_mesh(nil)
local g = sl.grad(function(t) return np.sum(np.take(t, {2, 0, 2}, 1)) end)(a)
close(g:totable(), {{1, 0, 2}, {1, 0, 2}})  -- embed_lookup's VJP (has_vjp from the table)
close(sl.grad(function(t) return np.sum(np.abs(t) + np.sqrt(np.square(t) + 1)) end)(v):totable(),
      {-1 - 2.5 / math.sqrt(7.25), -1 - 1 / math.sqrt(2), 0, 1 + 0.5 / math.sqrt(1.25),
       1 + 4 / math.sqrt(17)})
close(sl.grad(function(t) return np.prod(t) end)(a):totable(),
      {{720, 360, 240}, {180, 144, 120}})
close(sl.grad(function(t) return np.sum(np.logaddexp(t, t)) end)(sl.array({1, 2})):totable(),
      {1, 1})  -- a tie: half from each operand
close(sl.grad(function(t) return np.sum(np.cumsum(t, 1)) end)(a):totable(), {{3, 2, 1}, {3, 2, 1}})
close(sl.grad(function(t) return np.sum(sl.nn.relu(t)) end)(v):totable(), {0, 0, 0, 1, 1})
-- relu is max(x, 0): NaN stays NaN (JAX's), and its gradient there is 0 (relu's custom JVP).
local rn = sl.nn.relu(sl.array({0 / 0, -1, 2})):totable()
assert(rn[1] ~= rn[1] and rn[2] == 0 and rn[3] == 2, "relu of NaN")
close(sl.grad(function(t) return np.sum(sl.nn.relu(t)) end)(sl.array({0 / 0, 1})):totable(), {0, 1})
close(sl.grad(function(t) return np.sum(np.floor(t) + np.sign(t)) end)(v):totable(),
      {0, 0, 0, 0, 0})
close(sl.grad(function(t) return np.sum(np.var(t, 1)) end)(a):totable(),
      {{-2 / 3, 0, 2 / 3}, {-2 / 3, 0, 2 / 3}})

-- ---- jnp.array, jnp.allclose, jax.tree_util, mesh.shape, jax.lax.axis_size -------------------
assert(tostring(sl.typeof(np.array({3, 1, 4}))) == "i32[3]" and tostring(sl.typeof(np.array({3, 1.5}))) == "f32[2]")
assert(tostring(sl.typeof(np.array({{3.}}))) == "f32[1,1]" and tostring(sl.typeof(np.array({1, 2}, "float32"))) == "f32[2]")
assert(np.allclose(np.array({1.0, 2.0}), np.array({1.0, 2.0 + 1e-6})) == true)
assert(np.allclose(np.array({1.0, 2.0}), np.array({1.0, 2.1})) == false)
assert(np.allclose(np.array({1.0, 2.0}), np.array({1.0, 2.1}), 0.1) == true)  -- rtol positional
assert(np.allclose(np.array({1, 2}), np.array({1.0, 2.0})) == true)  -- int32 compares as float
local traced = sl.jit(function(p, q) return np.allclose(p, q) end)(sl.arange(3.0), sl.arange(3.0))
assert(traced:item() == 1, "inside jit: the mask")
local tu = sl.tree_util
local doubled = tu.tree_map(function(p, q) return p + q end, {1, {2, 3}, k = 4}, {10, {20, 30}, k = 40})
assert(doubled[1] == 11 and doubled[2][2] == 33 and doubled.k == 44)
local leaves = tu.tree_leaves({b = 2, a = 1, 0, {-1}})  -- positions first, then sorted keys
assert(#leaves == 4 and leaves[1] == 0 and leaves[2] == -1 and leaves[3] == 1 and leaves[4] == 2)
assert(tu.tree_all({true, {1, np.array({1.0})}}) == true and tu.tree_all({true, {false}}) == false)
assert(sl.tree.map(function(p) return p * 2 end, {3}).n == nil and sl.tree.map(function(p) return p * 2 end, {3})[1] == 6)
fails("tree 2 has a table of 1 children where tree 1 has one of 2", tu.tree_map,
      function(p, q) return p end, {1, 2}, {1})
fails("neither a list position", tu.tree_leaves, {[2.5] = 1})
fails("truth value of an array with more than one element is ambiguous", tu.tree_all,
      {np.array({1.0, 1.0})})
local cyclic = {}
cyclic[1] = cyclic
fails("nested over 64 deep", tu.tree_leaves, cyclic)
-- int32 sum and matmul wrap as jnp's (XLA's two's complement); an int32 mean is float32.
local big = np.array({2147483647, 1})
assert(tostring(sl.typeof(np.sum(big))) == "i32[]" and np.sum(big):item() == -2147483648)
assert(np.matmul(np.array({{2, 3}}), np.array({{4}, {5}})):totable()[1][1] == 23)
assert(tostring(sl.typeof(np.mean(np.array({1, 2})))) == "f32[]" and np.mean(np.array({1, 2})):item() == 1.5)
assert(tostring(sl.typeof(np.matmul(np.array({1, 2}), np.array({1.5, 2.0})))) == "f32[]")  -- promotes
local mesh = sl.make_mesh({4, 2}, {"i", "j"})
assert(mesh.shape.i == 4 and mesh.shape["j"] == 2 and mesh:shape().j == 2)
fails("unbound axis name 'i'", sl.lax.axis_size, "i")
-- jax.sharding.Mesh over sl.devices() (one here: no SHARDLAB_LOCAL_DEVICES), Auto by default.
assert(tostring(sl.sharding.Mesh(sl.devices(), {"d"})) == "Mesh('d': 1, axis_types=(Auto,))")
fails("devices must be (nested) lists of devices", sl.sharding.Mesh, {1, 2}, {"d"})
fails("devices of shape (1,) but 2 axis_names", sl.sharding.Mesh, sl.devices(), {"d", "e"})
fails("device 3 is at position 0", sl.sharding.Mesh, {{id = 3}}, {"d"})
fails("ragged devices", sl.sharding.Mesh, {{{id = 0}}, {id = 1}}, {"d", "e"})
fails("axis 'k' is not in", function()
  return sl.shard_map(function(b) sl.lax.axis_size("k"); return b end,
                      {mesh = mesh, in_specs = {sl.P("i")}, out_specs = sl.P("i")})(sl.arange(8.0))
end)

-- ---- traced indices: %, pad, x[i], x.at[i], lax.dynamic_slice_in_dim (the tutorial's) --------
sl.set_mesh(nil)
local r = np.array({7, -7, 7, -7, 5}) % np.array({3, 3, -3, -3, 0})  -- Python's %, JAX's x % 0
assert(tostring(sl.typeof(r)) == "i32[5]") ; close(r:totable(), {1, 2, -2, -1, 0})
close((sl.array({7.5, -7.5}) % 2):totable(), {1.5, 0.5})
assert(tostring(sl.typeof(np.arange(5) % 2)) == "i32[5]" and np.mod == np.remainder)
close(np.pad(np.arange(3), 1):totable(), {0, 0, 1, 2, 0})
close(np.pad(np.ones({1, 2}), {{1, 0}, {0, 2}}):totable(), {{0, 0, 0, 0}, {1, 1, 0, 0}})
local t = np.arange(12):reshape(4, 3)
close(t[np.array(2)]:totable(), {6, 7, 8})
close(t[np.array(-1)]:totable(), {9, 10, 11})  -- negative from the end
close(t[np.array(7)]:totable(), {9, 10, 11})   -- clamped, as JAX's
close(t.at[1]:add(10):totable(), {{0, 1, 2}, {13, 14, 15}, {6, 7, 8}, {9, 10, 11}})
close(t.at[np.array(-4)]:set(np.array({5, 5, 5})):totable()[1], {5, 5, 5})
close(t.at[4]:add(1):totable(), t:totable())  -- an integer index out of range: dropped (JAX's)
close(t.at[-1]:get():totable(), {9, 10, 11})
close(t.at[20]:get():totable(), {9, 10, 11})  -- get clips an index out of range (JAX's)
close(t.at[-20]:get():totable(), {0, 1, 2})
-- An int32 Array index outside [-n, n) drops the update too (JAX's scatter mode for x.at[i]
-- .set / .add); inside [-n, 0) it counts from the end.
close(t.at[np.array(4)]:set(np.array({5, 5, 5})):totable(), t:totable())
close(t.at[np.array(-5)]:add(1):totable(), t:totable())
close(t.at[np.array(-1)]:add(1):totable()[4], {10, 11, 12})
-- jnp.roll, jnp.nan; int32 comparisons are exact (an int32 mask), also past 2^24.
close(np.roll(np.arange(5), 2):totable(), {3, 4, 0, 1, 2})
close(np.roll(np.arange(5), -1):totable(), {1, 2, 3, 4, 0})
close(np.roll(t, 1, {axis = 0}):totable()[1], {9, 10, 11})
close(np.roll(t, 7, 1):totable()[1], {2, 0, 1})  -- 7 mod 3 = 1
close(np.roll(t, 1):totable()[1], {11, 0, 1})     -- of the flattened array
assert(np.nan ~= np.nan and np.inf == math.huge and np.pi == math.pi)
local big = np.array({16777217, 16777216, -3})
local eq = np.equal(big, 16777216)
assert(tostring(sl.typeof(eq)) == "i32[3]", sl.typeof(eq))
close(eq:totable(), {0, 1, 0})
close(np.less(big, 0):totable(), {0, 0, 1})
close(np.greater_equal(big, np.array({16777217, 16777217, -3})):totable(), {1, 0, 1})
close(np.where(np.equal(np.arange(3), 1), np.ones({3}), np.zeros({3})):totable(), {0, 1, 0})
close(np.equal(np.arange(3), 1.5):totable(), {0, 0, 0})  -- beside a float: compared as floats
close(sl.lax.dynamic_slice_in_dim(t, np.array(1), 2, 1):totable(),
      {{1, 2}, {4, 5}, {7, 8}, {10, 11}})
close(sl.lax.dynamic_slice_in_dim(t, -1, 2, 1):totable()[1], {1, 2})  -- -1 + 3, clamped to 1
close(sl.lax.dynamic_update_slice_in_dim(t, np.zeros({1, 3}, np.int32), 2):totable()[3], {0, 0, 0})
local row = sl.jit(function(x, i) return x[(i + 1) % 4] end)
close(row(t, np.array(4)):totable(), {3, 4, 5})
close(row(t, np.array(-2)):totable(), {9, 10, 11})  -- (-2 + 1) % 4 = 3
assert(row:cache_info().compiles == 1, "the index is traced: one compilation")
close(sl.vmap(function(u) return u % np.array({5, 3, 2}) end)(t):totable()[4], {4, 1, 1})
fails("dynamic_slice_in_dim", function()  -- no batching rule: an error naming the op
  return sl.vmap(function(u, i) return u[i] end)(t, np.array({0, 1, 2, 3}))
end)
local tf = t:astype(np.float32)
close(sl.grad(function(x, i) return np.sum(x[i] * x[i]) end)(tf, np.array(1)):totable(),
      {{0, 0, 0}, {6, 8, 10}, {0, 0, 0}, {0, 0, 0}})
close(sl.grad(function(x) return np.sum(x.at[np.array(0)]:set(5) * x) end)(tf):totable(),
      {{5, 5, 5}, {6, 8, 10}, {12, 14, 16}, {18, 20, 22}})
close(sl.grad(function(x) return np.sum(x.at[np.array(3)]:add(x[np.array(0)])) end)(tf):totable(),
      {{2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}})
-- A traced index: one program for every index, in range or dropped; the gradient of a
-- dropped set passes x's whole.
local put = sl.jit(function(x, i) return x.at[i]:set(-1) end)
close(put(tf, np.array(2)):totable()[3], {-1, -1, -1})
close(put(tf, np.array(4)):totable(), tf:totable())
close(put(tf, np.array(-4)):totable()[1], {-1, -1, -1})
assert(put:cache_info().compiles == 1, "one compilation")
close(sl.grad(function(x, i) return np.sum(x.at[i]:set(5) * x) end)(tf, np.array(7)):totable(),
      {{0, 2, 4}, {6, 8, 10}, {12, 14, 16}, {18, 20, 22}})
close(sl.grad(function(x, i) return np.sum(x.at[i]:set(5) * x) end)(tf, np.array(-4)):totable(),
      {{5, 5, 5}, {6, 8, 10}, {12, 14, 16}, {18, 20, 22}})
close(sl.grad(function(x) return np.sum(sl.lax.dynamic_slice_in_dim(x, np.array(2), 2, 1)) end)(tf)
      :totable()[2], {0, 1, 1})
close(sl.grad(function(b) return np.sum(sl.array({7, -7}) % b) end)(sl.array({3, 3})):totable(),
      {-2, 3})  -- -floor(a / b)
close(sl.grad(function(a) return np.sum(a % 2) end)(sl.array({2.5, -1.5})):totable(), {1, 1})
sl.set_mesh(sl.make_mesh({4, 2}, {"X", "Y"}))  -- explicit: the sliced dim whole, others kept
local xs = sl.device_put(np.arange(24.0):reshape(8, 3), sl.P("X"))
assert(tostring(sl.typeof(xs[np.array(1)])) == "f32[3]", sl.typeof(xs[np.array(1)]))
assert(tostring(sl.typeof(sl.lax.dynamic_slice_in_dim(xs, np.array(1), 2, 1))) == "f32[8@X,2]")
assert(tostring(sl.typeof(xs.at[np.array(9)]:add(1))) == "f32[8,3]")
close(xs.at[np.array(9)]:add(1):totable(), xs:totable())  -- out of range: dropped
close(xs.at[np.array(-8)]:add(1):totable()[1], {1, 2, 3})
close((xs % 5):totable()[8], {1, 2, 3})
fails("the index must be an int32 scalar, got f32[]", function() return xs[np.array(1.5)] end)
fails("x.at[...] takes one integer or int32 scalar Array index", function()
  return xs.at[{1, 2}]:add(1)
end)
fails("pad: only mode \"constant\"", np.pad, xs, 1, "edge")
fails("pad: 3 (before, after) pairs for an array of dimension 2", np.pad, xs,
      {{1, 1}, {2, 2}, {0, 0}})
fails("pad: pad_width[2] is not a pair {before, after}", np.pad, xs, {{1, 1}, {2}})
close(np.pad(np.ones({1, 1}), {{1, 0}}):totable(), {{0, 0}, {0, 1}})  -- one pair for every dim
sl.set_mesh(nil)

-- ---- bad input -------------------------------------------------------------------------------
fails("array split does not result in an equal division", np.split, sl.arange(6.0), 4)
fails("cannot select an axis to squeeze out", np.squeeze, a, 0)
fails("axis2 2 is out of bounds for array of dimension 2", np.swapaxes, a, 0, 2)
fails("indices must be int32", np.take, sl.array({1, 2}), sl.array({1.0}))
fails("ddof 3 must be >= 0 and below the 3 elements", np.var, a, {axis = 1, ddof = 3})
fails("unknown key", np.zeros, {2}, {out_shardings = sl.P()})
fails("abs: needs a floating-point array", np.abs, sl.array({1}, {dtype = "int32"}))  -- sqrt promotes (above)
fails("rtol and atol must be >= 0 (got rtol=-1, atol=1e-08)", np.allclose, np.array({1.0}),
      np.array({1.0}), -1)
fails("equal_nan=true is not offered", np.allclose, np.array({1.0}), np.array({1.0}), {equal_nan = true})
print("numpy_jax_test: ok")
