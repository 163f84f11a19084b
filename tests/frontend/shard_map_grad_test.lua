-- tests/frontend/shard_map_grad_test.lua: sl.grad / sl.value_and_grad / sl.jit(sl.grad) of
-- sl.shard_map'd functions: the gradient appended to the per-device program with JAX's
-- transposes under varying manual axes (engine/frontend/vma.h). Each loss is checked against
-- the same loss written on whole arrays (sharded == one device), and one against central
-- differences; every collective's transpose is exercised. Also sl.remat's errors.
local h = dofile(arg[0]:match("^(.*)/") .. "/../shell/helpers.lua")
local np, P = sl.numpy, sl.P

local function close(a, b, tol, what)
  if type(a) == "table" then
    assert(type(b) == "table" and #a == #b, (what or "") .. ": shapes differ")
    for i = 1, #a do close(a[i], b[i], tol, what) end
    return
  end
  tol = tol or 1e-5
  assert(math.abs(a - b) <= tol * math.max(1, math.abs(b)),
         string.format("%s: %.9g vs %.9g", what or "", a, b))
end

-- Deterministic, non-trivial values.
local function vals(shape, seed)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local t = {}
  for k = 1, n do t[k] = math.sin(seed * 7.3 + k * 1.7) end
  return sl.array(t):reshape(table.unpack(shape))
end

local mesh = sl.make_mesh({4}, {"b"})
sl.set_mesh(mesh)
local W1, b1, W2 = vals({8, 8}, 1), vals({8}, 2), vals({8, 4}, 3)
local X, Y = vals({16, 8}, 4), vals({16, 4}, 5)
local params = {W1, b1, W2}

local function predict(p, x)
  local hdn = np.tanh(np.dot(x, p[1]) + p[2])
  return np.dot(hdn, p[3])
end
local function loss(p, x, y) return np.mean(np.sum((predict(p, x) - y) ^ 2, -1)) end
local want = sl.grad(loss)(params, X, Y)

-- data parallel: params invariant (P()), the batch split; pmean of the local losses. The
-- params' cotangents are varying and summed over b where they meet the batch (pvary's transpose).
local loss_dp = sl.shard_map(function(p, x, y)
  return sl.lax.pmean(loss(p, x, y), "b")
end, {in_specs = {P(), P("b"), P("b")}, out_specs = P()})
local Xs, Ys = sl.device_put(X, P("b")), sl.device_put(Y, P("b"))
close(loss_dp(params, Xs, Ys):item(), loss(params, X, Y):item(), 1e-5, "dp loss")
local g = sl.grad(loss_dp)(params, Xs, Ys)
for k = 1, 3 do close(g[k]:totable(), want[k]:totable(), 1e-4, "dp grad " .. k) end
local v, g2 = sl.value_and_grad(loss_dp)(params, Xs, Ys)
close(v:item(), loss(params, X, Y):item(), 1e-5, "value_and_grad value")
close(g2[1]:totable(), want[1]:totable(), 1e-4, "value_and_grad grad")
g2 = sl.jit(sl.grad(loss_dp))(params, Xs, Ys)
close(g2[3]:totable(), want[3]:totable(), 1e-4, "jit(grad)")
-- argnums: the batch's gradient is varying, assembled from its blocks by its in_spec
local gx = sl.grad(loss_dp, 1)(params, Xs, Ys)
close(gx:totable(), sl.grad(loss, 1)(params, X, Y):totable(), 1e-4, "dp grad x")
assert(tostring(sl.typeof(gx)) == "f32[16@b,8]", tostring(sl.typeof(gx)))

-- central differences on W2[1][1] (float32: a step of 1e-2 on a smooth loss)
local function bumped(d)
  local w = W2:totable()
  w[1][1] = w[1][1] + d
  return {W1, b1, sl.array(w)}
end
local fd = (loss_dp(bumped(1e-2), Xs, Ys):item() - loss_dp(bumped(-1e-2), Xs, Ys):item()) / 2e-2
close(g[3]:totable()[1][1], fd, 2e-3, "finite differences")

