-- tests/frontend/numpy_ops_test.lua: sl.numpy's comparisons, where, maximum/minimum,
-- max/min/argmax/argmin, softmax/log_softmax, transpose and x.T, indexing, einsum and
-- broadcast_to: values against hand-computed results (JAX semantics), shardings they keep,
-- gradients, einsum's out_sharding in explicit mode (the collective each choice implies), and
-- bad input (each a Lua error naming the op and the values; the shell carries on).
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")
local np = sl.numpy

local function close(a, b, tol)
  if type(a) == "table" then
    assert(type(b) == "table" and #a == #b, "shapes differ")
    for i = 1, #a do close(a[i], b[i], tol) end
    return
  end
  tol = tol or 1e-6
  if b ~= b then assert(a ~= a, string.format("%.9g vs NaN", a)) return end
  assert(math.abs(a - b) <= tol * math.max(1, math.abs(b)), string.format("%.9g vs %.9g", a, b))
end

-- ---- values (one device) ---------------------------------------------------------------
local x = sl.array({{1, 5, 3}, {4, 2, 6}})
local nan = 0 / 0
close(np.greater(x, 3):totable(), {{0, 1, 0}, {1, 0, 1}})
close(np.less_equal(x, sl.array({3, 2, 3})):totable(), {{1, 0, 1}, {0, 1, 0}})  -- broadcast
close(np.equal(x, 4):totable(), {{0, 0, 0}, {1, 0, 0}})
assert(np.greater(x, 3).dtype == "float32")  -- a float mask (JAX: bool)
local v = sl.array({1, nan, 3})
close(np.equal(v, v):totable(), {1, 0, 1})  -- NaN compares unequal, as IEEE
close(np.not_equal(v, v):totable(), {0, 1, 0})
close(np.greater_equal(v, 1):totable(), {1, 0, 1})
close(np.where(np.greater(x, 3), x, 0):totable(), {{0, 5, 0}, {4, 0, 6}})
close(np.where(sl.array({1, 0, 1}), x, -x):totable(), {{1, -5, 3}, {4, -2, 6}})
close(np.maximum(x, sl.array({{2}, {5}})):totable(), {{2, 5, 3}, {5, 5, 6}})
close(np.minimum(x, 2.5):totable(), {{1, 2.5, 2.5}, {2.5, 2, 2.5}})
close(np.maximum(v, 2):totable(), {2, nan, 3})  -- NaN propagates
close(np.max(x):item(), 6)
close(np.max(x, 0):totable(), {4, 5, 6})
close(np.min(x, {axis = 1, keepdims = true}):totable(), {{1}, {2}})
close(np.max(v):item(), nan)
close(x:max(-1):totable(), {5, 6})
close(np.max(sl.arange(7.0)):item(), 6)  -- odd lengths carry their last element
close(np.min(sl.arange(5.0) - 2):item(), -2)
assert(np.argmax(x):item() == 5 and np.argmax(x).dtype == "int32")
assert(np.argmin(x):item() == 0)
close(np.argmax(x, 1):totable(), {1, 2})
close(np.argmax(sl.array({3, 7, 7, 1})):item(), 1)  -- the first of tied maxima
close(np.argmax(x, {axis = 0, keepdims = true}):totable(), {{1, 0, 1}})
local sm = sl.nn.softmax(sl.array({{1, 2, 3}, {0, 0, 0}}))
close(sm:totable(), {{0.09003057, 0.24472847, 0.66524096}, {1 / 3, 1 / 3, 1 / 3}}, 1e-6)
close(sl.nn.log_softmax(sl.array({1, 2, 3})):totable(),
      {-2.40760596, -1.40760596, -0.40760596}, 1e-6)
close(sl.nn.softmax(sl.array({{1, 2}, {3, 5}}), 0):totable(),
      {{0.11920292, 0.04742587}, {0.88079708, 0.95257413}}, 1e-6)
close(sl.nn.softmax(sl.array({1000, 1000})):totable(), {0.5, 0.5})  -- stable: max subtracted
local c3 = sl.arange(24.0):reshape(2, 3, 4)
local t3 = np.transpose(c3, {2, 0, 1})
assert(t3.shape[1] == 4 and t3.shape[2] == 2 and t3.shape[3] == 3)
close(t3:totable()[2][2][3], 21)  -- t3[1, 1, 2] = c3[1, 2, 1] = 12 + 8 + 1
close(x.T:totable(), {{1, 4}, {5, 2}, {3, 6}})
close(np.transpose(c3):totable()[4][3][2], 23)  -- reversed axes
close(x:transpose(1, 0):totable(), {{1, 4}, {5, 2}, {3, 6}})
-- Indexing: 0-based integers (negative from the end), {start, stop, step} slices clamped as
-- Python's, {} for ':', "..." and np.newaxis.
close(x[1]:totable(), {4, 2, 6})
close(x[-1]:totable(), {4, 2, 6})
close(x[{0, 2}]:item(), 3)
close(x[{{}, {1}}]:totable(), {{5, 3}, {2, 6}})
close(x[{{}, {nil, -1}}]:totable(), {{1, 5}, {4, 2}})
close(x[{{}, {0, 3, 2}}]:totable(), {{1, 3}, {4, 6}})
close(x[{{}, {-100, 100}}]:totable(), x:totable())  -- clamped
close(x[{"...", 1}]:totable(), {5, 2})
close(c3[{1, "...", {1, 3}}]:totable(), {{13, 14}, {17, 18}, {21, 22}})
local nx = x[{np.newaxis, {}, 0}]
assert(nx.shape[1] == 1 and nx.shape[2] == 2, "newaxis")
close(sl.arange(10.0)[{{1, nil, 3}}]:totable(), {1, 4, 7})  -- a step that leaves a remainder
close(x[{{0, nil, math.maxinteger}}]:totable(), {{1, 5, 3}})  -- a huge step: one element
close(x[{{math.mininteger, math.maxinteger}}]:totable(), x:totable())
-- einsum
local a = sl.arange(6.0):reshape(2, 3)
local b = sl.arange(12.0):reshape(3, 4)
close(np.einsum("ij,jk->ik", a, b):totable(), np.matmul(a, b):totable())
close(np.einsum("ij,jk", a, b):totable(), np.matmul(a, b):totable())  -- implicit output
close(np.einsum("ij->ji", a):totable(), a.T:totable())
close(np.einsum("ij->", a):item(), 15)
close(np.einsum("ij,ij->i", a, a):totable(), {5, 50})
close(np.einsum("i,j->ij", sl.array({1, 2}), sl.array({3, 4, 5})):totable(),
      {{3, 4, 5}, {6, 8, 10}})
close(np.einsum("jk,ij->ki", b, a):totable(), np.matmul(a, b).T:totable())
local bb = np.einsum("bij,bjk->bik", c3:reshape(2, 4, 3), c3)
close(bb:totable()[2][1], {632, 671, 710, 749})
close(np.broadcast_to(sl.array({1, 2}), {3, 2}):totable(), {{1, 2}, {1, 2}, {1, 2}})

-- ---- gradients -----------------------------------------------------------------------------
local g = sl.grad(function(t) return np.sum(np.where(np.greater(t, 3), t * t, t)) end)(x)
close(g:totable(), {{1, 10, 1}, {8, 1, 12}})
-- The branch where() did not choose gets exact zeros even where the cotangent is inf (d log(t)
-- at t = 0): JAX's select transpose puts zeros there, never 0 * inf = NaN.
local pick, a0, b0 = sl.array({1, 0, 1}), sl.array({0, 2, 4}), sl.array({1, 3, 5})
local da, db = sl.grad(function(p, q) return np.sum(np.log(np.where(pick, p, q))) end, {0, 1})(a0, b0)
local dat = da:totable()
assert(dat[1] == math.huge, dat[1])
close({dat[2], dat[3]}, {0, 0.25})
close(db:totable(), {0, 1 / 3, 0})
close(sl.grad(function(t) return np.max(t) end)(x):totable(), {{0, 0, 0}, {0, 0, 1}})
close(sl.grad(function(t) return np.sum(t.T * sl.array({{1, 2}, {3, 4}, {5, 6}})) end)(x):totable(),
      {{1, 3, 5}, {2, 4, 6}})
close(sl.grad(function(t) return np.sum(t[{{}, {0, 3, 2}}]) end)(x):totable(), {{1, 0, 1}, {1, 0, 1}})
-- softmax's rows sum to 1 whatever x is: the gradient of their sum is 0.
close(sl.grad(function(t) return np.sum(sl.nn.softmax(t)) end)(x):totable(),
      {{0, 0, 0}, {0, 0, 0}}, 1e-6)

-- ---- shardings -----------------------------------------------------------------------------
local m = sl.make_mesh({4, 2}, {"X", "Y"})
sl.set_mesh(m)
local xs = sl.device_put(sl.arange(32.0):reshape(8, 4), sl.P("X", "Y"))
assert(tostring(sl.typeof(xs.T)) == "f32[4@Y,8@X]", sl.typeof(xs.T))  -- the sharding moves with its dim
assert(tostring(sl.typeof(np.max(xs, 1))) == "f32[8@X]", sl.typeof(np.max(xs, 1)))  -- others keep theirs
close(np.max(xs, 0):totable(), {28, 29, 30, 31})
close(np.argmax(xs, 1):totable(), {3, 3, 3, 3, 3, 3, 3, 3})
close(sl.nn.softmax(xs):totable(), sl.nn.softmax(sl.arange(32.0):reshape(8, 4)):totable())
close(xs[{{1, 7, 2}, -1}]:totable(), {7, 15, 23})
assert(tostring(sl.typeof(np.greater(xs, 3))) == "f32[8@X,4@Y]")
-- jnp.reshape's out_sharding: the result's sharding.
local rs = np.reshape(xs, {4, 8}, {out_sharding = sl.P(nil, "X")})
assert(tostring(sl.typeof(rs)) == "f32[4,8@X]", sl.typeof(rs))
close(rs:totable(), sl.arange(32.0):reshape(4, 8):totable())
-- einsum in explicit mode: the engine's ambiguous-contraction error (numpy_test.lua's matmul
-- case) until out_sharding says where the result goes; for a contraction sharded over Y,
-- P('X', 'Y') is a reduce-scatter over Y and P('X', None) an all-reduce.
local w = sl.device_put(sl.ones({4, 6}), sl.P("Y", nil))
h.expect_error(function() return np.einsum("ij,jk->ik", xs, sl.ones({4, 8}, {sharding = sl.P("Y", nil)})) end,
               "Contracting dimensions are sharded and it is ambiguous how the output should be "
               .. "sharded. Please specify the output sharding via the `out_sharding` parameter.")
