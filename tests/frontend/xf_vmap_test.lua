-- tests/frontend/xf_vmap_test.lua: sl.vmap against a per-example loop (values and types),
-- unmapped arguments, tables, vmap inside jit, and the errors for what the op set cannot
-- batch (each names the op or the values; the shell survives).
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
local key = sl.random.split(sl.random.key(3), 2)
local w = sl.random.normal(key[1], {4, 3})
local xs = sl.device_put(sl.random.normal(key[2], {8, 4}), sl.P("X"))

-- A per-example function: a row vector through a matmul, gelu, a sum and a reshape.
local function f(x)
  local y = sl.nn.gelu(np.matmul(x, w)) + 1
  return np.sum(y * y), y:reshape(3, 1)
end
local vf = sl.vmap(f, {in_axes = 0, name = "per_example"})
local s, ys = vf(xs)
assert(tostring(sl.typeof(s)) == "f32[8@X]" and tostring(sl.typeof(ys)) == "f32[8@X,3,1]", sl.typeof(s) .. sl.typeof(ys))
local xt = xs:totable()
for i = 1, 8 do
  local si, yi = f(sl.array(xt[i]))
  close(s:totable()[i], si:item(), 1e-5)
  close(ys:totable()[i], yi:totable(), 1e-5)
end
-- One traced program, batched: the matmul's rows gain the batch dim (no loop, no slices).
local text = vf:lower(xs):as_text()
assert(text:find("matmul[a_split=2 b_split=1]", 1, true) and not text:find("slice", 1, true), text)
assert(vf:cache_info().compiles == 1)

-- in_axes nil: an unmapped argument (JAX's None), the same for every example.
local scale = sl.array({1, 2, 3, 4})
local g = sl.vmap(function(x, b) return np.sum(x * b) end, {0, nil})
local gt = g(xs, scale):totable()
for i = 1, 8 do
  close(gt[i], xt[i][1] + 2 * xt[i][2] + 3 * xt[i][3] + 4 * xt[i][4], 1e-5)
end
-- A result that does not depend on the mapped argument is broadcast (out_axes 0).
local c = sl.vmap(function(x, b) return b * 2 end, {0, nil})(xs, scale)
assert(tostring(sl.typeof(c)):find("^f32%[8"), sl.typeof(c))
close(c:totable()[5], {2, 4, 6, 8})
-- Tables in and out.
local t = sl.vmap(function(p) return {sum = p.a + p.b, a = p.a} end)({a = xs, b = xs * 2})
close(t.sum:totable(), (xs * 3):totable(), 1e-5)
close(t.a:totable(), xt)
-- Inside jit (inlined into the same program) and jit of vmap.
close(sl.jit(function(x) local r = vf(x); return r end)(xs):totable(), s:totable(), 1e-5)
close(sl.jit(sl.vmap(function(x) return x * 3 end))(xs):totable(), (xs * 3):totable())

-- Errors.
h.expect_error(function() sl.vmap(function(x) return np.matmul(w:reshape(3, 4), x) end)(xs) end,
               "vmap: batching rule for 'matmul' not implemented for these operands (operand 0 not, operand 1 batched)")
-- Both operands batched: each example's own matmul (a broadcast multiply summed over K), also
-- with transposed operands.
local pair = sl.vmap(function(x, y) return np.matmul(x:reshape(2, 2), y:reshape(2, 2)) end)(xs, xs * 2)
local pair_t = sl.vmap(function(x, y) return np.matmul(x:reshape(2, 2).T, y:reshape(2, 2).T) end)(xs, xs)
for i = 0, 7 do
  local xi = xs[i]:reshape(2, 2)
  close(pair[i]:totable(), np.matmul(xi, xi * 2):totable(), 1e-5)
  close(pair_t[i]:totable(), np.matmul(xi.T, xi.T):totable(), 1e-5)
end
h.expect_error(function() sl.vmap(function(x, y) return x + y end)(xs, sl.ones({3, 4})) end,
               "vmap got inconsistent sizes for array axes to be mapped:\n  * one axis had size 8: axis 0 of argument 1")
h.expect_error(function() sl.vmap(function(x) return x end, 1)(xs) end,
               "vmap in_axes 1 for argument 1: only 0 (or nil) is supported")
h.expect_error(function() sl.vmap(function(x) return x end, {nil})(xs) end,
               "vmap must have at least one non-None value in in_axes")
h.expect_error(function() sl.vmap(function(x) return x end)(sl.array(3.0)) end,
               "vmap was requested to map its argument along axis 0, which implies that its rank should be at least 1, but is only 0")
h.expect_error(function() sl.vmap(function(x) return x end, 0, 1) end, "out_axes 1 is not supported")
-- Per-example gradients: vmap(grad(f)) equals grad(f) of each example (the grad seed, one
-- per example).
local function ex_loss(wt, x)
  local y = sl.nn.gelu(np.matmul(x, wt))
  return np.sum(y * y)
end
local per = sl.vmap(sl.grad(ex_loss, 1), {nil, 0})(w, xs)
assert(tostring(sl.typeof(per)):find("^f32%[8@X,4%]"), sl.typeof(per))
for i = 1, 8, 3 do
  close(per:totable()[i], sl.grad(ex_loss, 1)(w, sl.array(xt[i])):totable(), 1e-4)
end
local pw = sl.vmap(sl.grad(ex_loss), {nil, 0})(w, xs)  -- d/dw per example: (8, 4, 3)
assert(tostring(sl.typeof(pw)):find("^f32%[8@X,4,3%]"), sl.typeof(pw))
close(pw:totable()[5], sl.grad(ex_loss)(w, sl.array(xt[5])):totable(), 1e-4)
h.expect_error(function() sl.vmap(function(x) return x:totable() end)(xs) end, "this is a traced array")
h.expect_error(function() sl.vmap(function(x) return 1 end)(xs) end, "result 1 is number")
h.expect_error(function() sl.vmap(function(x) return x end, {in_axis = 0}) end, "in_axes")
assert(sl.vmap(function(x) return x end)(xs):totable()[3][2] == xt[3][2], "alive")
print("xf_vmap_test ok")