-- FSDP: each param split over b and all_gathered before use (all_gather's transpose is
-- psum_scatter: the gathered weight is varying, its gradient summed back into the blocks).
local loss_fsdp = sl.shard_map(function(p, x, y)
  local full = {}
  for k = 1, 3 do full[k] = sl.lax.all_gather(p[k], "b", {tiled = true}) end
  return sl.lax.pmean(loss(full, x, y), "b")
end, {in_specs = {P("b"), P("b"), P("b")}, out_specs = P()})
local ps = {sl.device_put(W1, P("b")), sl.device_put(b1, P("b")), sl.device_put(W2, P("b"))}
close(loss_fsdp(ps, Xs, Ys):item(), loss(params, X, Y):item(), 1e-5, "fsdp loss")
g = sl.grad(loss_fsdp)(ps, Xs, Ys)
for k = 1, 3 do close(g[k]:totable(), want[k]:totable(), 1e-4, "fsdp grad " .. k) end
assert(tostring(sl.typeof(g[1])) == "f32[8@b,8]", tostring(sl.typeof(g[1])))

-- tensor parallel: a column-split matmul finished by psum_scatter (transpose: all_gather).
local f2 = sl.make_mesh({2}, {"f"})
sl.set_mesh(f2)
local A, B = vals({4, 6}, 6), vals({6, 8}, 7)
local function tp_whole(a, b) return np.sum(np.tanh(np.dot(a, b))) end
local tp = sl.shard_map(function(a, b)
  local part = sl.lax.psum_scatter(np.dot(a, b), "f", {scatter_dimension = 1, tiled = true})
  return sl.lax.psum(np.sum(np.tanh(part)), "f")
end, {in_specs = {P(nil, "f"), P("f", nil)}, out_specs = P()})
local As, Bs = sl.device_put(A, P(nil, "f")), sl.device_put(B, P("f", nil))
close(tp(As, Bs):item(), tp_whole(A, B):item(), 1e-5, "tp loss")
local ga, gb = sl.grad(tp, {0, 1})(As, Bs)
close(ga:totable(), sl.grad(tp_whole, 0)(A, B):totable(), 1e-4, "tp grad a")
close(gb:totable(), sl.grad(tp_whole, 1)(A, B):totable(), 1e-4, "tp grad b")

-- ppermute (cyclic and partial shifts: the transpose sends back), all_to_all, and psum of an
-- invariant value (n * x: its cotangent is psummed, n per element).
sl.set_mesh(mesh)
local Z = vals({8, 4}, 8)
local w = vals({2, 4}, 9)
local function perm_loss(z, wt, shift_pairs)
  return sl.shard_map(function(zb, wb)
    local moved = sl.lax.ppermute(zb, "b", shift_pairs)
    return sl.lax.psum(np.sum(np.sin(moved) * wb), "b")
  end, {in_specs = {P("b"), P()}, out_specs = P()})
