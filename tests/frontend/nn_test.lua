-- tests/frontend/nn_test.lua: the engine's fused ops through sl.nn (rmsnorm, the softmax cross
-- entropy, causal attention) against plain Lua, sharded equal to one device, their gradients
-- against finite differences, and a small model trained with sl.value_and_grad.
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

local xv = {{1, 2, 3, 4}, {-1, 0.5, 2, -3}}
local sv = {1, 0.5, 2, -1}
-- rmsnorm
local y = sl.nn.rmsnorm(sl.array(xv), sl.array(sv), 1e-5):totable()
for i = 1, 2 do
  local ms = 0
  for j = 1, 4 do ms = ms + xv[i][j] ^ 2 / 4 end
  for j = 1, 4 do close(y[i][j], xv[i][j] / math.sqrt(ms + 1e-5) * sv[j]) end
end
-- cross entropy with integer labels
local labels = sl.array({2, 0}, {dtype = "int32"})
local xe = sl.nn.softmax_cross_entropy_with_integer_labels(sl.array(xv), labels):totable()
for i, lab in ipairs({2, 0}) do
  local s = 0
  for j = 1, 4 do s = s + math.exp(xv[i][j]) end
  close(xe[i], math.log(s) - xv[i][lab + 1])
end
-- causal attention, (B, T, N, H) = (1, 3, 1, 2)
local q = {{{{1, 0}}, {{0, 1}}, {{1, 1}}}}
local k = {{{{1, 2}}, {{0, 1}}, {{-1, 1}}}}
local v = {{{{1, 10}}, {{2, 20}}, {{3, 30}}}}
local o = sl.nn.dot_product_attention(sl.array(q), sl.array(k), sl.array(v), {is_causal = true}):totable()
for t = 1, 3 do
  local ws, tot = {}, 0
  for s = 1, t do
    local d = (q[1][t][1][1] * k[1][s][1][1] + q[1][t][1][2] * k[1][s][1][2]) / math.sqrt(2)
    ws[s] = math.exp(d); tot = tot + ws[s]
  end
  for c = 1, 2 do
    local want = 0
    for s = 1, t do want = want + ws[s] / tot * v[1][s][1][c] end
    close(o[1][t][1][c], want)
  end
end
h.expect_error(function() sl.nn.dot_product_attention(sl.array(q), sl.array(k), sl.array(v)) end,
               "only causal attention")
h.expect_error(function() sl.nn.rmsnorm(sl.array(xv), sl.array({1, 2})) end, "scale (2,) be (4,)")
h.expect_error(function() sl.nn.softmax_cross_entropy_with_integer_labels(sl.array(xv), sl.array({1, 0})) end,
               "must be int32")

-- Sharded equals one device, and gradients against finite differences: a two-layer model.
local m = sl.make_mesh({2, 2}, {"data", "model"})
sl.set_mesh(sl.make_mesh({1, 1}, {"data", "model"}))  -- one device with the same axis names
local key = sl.random.split(sl.random.key(3), 3)
local X = sl.random.normal(key[1], {8, 6})
local W1 = sl.random.normal(key[2], {6, 8}) * 0.5
local W2 = sl.random.normal(key[3], {8, 4}) * 0.5
local scale = sl.ones({8})
local Y = sl.array({0, 1, 2, 3, 3, 2, 1, 0}, {dtype = "int32"})
local function loss(w1, w2, x, s, yl)
  local hdn = sl.nn.rmsnorm(sl.nn.silu(np.matmul(x, w1, {out_sharding = sl.P("data", "model")})), s)
  local logits = np.matmul(hdn, w2, {out_sharding = sl.P("data", nil)})
  return np.mean(sl.nn.softmax_cross_entropy_with_integer_labels(logits, yl))
end
local vg = sl.jit(sl.value_and_grad(loss, {0, 1}))
local l1, g1a, g1b = vg(W1, W2, X, scale, Y)
local function on(mesh, a, spec) return sl.array(a:totable(), {mesh = mesh, sharding = spec, dtype = a.dtype}) end
local l2, g2a, g2b = vg(on(m, W1, sl.P(nil, "model")), on(m, W2, sl.P("model", nil)),
                        on(m, X, sl.P("data", nil)), on(m, scale, sl.P()), on(m, Y, sl.P("data")))
close(l2:item(), l1:item(), 1e-5)
close(g2a:totable(), g1a:totable(), 1e-4)
close(g2b:totable(), g1b:totable(), 1e-4)
assert(tostring(sl.typeof(g2a)) == "f32[6,8@model]", sl.typeof(g2a))
local w1t, g1t = W1:totable(), g1a:totable()
for _, ij in ipairs({{1, 1}, {3, 5}, {6, 8}}) do
  local i, j = ij[1], ij[2]
  local eps = 1e-2
  local p, mn = W1:totable(), W1:totable()
  p[i][j], mn[i][j] = w1t[i][j] + eps, w1t[i][j] - eps
  local fd = (loss(sl.array(p), W2, X, scale, Y):item() - loss(sl.array(mn), W2, X, scale, Y):item()) / (2 * eps)
  assert(math.abs(fd - g1t[i][j]) < 2e-3 + 2e-2 * math.abs(fd), string.format("%g vs %g", fd, g1t[i][j]))
end

-- A few steps of gradient descent lower the loss.
local step = sl.jit(function(w1, w2, x, s, yl)
  local l, d1, d2 = sl.value_and_grad(loss, {0, 1})(w1, w2, x, s, yl)
  return l, w1 - d1 * 0.5, w2 - d2 * 0.5
end)
local w1, w2 = W1, W2
local first, last
for i = 1, 20 do
  local l
  l, w1, w2 = step(w1, w2, X, scale, Y)
  first = first or l:item()
  last = l:item()
end
assert(last < 0.5 * first, string.format("loss %g -> %g", first, last))
assert(step:cache_info().compiles == 1)
print(string.format("nn_test ok (loss %.3f -> %.3f in 20 steps)", first, last))