local e_rs = sl.jit(function(p, q) return np.einsum("ij,jk->ik", p, q, {out_sharding = sl.P("X", "Y")}) end)
local e_ar = sl.jit(function(p, q) return np.einsum("ij,jk->ik", p, q, {out_sharding = sl.P("X", nil)}) end)
local r1, r2 = e_rs(xs, w), e_ar(xs, w)
assert(tostring(sl.typeof(r1)) == "f32[8@X,6@Y]" and tostring(sl.typeof(r2)) == "f32[8@X,6]", sl.typeof(r1) .. sl.typeof(r2))
close(r1:totable(), np.matmul(sl.arange(32.0):reshape(8, 4), sl.ones({4, 6})):totable())
close(r2:totable(), r1:totable())
local k_rs, k_ar = e_rs:lower(xs, w):compile(), e_ar:lower(xs, w):compile()
assert(k_rs:text():find("reduce_scatter[dim=1 axes=(Y)]", 1, true), k_rs:text())
assert(k_ar:text():find("all_reduce[axes=(Y)]", 1, true), k_ar:text())
assert(k_rs.cost.collective_bytes.Y < k_ar.cost.collective_bytes.Y)
-- The transposed form "ki" gets the same collective: the matmul runs in (i, k) order.
local e_t = sl.jit(function(p, q) return np.einsum("ij,jk->ki", p, q, {out_sharding = sl.P("Y", "X")}) end)
assert(tostring(sl.typeof(e_t(xs, w))) == "f32[6@Y,8@X]")
assert(e_t:lower(xs, w):compile():text():find("reduce_scatter", 1, true))
-- Explicit mode: elementwise shardings that disagree are JAX's broadcasting error, named after
-- the lax primitive as JAX names it (jnp.greater is lax.gt, jnp.where lax.select_n).
local xt = sl.device_put(sl.arange(32.0):reshape(8, 4), sl.P("Y", "X"))
h.expect_error(function() return np.greater(xs, xt) end,
               "gt got incompatible shardings for broadcasting: ('X', 'Y'), ('Y', 'X').")
