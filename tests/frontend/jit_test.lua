-- tests/frontend/jit_test.lua: sl.jit (tracing, caching, lower/compile, the collectives an
-- out_sharding implies), sl.grad / sl.value_and_grad against finite differences, and the bad
-- input of issue 13's list (each a clear error; the shell survives).
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

local m = sl.make_mesh({4, 2}, {"X", "Y"})
sl.set_mesh(m)
-- Rows an earlier run left in this store (the scratch store persists between runs).
local rows_before = #sl.sql("select 1 from compilations where fn_name = 'matmul_rep'")

-- The shard_map tutorial's matrices, here under jit: a (8, 16) on P('X', 'Y'), b (16, 4) on
-- P('Y', None): the contraction is sharded over Y.
local a = sl.device_put(sl.arange(8 * 16.0):reshape(8, 16), sl.P("X", "Y"))
local b = sl.device_put(sl.arange(16 * 4.0):reshape(16, 4), sl.P("Y", nil))
local function matmul_ref()
  local ta, tb, c = a:totable(), b:totable(), {}
  for i = 1, 8 do c[i] = {} for j = 1, 4 do
    local s = 0
    for k = 1, 16 do s = s + ta[i][k] * tb[k][j] end
    c[i][j] = s
  end end
  return c
end
local want = matmul_ref()

local f_rep = sl.jit(function(x, y) return np.matmul(x, y, {out_sharding = sl.P("X", nil)}) end,
                     {name = "matmul_rep"})
local f_rs = sl.jit(function(x, y) return np.matmul(x, y, {out_sharding = sl.P("X", "Y")}) end,
                    {name = "matmul_rs"})
