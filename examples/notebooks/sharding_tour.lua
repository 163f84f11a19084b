-- examples/notebooks/sharding_tour.lua: JAX's sharding tutorials ("Distributed arrays and
-- automatic parallelization", "Explicit sharding", "Autodiff and sharding", "Manual
-- parallelism with shard_map") redone in Lua on simulated devices, showing what the compiler did.
-- Run: shardlab --notebook examples/notebooks/sharding_tour.lua --html   (writes
-- sharding_tour.report.md and .html in the current directory, which git ignores; -o PATH: elsewhere)
-- Cells are jupytext percent cells (`-- %%`); docs/frontend.md describes the API.

-- %% [markdown]
-- # A sharding tour
--
-- Eight simulated CPU devices in one process. Every array below lives on them: each device
-- holds only its block. Every op is one of the engine's ops, compiled for the mesh; the
-- per-device programs, their collectives and their bytes are printed as we go.

-- %% A mesh, as jax.make_mesh makes it (Explicit axes by default)
mesh = sl.make_mesh({4, 2}, {"X", "Y"})
sl.set_mesh(mesh)
print(mesh)

-- %% An array sharded over both axes
x = sl.device_put(sl.arange(8 * 4.0):reshape(8, 4), sl.P("X", "Y"))
print(sl.typeof(x))
print(sl.visualize(x))
for _, s in ipairs(x:addressable_shards()) do
  if s.device < 3 then
    print(string.format("device %d holds rows %d:%d, cols %d:%d", s.device, s.index[1][1],
                        s.index[1][2], s.index[2][1], s.index[2][2]))
  end
end

-- %% [markdown]
-- ## Explicit sharding: shardings are types
--
-- Elementwise ops keep the sharding; a reduction keeps the other dims' shardings; a sum over
-- a sharded axis needs a cross-device reduction, which the compiler inserts.

-- %% Types propagate
print(sl.typeof(x * 2 + 1))
print(sl.typeof(sl.np.sum(x, 0)), sl.np.sum(x, 0))
print(sl.typeof(sl.np.sum(x, 1)), sl.np.sum(x, 1))

-- %% Mismatched shardings are type errors, with JAX's texts
xt = sl.device_put(x, sl.P("Y", "X"))
print(select(2, pcall(function() return x + xt end)))
print(select(2, pcall(sl.with_sharding_constraint, x, sl.P("X", nil))))
print("fix:", sl.typeof(sl.reshard(x, sl.P("X", nil))))

-- %% [markdown]
-- ## A contraction sharded over Y: the out_sharding picks the collective
--
-- `a (8, 16)` on `P('X', 'Y')` times `b (16, 4)` on `P('Y', None)`: each device multiplies its
-- blocks into a partial sum. Without `out_sharding` that is ambiguous in explicit mode; with
-- `P('X', None)` the compiler all-reduces over Y, with `P('X', 'Y')` it reduce-scatters.

-- %% The ambiguous matmul, and its two fixes
a = sl.device_put(sl.arange(8 * 16.0):reshape(8, 16), sl.P("X", "Y"))
b = sl.device_put(sl.arange(16 * 4.0):reshape(16, 4), sl.P("Y", nil))
print(select(2, pcall(sl.np.matmul, a, b)))
for _, spec in ipairs({sl.P("X", nil), sl.P("X", "Y")}) do
  local f = sl.jit(function(p, q) return sl.np.matmul(p, q, {out_sharding = spec}) end,
                   {name = "matmul"})
  local c = f:lower(a, b):compile()
  print(tostring(spec), sl.typeof(f(a, b)), "bytes received per device over Y:",
        c.cost.collective_bytes.Y)
  print(c:text())
end

-- %% [markdown]
-- ## Autodiff and sharding: cotangents take their primal's type