end
local Zs = sl.device_put(Z, P("b"))
for _, pairs in ipairs({{{0, 1}, {1, 2}, {2, 3}, {3, 0}}, {{0, 1}, {1, 2}, {2, 3}}}) do
  local f = perm_loss(Zs, w, pairs)
  -- whole arrays: block r of the result is block r - 1 (or zeros for block 0 when partial)
  local function whole(z, wt)
    local zt = z:reshape(4, 2, 4)
    local rows = {}
    for r = 0, 3 do
      local src = (r - 1) % 4
      if #pairs == 3 and r == 0 then
        rows[#rows + 1] = np.zeros({2, 4})
      else
        rows[#rows + 1] = np.sin(zt[src])
      end
    end
    return np.sum(np.stack(rows) * wt)
  end
  close(f(Zs, w):item(), whole(Z, w):item(), 1e-5, "ppermute loss")
  local gz, gw = sl.grad(f, {0, 1})(Zs, w)
  close(gz:totable(), sl.grad(whole, 0)(Z, w):totable(), 1e-4, "ppermute grad z")
  close(gw:totable(), sl.grad(whole, 1)(Z, w):totable(), 1e-4, "ppermute grad w")
end

local a2a = sl.shard_map(function(zb, wb)
  local t = sl.lax.all_to_all(zb, "b", 1, 0, {tiled = true})  -- (2, 4) -> (8, 1)
  return sl.lax.psum(np.sum(np.sin(t) * wb), "b")
end, {in_specs = {P("b"), P("b")}, out_specs = P()})
local w2 = vals({32, 1}, 10)
local W2s = sl.device_put(w2, P("b"))
-- whole arrays: member m's result block is column m of Z, rows in order (Z.T's row m)
local function a2a_whole(z, wt) return np.sum(np.sin(z.T:reshape(32, 1)) * wt) end
close(a2a(Zs, W2s):item(), a2a_whole(Z, w2):item(), 1e-5, "all_to_all loss")
close(sl.grad(a2a)(Zs, W2s):totable(), sl.grad(a2a_whole)(Z, w2):totable(), 1e-4,
      "all_to_all grad")

local inv = sl.shard_map(function(wb)
  return np.sum(sl.lax.psum(wb * wb, "b"))  -- invariant wb: psum is 4 * wb * wb
end, {in_specs = {P()}, out_specs = P()})
close(sl.grad(inv)(w):totable(), (w * 8):totable(), 1e-5, "psum of an invariant")

-- pcast to varying: its cotangent is summed over the axis.
local pc = sl.shard_map(function(wb, zb)
  local wv = sl.lax.pcast(wb, "b", {to = "varying"})
  return sl.lax.psum(np.sum(wv * zb), "b")
end, {in_specs = {P(), P("b")}, out_specs = P()})
local gw = sl.grad(pc)(w, Zs)
close(gw:totable(), sl.grad(function(wt, z) return np.sum(z:reshape(4, 2, 4) * wt) end)(w, Z):totable(),
      1e-5, "pcast grad")

-- errors: a varying loss is check_vma's error; pmax has no VJP; pcast outside shard_map.
h.expect_error(function()
  sl.grad(sl.shard_map(function(zb) return np.sum(zb) end, {in_specs = {P("b")}, out_specs = P()}))(Zs)
end, "replicated across mesh axis 'b'")
h.expect_error(function() sl.lax.pcast(w, "b", {to = "varying"}) end, "pcast: unbound axis name 'b'")
h.expect_error(function()
  sl.shard_map(function(wb) return sl.lax.pcast(sl.lax.pcast(wb, "b", {to = "varying"}), "b",
                                                {to = "varying"}) end,
               {in_specs = {P()}, out_specs = P("b")})(w)
end, "Unsupported pcast from=varying, to='varying'")
h.expect_error(function()
  sl.shard_map(function(wb) return sl.lax.pcast(wb, "b", {to = "sideways"}) end,
               {in_specs = {P()}, out_specs = P("b")})(w)
end, "Got unexpected `to` value")
-- in_specs as a pytree prefix: a table of specs for a table argument; one not matching the
-- argument's structure is an error. Without mesh, a shard_map runs on the mesh set at the call.
local seen = {}
local nested = sl.shard_map(function(p, zb)
  seen[1], seen[2] = tostring(sl.typeof(p[1])), tostring(sl.typeof(p[2]))
  return sl.lax.psum(np.sum(zb * p[2]) + np.sum(p[1]) * 0, "b")
end, {in_specs = {{P(), P("b")}, P("b")}, out_specs = P()})
local w8 = vals({8, 4}, 11)
local gp = sl.grad(nested)({w, sl.device_put(w8, P("b"))}, Zs)
assert(seen[1] == "f32[2,4]" and seen[2] == "f32[2,4]{V:b}", seen[1] .. " " .. seen[2])
close(gp[2]:totable(), Z:totable(), 1e-6, "nested in_specs grad")
h.expect_error(function() nested({w, w8, w8}, Zs) end,
               "in_specs is not a tree prefix of the argument: 2 specs for 3 entries")
h.expect_error(function() nested(w, Zs) end,
               "in_specs has a table of specs where the argument has an Array")
local on_context = sl.shard_map(function(zb) return zb * 2 end,
                                {in_specs = P("b"), out_specs = P("b")})
sl.set_mesh(sl.make_mesh({2}, {"b"}))
local r = on_context(sl.device_put(sl.arange(4.0), P("b")))
assert(r.sharding.mesh.shape.b == 2, "the mesh of the call")
sl.set_mesh(mesh)

-- sl.remat: outside a trace f runs as it is; in grad, the values its policy does not save are
-- recomputed (same gradients); bad options and a failing policy are errors.
local sq = sl.remat(function(v) return np.sum(np.sin(v) * v) end)
close(sq(w):item(), np.sum(np.sin(w) * w):item(), 1e-6, "remat eager")
local plain = sl.grad(function(v) return np.sum(np.sin(v) * v) end)(w)
close(sl.grad(sq)(w):totable(), plain:totable(), 1e-6, "remat grad")
h.expect_error(function() sl.remat(sq, {policy = 3}) end, "policy")
h.expect_error(function() sl.remat(sq, {polcy = print}) end, "polcy")
h.expect_error(function()
  sl.grad(sl.remat(function(v) return np.sum(v * v) end, {policy = function() error("no") end}))(w)
end, "remat: policy:")
sl.set_mesh(nil)
print("shard_map_grad_test ok")