local c1, c2 = f_rep(a, b), f_rs(a, b)
close(c1:totable(), want)
close(c2:totable(), want)
assert(tostring(sl.typeof(c1)) == "f32[8@X,4]" and tostring(sl.typeof(c2)) == "f32[8@X,4@Y]", sl.typeof(c1) .. " " .. sl.typeof(c2))
-- The fix's collective appears in the per-device program, with its bytes: an all-reduce over
-- Y for P('X', None), a reduce-scatter over Y for P('X', 'Y').
local k1, k2 = f_rep:lower(a, b):compile(), f_rs:lower(a, b):compile()
assert(k1:text():find("all_reduce[axes=(Y)]", 1, true), k1:text())
assert(not k1:text():find("reduce_scatter", 1, true))
assert(k2:text():find("reduce_scatter[dim=1 axes=(Y)]", 1, true), k2:text())
-- Bytes one device receives: all-reduce (G-1)*x = 1 * (2*4*4) = 32; reduce-scatter (G-1)*out
-- = 1 * (2*2*4) = 16 (engine/compile/spmd.h's accounting).
assert(k1.cost.collective_bytes.Y == 32, k1.cost.collective_bytes.Y)
assert(k2.cost.collective_bytes.Y == 16, k2.cost.collective_bytes.Y)
assert(k1.memory.peak_bytes > 0 and k1.name == "matmul_rep" and k1.cache.key:find("^jit_matmul_rep%-"))
assert(#k1:temps(3) >= 0)
-- The traced program (jaxpr-like) has the user's parameter names.
local text = f_rep:lower(a, b):as_text()
assert(text:find("# a:f32[8,16] batch x", 1, true) and text:find("matmul", 1, true), text)

-- Compiled once per signature; a different input sharding recompiles, and the explanation
-- names the argument and both types.
assert(f_rep:cache_info().compiles == 1)
f_rep(a, b)
f_rep(a, b)
assert(f_rep:cache_info().compiles == 1, "same signature: no recompile")
local a2 = sl.device_put(a, sl.P("X", nil))
close(f_rep(a2, b):totable(), want)
local info = f_rep:cache_info()
assert(info.compiles == 2 and info.entries == 2)
assert(info.last_miss:find("TRACING CACHE MISS at matmul_rep", 1, true), info.last_miss)
assert(info.last_miss:find("at args[0] (x), now f32[8@X,16] and before f32[8@X,16@Y]", 1, true),
       info.last_miss)

-- in_shardings place the inputs; out_shardings place the results.
local g = sl.jit(function(x) return x * 2 end, {in_shardings = {sl.P(nil, "X")}, out_shardings = sl.P("Y")})
local r = g(a)
assert(tostring(sl.typeof(r)) == "f32[8@Y,16]", sl.typeof(r))
close(r:totable(), (a * 2):totable())

-- Static arguments: numbers are static; each value traces anew.
local s = sl.jit(function(x, c) return x * c end, {static_argnums = 1})
close(s(a, 3):totable(), (a * 3):totable())
close(s(a, 4):totable(), (a * 4):totable())
assert(s:cache_info().compiles == 2)

-- Captured arrays (constvars) and several results.
local bias = sl.ones({8, 16}, {sharding = sl.P("X", "Y")})
local two = sl.jit(function(x) return x + bias, np.sum(x) end)
local p, q = two(a)
close(p:totable(), (a + 1):totable())
close(q:item(), 127 * 128 / 2)

-- Inside jit, typeof shows the sharding so far (explicit mode: part of the type).
local seen
sl.jit(function(x) seen = tostring(sl.typeof(np.sum(x, 1))); return x end)(a)
assert(seen == "f32[8@X]", seen)
-- typeof is jax.typeof's ShapedArray: its sharding and spec; a function returning nothing
-- (only printing, as jax.jit(lambda x: print(...))) returns nothing.
local ty
assert(select("#", sl.jit(function(x) ty = sl.typeof(x) end)(a)) == 0)
assert(tostring(ty.sharding.spec) == "P('X', 'Y')" and ty.dtype == "float32" and ty.shape[2] == 16
       and ty.ndim == 2 and ty == sl.typeof(a) and "t: " .. ty == "t: f32[8@X,16@Y]", tostring(ty))
assert(tostring(a.sharding.spec) == "P('X', 'Y')" and a.sharding == ty.sharding)
-- Where a spec is read a NamedSharding is taken too (its spec), as JAX's: x.sharding passes on.
local b = sl.reshard(sl.ones({8, 16}), a.sharding)
assert(tostring(sl.typeof(b)) == "f32[8@X,16@Y]")
assert(tostring(sl.typeof(sl.with_sharding_constraint(b, a.sharding))) == "f32[8@X,16@Y]")
assert(tostring(sl.typeof(sl.zeros({8, 16}, {sharding = a.sharding}))) == "f32[8@X,16@Y]")
assert(tostring(sl.typeof(sl.jit(function(t) return t * 2 end,
                                 {out_shardings = sl.NamedSharding(a.mesh, sl.P(nil, "Y"))})(b)))
       == "f32[8,16@Y]")

-- Gradients against central finite differences (on one device and sharded).
local function loss(w, x)
  local y = sl.nn.gelu(np.matmul(x, w, {out_sharding = sl.P("X", nil)}))
  return np.mean(y * y)
end
local key = sl.random.key(7)
local ks = sl.random.split(key, 2)
local w = sl.random.normal(ks[1], {16, 4}, {sharding = sl.P("Y", nil)}) * 0.3
local x = sl.random.normal(ks[2], {8, 16}, {sharding = sl.P("X", "Y")})
local dw = sl.grad(loss)(w, x)
assert(tostring(sl.typeof(dw)) == "f32[16@Y,4]", "cotangent sharding follows the primal's: " .. sl.typeof(dw))
local wt, xt = w:totable(), x:totable()
local function loss_at(wtab)
  return loss(sl.array(wtab, {sharding = sl.P("Y", nil)}), x):item()
end
local dwt = dw:totable()
for _, ij in ipairs({{1, 1}, {5, 2}, {16, 4}, {9, 3}}) do
  local i, j = ij[1], ij[2]
  local eps = 1e-2
  local plus, minus = {}, {}
  for r = 1, 16 do plus[r], minus[r] = {}, {} for c = 1, 4 do plus[r][c], minus[r][c] = wt[r][c], wt[r][c] end end
  plus[i][j], minus[i][j] = wt[i][j] + eps, wt[i][j] - eps
  local fd = (loss_at(plus) - loss_at(minus)) / (2 * eps)
  assert(math.abs(fd - dwt[i][j]) < 2e-3 + 2e-2 * math.abs(fd), string.format("d/dw[%d][%d]: %g vs %g", i, j, fd, dwt[i][j]))
end
-- value_and_grad over both arguments, eager and under jit; one device equals sharded.
local v, gw, gx = sl.value_and_grad(loss, {0, 1})(w, x)
close(v:item(), loss(w, x):item(), 1e-5)
close(gw:totable(), dwt, 1e-5)
local jv, jgw = sl.jit(function(w_, x_) local l, d = sl.value_and_grad(loss)(w_, x_); return l, d end)(w, x)
close(jv:item(), v:item(), 1e-5)
close(jgw:totable(), dwt, 1e-5)
local one = sl.make_mesh({1}, {"X"})
sl.use_mesh(one, function()
  local w1 = sl.array(wt, {mesh = one})
  local x1 = sl.array(xt, {mesh = one})
  local d1 = sl.grad(function(w_, x_)
    local y = sl.nn.gelu(np.matmul(x_, w_))
    return np.mean(y * y)
  end)
  close(d1(w1, x1):totable(), dwt, 1e-4)
end)
-- Through the unary ops: d/dx sum(log(x^2 + 1) + tanh(x)) = 2x / (x^2 + 1) + 1 - tanh(x)^2.
local xs = sl.array({-1.5, -0.2, 0.3, 2.0})
local dx = sl.grad(function(t) return np.sum(np.log(t * t + 1) + np.tanh(t)) end)(xs):totable()
for i, v in ipairs({-1.5, -0.2, 0.3, 2.0}) do
  close(dx[i], 2 * v / (v * v + 1) + 1 - math.tanh(v) ^ 2, 1e-5)
end
-- A gradient for an input the loss does not use is zeros (as JAX's).
local z = sl.grad(function(u, v_) return np.sum(u * 2) end, 1)(w, w)
close(z:totable(), (w * 0):totable())

-- Bad input: clear errors naming the op and the values; the shell survives every one.
h.expect_error(function() sl.jit(function(t) return t:totable() end)(a) end,
               "Array:totable: this is a traced array")
h.expect_error(function() sl.jit(function(t) return 3 end)(a) end, "must return Arrays; result 1 is number")
h.expect_error(function() sl.jit(function(t) return {t, 3} end)(a) end, "must return Arrays; result 1[2] is number")
h.expect_error(function() sl.grad(function(t) end)(a) end, "returned nothing")
local rec
rec = sl.jit(function(t) return rec(t) end)
h.expect_error(function() rec(a) end, "recursion through jit")
local leaked
sl.jit(function(t) leaked = t; return t end)(a)
h.expect_error(function() return leaked + 1 end, "Encountered an unexpected tracer")
h.expect_error(function() sl.grad(function(t) return t end)(a) end,
               "Gradient only defined for scalar-output functions. Output had shape: (8, 16)")
h.expect_error(function() sl.grad(function(t) return np.sum(t) end, 3)(a) end, "argnums 3 is not an Array argument")
h.expect_error(function() sl.jit(function(t) return t end, {in_shardings = {sl.P("Q")}})(a) end,
               "names axis 'Q'")
h.expect_error(function() sl.jit(function(t) return t end, {out_shardings = sl.P(nil, nil, "X")})(a) end,
               "out_shardings[1]: P(None, None, 'X') is longer than the result's rank 2")
h.expect_error(function() sl.jit(function(t) return t end, {out_shardings = sl.P(nil, "Y")})(sl.ones({8, 3})) end,
               "not divisible by 2")
h.expect_error(function() sl.jit(function(t) error("user error") end)(a) end, "user error")
h.expect_error(function() sl.jit(42) end, "expected function")
h.expect_error(function() sl.jit(function(t) return t end)({}) end, "argument 1 is a table")
h.expect_error(function() sl.jit(function(t) return t end, {in_sharding = {}}) end, "did you mean 'in_shardings'")
assert(sl.jit(function(t) return t end)(a):totable()[2][3] == a:totable()[2][3], "identity")
print("jit_test ok")

-- The store's compilations table: the jitted function's compiles under its name, miss then
-- hit; the recompile's explanation names the argument.
local all = sl.sql("select outcome, reason_kind, reason_text, in_signature from compilations " ..
                   "where fn_name = 'matmul_rep' order by compile_id")
assert(#all == rows_before + 3, #all)
local rows = {all[#all - 2], all[#all - 1], all[#all]}
assert(rows[1].outcome == "miss" and rows[1].reason_kind == "never_seen")
assert(rows[2].outcome == "hit")
assert(rows[3].outcome == "miss" and rows[3].reason_kind == "types")
assert(rows[3].reason_text:find("at args[0] (x), now f32[8@X,16] and before f32[8@X,16@Y]", 1, true))
assert(rows[1].in_signature == "f32[8@X,16@Y], f32[16@Y,4]", rows[1].in_signature)
local mem = sl.sql("select peak_memory_in_bytes from memory_analysis m join compilations c " ..
                   "on m.compile_id = c.compile_id where c.fn_name = 'matmul_rep' " ..
                   "order by c.compile_id desc limit 2")
assert(#mem == 2 and mem[1].peak_memory_in_bytes > 0)
print("jit_test store ok")