h.expect_error(function() return np.where(xs, xs, xt) end,
               "select_n got incompatible shardings for broadcasting: ('X', 'Y'), ('X', 'Y'), "
               .. "('Y', 'X').")

-- ---- bad input: each a Lua error naming the op and the values ------------------------------
sl.set_mesh(nil)
local e = h.expect_error
e(function() return np.greater(x, sl.ones({5})) end,
  "greater: Incompatible shapes for broadcasting: shapes=[(2, 3), (5,)]")
e(function() return np.where(x, sl.ones({4}), 0) end, "where: Incompatible shapes for broadcasting")
e(function() return np.maximum(x, sl.ones({2, 2})) end, "maximum: Incompatible shapes")
e(function() return np.where(x, x, x:astype("bfloat16")) end, "where: operands have different dtypes")
e(function() return np.max(x, 2) end, "max: axis 2 is out of bounds for array of dimension 2")
e(function() return np.argmax(x, -3) end, "argmax: axis -3 is out of bounds")
e(function() return sl.nn.softmax(x, 5) end, "softmax: axis 5 is out of bounds")
e(function() return np.max(sl.arange(4)) end, "max: needs a floating-point array, got i32[4]")
e(function() return np.transpose(x, {0, 0}) end,
  "transpose permutation isn't a permutation of operand dimensions, got permutation (0, 0) "
  .. "for operand shape (2, 3)")