-- %% A small model and its gradients
keys = sl.random.split(sl.random.key(0), 3)
X = sl.random.normal(keys[1], {8, 16}, {sharding = sl.P("X", nil)})
W = sl.random.normal(keys[2], {16, 4}, {sharding = sl.P(nil, "Y")}) * 0.3
labels = sl.array({0, 1, 2, 3, 0, 1, 2, 3}, {dtype = "int32", sharding = sl.P("X")})
function loss(w, x, y)
  local logits = sl.np.matmul(sl.nn.gelu(x), w, {out_sharding = sl.P("X", nil)})
  return sl.np.mean(sl.nn.softmax_cross_entropy_with_integer_labels(logits, y))
end
dW = sl.grad(loss)(W, X, labels)
print("W:", sl.typeof(W), " dW:", sl.typeof(dW))

-- %% Training it: one compiled step, called 30 times
step = sl.jit(function(w, x, y)
  local l, g = sl.value_and_grad(loss)(w, x, y)
  return l, w - g * 0.5
end, {name = "train_step"})
losses = {}
for i = 1, 30 do
  local l
  l, W = step(W, X, labels)
  losses[#losses + 1] = l:item()
end
print(string.format("loss %.3f -> %.3f; compiled %d time(s)", losses[1], losses[#losses],
                    step:cache_info().compiles))
print(plot.spark(losses))

-- %% [markdown]
-- ## Manual parallelism with shard_map
--
-- The same matmul written per device: each device multiplies its blocks, and we choose the
-- collective ourselves (`psum` is an all-reduce, `psum_scatter` a reduce-scatter).

-- %% matmul_basic and matmul_reduce_scatter
b = sl.device_put(b, sl.P("Y", nil))
matmul_basic = sl.shard_map(function(ab, bb)
  print("per-device blocks:", sl.typeof(ab), sl.typeof(bb))
  return sl.lax.psum(sl.np.dot(ab, bb), "Y")
end, {mesh = mesh, in_specs = {sl.P("X", "Y"), sl.P("Y", nil)}, out_specs = sl.P("X", nil)})
matmul_rs = sl.shard_map(function(ab, bb)
  return sl.lax.psum_scatter(sl.np.dot(ab, bb), "Y", {scatter_dimension = 1, tiled = true})
end, {mesh = mesh, in_specs = {sl.P("X", "Y"), sl.P("Y", nil)}, out_specs = sl.P("X", "Y")})
c1, c2 = matmul_basic(a, b), matmul_rs(a, b)
print(sl.typeof(c1), sl.typeof(c2), "same values:", c1:totable()[8][4] == c2:totable()[8][4])
print(matmul_rs:lower(a, b):compile():text())

-- %% ppermute: a ring shift along X
ring = sl.shard_map(function(blk) return sl.lax.ppermute(blk, "X", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}) end,
                    {mesh = mesh, in_specs = {sl.P("X")}, out_specs = sl.P("X")})
print(ring(sl.arange(8.0, {sharding = sl.P("X")})))

-- %% all_to_all: row blocks become column blocks (tiled), the values unchanged
rows = sl.device_put(sl.arange(64.0):reshape(8, 8), sl.P("X", nil))
to_cols = sl.shard_map(function(blk) return sl.lax.all_to_all(blk, "X", 1, 0, {tiled = true}) end,
                       {mesh = mesh, in_specs = {sl.P("X", nil)}, out_specs = sl.P(nil, "X")})
cols = to_cols(rows)
k = to_cols:lower(rows):compile()
print(sl.typeof(rows), "->", sl.typeof(cols), "same values:", cols:totable()[7][3] == rows:totable()[7][3],
      "bytes received per device over X:", k.cost.collective_bytes.X)

-- %% [markdown]
-- ## Switching modes locally: auto_axes and explicit_axes
--
-- The explicit-sharding tutorial's "Working around unimplemented sharding rules": adding a
-- `f32[4@X,4]` to a `f32[4,4@X]` is a type error in explicit mode (the result would use X
-- twice). Under `auto_axes` the compiler chooses how, and `out_sharding` types the result.
-- (`axes = 'X'` switches one axis: Auto over X, still Explicit over Y; inside a jit the switch
-- is part of the jit's program.)

-- %% auto_axes
some_x = sl.reshard(sl.arange(16.0):reshape(4, 4), sl.P("X", nil))
some_y = sl.reshard(sl.arange(16.0):reshape(4, 4), sl.P(nil, "X"))
print(select(2, pcall(function() return some_x + some_y end)))
add_auto = sl.auto_axes(function(p, q) return p + q end, {out_sharding = sl.P("X", nil)})
print("Result type:", sl.typeof(add_auto(some_x, some_y)))
print(add_auto:lower(some_x, some_y):compile():text())

-- %% explicit_axes on an Auto mesh: inside, shardings are types again
auto_mesh = sl.make_mesh({2, 4}, {"X", "Y"}, {axis_types = "Auto"})
sl.use_mesh(auto_mesh, function()
  local some = sl.device_put(sl.arange(16.0):reshape(4, 4), sl.P("X", "Y"))
  local explicit_g = sl.explicit_axes(function(y)
    local z = y * 2
    print("z.sharding inside g:", sl.typeof(z))
    return z
  end, {in_sharding = sl.P("X", "Y")})
  explicit_g(some)
end)

-- %% [markdown]
-- ## vmap, pytrees and donation
--
-- `sl.vmap` traces a per-example function once and batches its program (the batch keeps its
-- sharding over X); parameters can be a table; `donate_argnums` lets the update write the new
-- parameters into the old ones' buffers (the old Arrays are deleted, as in JAX).

-- %% vmap of a per-example function over a batch sharded on X
params = {w = W, b = sl.zeros({4})}
predict = function(p, row) return sl.nn.gelu(sl.np.matmul(row, p.w) + p.b) end
batched = sl.vmap(predict, {nil, 0})
print(sl.typeof(batched(params, X)), "per-example and batched agree:",
      math.abs(batched(params, X):totable()[3][2] - predict(params, sl.array(X:totable()[3])):totable()[2]) < 1e-5)

-- %% A training step on a table of parameters, donating them
function loss_p(p, x, y)
  local logits = sl.np.matmul(sl.nn.gelu(x), p.w, {out_sharding = sl.P("X", nil)}) + p.b
  return sl.np.mean(sl.nn.softmax_cross_entropy_with_integer_labels(logits, y))
end
update = sl.jit(function(p, x, y)
  local l, g = sl.value_and_grad(loss_p)(p, x, y)
  return l, {w = p.w - g.w * 0.5, b = p.b - g.b * 0.5}
end, {donate_argnums = 0, name = "update"})
old = params
for i = 1, 10 do l, params = update(params, X, labels) end
print(string.format("loss %.3f; compiled %d time(s)", l:item(), update:cache_info().compiles))
print(select(2, pcall(function() return old.w + 1 end)))
kept = sl.jit(function(p, x, y) local l, g = sl.value_and_grad(loss_p)(p, x, y)
  return l, {w = p.w - g.w * 0.5, b = p.b - g.b * 0.5} end)
print("argument bytes per device, donated vs not:",
      update:lower(params, X, labels):compile().memory.argument_bytes,
      kept:lower(params, X, labels):compile().memory.argument_bytes)
-- %% [markdown]
-- ## numpy ops on sharded arrays
--
-- Comparisons, `where`, reductions, `transpose` and `einsum` keep or move the shardings the
-- way JAX's do: a transposed dim takes its sharding along, a reduction keeps the other dims',
-- and einsum's `out_sharding` picks the collective (docs/frontend.md, "Ops").

-- %% transpose, max, softmax, where and indexing on f32[8@X,4@Y]
xs = sl.device_put(sl.arange(32.0):reshape(8, 4), sl.P("X", "Y"))
print(sl.typeof(xs.T), sl.typeof(sl.np.max(xs, 1)), sl.typeof(sl.nn.softmax(xs)))
print(sl.np.where(sl.np.greater(xs, 20), xs, 0)[{{nil, nil, 2}, -1}])

-- %% einsum with out_sharding: a reduce-scatter over Y
es = sl.jit(function(p, q) return sl.np.einsum("ij,jk->ik", p, q, {out_sharding = sl.P("X", "Y")}) end)
w4 = sl.device_put(sl.ones({4, 6}), sl.P("Y", nil))
print(sl.typeof(es(xs, w4)))
print(es:lower(xs, w4):compile():text())