e(function() return np.transpose(x, {0}) end, "got permutation (0) for operand shape (2, 3)")
e(function() return np.transpose(x, {0, 2}) end,
  "transpose: axis 2 is out of bounds for array of dimension 2")
e(function() return x[2] end, "index 2 is out of bounds for axis 0 with size 2")
e(function() return x[{0, -4}] end, "index -4 is out of bounds for axis 1 with size 3")
e(function() return x[{0, 0, 0}] end,
  "Too many indices: 2-dimensional array indexed with 3 regular indices.")
e(function() return x[{{2, 1}}] end, "the slice 2:1:1 of axis 0 (size 2) is empty")
e(function() return x[{{0, 2, 0}}] end, "slice step cannot be zero")
e(function() return x[{{nil, nil, -1}}] end, "a negative slice step (-1) is not supported")
e(function() return x[{"...", "..."}] end, "an index can only have a single ellipsis")
e(function() return x[{true}] end, "index: item 1 is boolean: use an integer, a slice")
e(function() return x[1.5] end, "index: item 1 is number")
e(function() return np.einsum("ijk,jk->ik", a, b) end,
  "Einstein sum subscript ijk does not contain the correct number of indices for operand 0.")
e(function() return np.einsum("ij,jk->ik", a, a) end,
  "Size of label 'j' for operand 1 (2) does not match previous terms (3).")
e(function() return np.einsum("ij,jk->iz", a, b) end,
  "einstein sum subscripts string included output subscript 'z' which never appeared in an input")
e(function() return np.einsum("ij,jk->ii", a, b) end,
  "einstein sum subscripts string includes output subscript 'i' multiple times")
e(function() return np.einsum("ij,jk,kl->il", a, b) end,
  "fewer operands provided to einstein sum function than specified in the subscripts string")
e(function() return np.einsum("ij->i", a, b) end, "more operands provided")
e(function() return np.einsum("ii->i", sl.ones({3, 3})) end, "label 'i' repeats in operand 0")
e(function() return np.einsum("i...->i", a) end, "only letters are supported")
e(function() return np.einsum("ij,jk->ik", a, sl.arange(12):reshape(3, 4)) end,
  "einsum: needs a floating-point array")
e(function() return np.broadcast_to(x, {4, 3}) end, "broadcast_to: cannot broadcast (2, 3) to (4, 3)")
-- out_sharding: an axis the mesh lacks, a spec longer than the rank, an indivisible dimension
sl.set_mesh(m)
local xm = sl.device_put(sl.arange(32.0):reshape(8, 4), sl.P("X", nil))
local wm = sl.ones({4, 6})
e(function() return np.einsum("ij,jk->ik", xm, wm, {out_sharding = sl.P("Z")}) end,
  "einsum out_sharding: sharding: spec P('Z') names axis 'Z' (dimension 0), which is not in Mesh(")
e(function() return np.einsum("ij,jk->ik", xm, wm, {out_sharding = sl.P("X", nil, "Y")}) end,
  "has 3 entries but the array has rank 2")
e(function() return np.einsum("ij,jk->ik", xm, sl.ones({4, 3}), {out_sharding = sl.P(nil, "X")}) end,
  "dimension 1 of size 3 is not divisible by 4")
e(function() return np.broadcast_to(sl.ones({4}), {6, 4}, {out_sharding = sl.P("X")}) end,
  "dimension 0 of size 6 is not divisible by 4")
e(function() return np.reshape(xm, {2, 16}, {out_sharding = sl.P("X")}) end,
  "dimension 0 of size 2 is not divisible by 4")
e(function() return np.einsum("ij,jk->ik", xm, wm, {out_sharding = "X"}) end, "out_sharding")
e(function() return np.einsum("ij,jk->ik", xm, wm, {out = sl.P()}) end, "out")
sl.set_mesh(nil)
-- The shell carries on.
close(np.max(x + 1):item(), 7)
print("numpy_ops_test: ok")
