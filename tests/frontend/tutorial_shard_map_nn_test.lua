-- tests/frontend/tutorial_shard_map_nn_test.lua: the neural-network examples of JAX's tutorial
-- "Manual parallelism with shard_map" (docs/notebooks/shard_map.md of jax-ml/jax at commit
-- cec06d1, "Neural networks": code cells 53-69), translated mechanically: Python syntax to Lua
-- (tuples as tables, tuple unpacking as table.unpack, `for W, b in params` as a loop over
-- ipairs, keyword arguments as a trailing table, decorators as calls, `x ** 2` as `x ^ 2`),
-- `jnp.` read as `sl.numpy.`, `jax.` as `sl.`, nothing renamed. The tutorial prints losses of
-- its random data (JAX's PRNG, which shardlab's is not), so each cell checks the relations it
-- prints: the sharded loss equals the reference loss, and allclose(...) of the gradients is
-- True. What cannot run is listed in `missing`.
local jax, jnp = sl, sl.numpy
local t = dofile(arg[0]:match("^(.*)/") .. "/tutorial.lua")
local cannot, expect = t.cannot, t.expect
local P = jax.sharding.PartitionSpec
local NamedSharding = jax.sharding.NamedSharding
local Mesh = jax.sharding.Mesh
local tree_map, tree_all = jax.tree_util.tree_map, jax.tree_util.tree_all
assert(#jax.devices() == 8, "run with SHARDLAB_LOCAL_DEVICES=8")
local function close(a, b, what)  -- a check of this test: two printed losses are equal
  assert(math.abs(a - b) <= 1e-4 * math.max(1, math.abs(b)), string.format("%s: %.9g vs %.9g",
                                                                           what, a, b))
end

-- cell 53
local function predict(params, inputs)
  local outputs
  for _, Wb in ipairs(params) do
    local W, b = table.unpack(Wb)
    outputs = jnp.dot(inputs, W) + b
    inputs = jax.nn.relu(outputs)
  end
  return outputs
end

local function loss(params, batch)
  local inputs, targets = table.unpack(batch)
  local predictions = predict(params, inputs)
  return jnp.mean(jnp.sum((predictions - targets) ^ 2, {axis = -1}))
end

-- cell 54: `key, *keys = jax.random.split(key, n)` as the first key and the rest;
-- list(map(init_layer, keys, sizes[:-1], sizes[1:])) as a loop.
local function init_layer(key, n_in, n_out)
  local k1, k2 = table.unpack(jax.random.split(key))
  local W = jax.random.normal(k1, {n_in, n_out}) / jnp.sqrt(n_in)
  local b = jax.random.normal(k2, {n_out})
  return {W, b}
end

local function init(key, layer_sizes, batch_size)
  local keys = jax.random.split(key, #layer_sizes)
  key, keys = keys[1], {table.unpack(keys, 2)}
  local params = {}
  for i = 1, #keys do params[i] = init_layer(keys[i], layer_sizes[i], layer_sizes[i + 1]) end

  keys = jax.random.split(key, 3)
  key, keys = keys[1], {table.unpack(keys, 2)}
  local inputs = jax.random.normal(keys[1], {batch_size, layer_sizes[1]})
  local targets = jax.random.normal(keys[2], {batch_size, layer_sizes[#layer_sizes]})

  return params, {inputs, targets}
end

-- cell 55
local layer_sizes = {784, 128, 128, 128, 128, 128, 8}
local batch_size = 32

local params, batch = init(jax.random.key(0), layer_sizes, batch_size)
expect(jax.typeof(params[1][1]), "f32[784,128]", "cell 55 W")
expect(jax.typeof(batch[2]), "f32[32,8]", "cell 55 targets")

-- cell 56
local mesh = jax.make_mesh({8}, {'batch'})
jax.set_mesh(mesh)

-- replicate initial params on all devices, shard data batch over devices
batch = jax.device_put(batch, NamedSharding(mesh, P('batch')))
params = jax.device_put(params, NamedSharding(mesh, P()))
expect(jax.typeof(batch[1]), "f32[32@batch,784]", "cell 56 inputs")

-- adapt the loss function to sum the losses across devices
local loss_dp = jax.shard_map({out_specs = P()})(function(params, local_batch)
  local inputs, targets = table.unpack(local_batch)
  local predictions = predict(params, inputs)  -- use reference 'predict`
  local local_loss = jnp.mean(jnp.sum((predictions - targets) ^ 2, {axis = -1}))
  return jax.lax.pmean(local_loss, 'batch')
end)

-- cell 57: the two printed losses are equal.
local printed = {jax.jit(loss)(params, batch), jax.jit(loss_dp)(params, batch)}
print(printed[1]); print(printed[2])
expect(jax.typeof(printed[2]), "f32[]", "cell 57 loss_dp")
close(printed[2]:item(), printed[1]:item(), "cell 57")

-- cell 58: prints True. (functools.partial(jnp.allclose, ...) as the function it makes.)
local function allclose(a, b)
  return tree_all(tree_map(function(x, y) return jnp.allclose(x, y, {atol = 1e-2, rtol = 1e-2}) end,
                           a, b))
end

expect(allclose(jax.jit(jax.grad(loss))(params, batch),
                jax.jit(jax.grad(loss_dp))(params, batch)), "true", "cell 58")

-- cell 59: `@partial(jax.remat, policy=lambda op, *_, **__: str(op) != 'all_gather')` is
-- written as the call partial makes, jax.remat(f, {policy = ...}); the policy gets the op's
-- name (JAX's primitive, whose str is its name).
mesh = jax.make_mesh({4}, {'batch'})
jax.set_mesh(mesh)
batch = jax.device_put(batch, P('batch'))
params = jax.device_put(params, P('batch'))
expect(jax.typeof(params[1][1]), "f32[784@batch,128]", "cell 59 W")

-- adapt the prediction function to gather weights just before their use,
-- and to re-gather them on the backward pass (rather than saving them)
local predict_fsdp = jax.remat(function(params_frag, inputs)
  local outputs
  for _, Wb_frag in ipairs(params_frag) do
    local W_frag, b_frag = table.unpack(Wb_frag)
    local W = jax.lax.all_gather(W_frag, 'batch', {tiled = true})
    local b = jax.lax.all_gather(b_frag, 'batch', {tiled = true})
    outputs = jnp.dot(inputs, W) + b
    inputs = jax.nn.relu(outputs)
  end
  return outputs
end, {policy = function(op, ...) return tostring(op) ~= 'all_gather' end})

local loss_fsdp = jax.shard_map({out_specs = P()})(function(local_params, local_batch)
  local inputs, targets = table.unpack(local_batch)
  local predictions = predict_fsdp(local_params, inputs)
  local local_loss = jnp.mean(jnp.sum((predictions - targets) ^ 2, {axis = -1}))
  return jax.lax.pmean(local_loss, 'batch')
end)

-- cell 60: two equal losses, then True.
local repl_params = jax.device_put(params, P())
local repl_batch = jax.device_put(batch, P())
printed = {jax.jit(loss)(repl_params, repl_batch), jax.jit(loss_fsdp)(params, batch)}
print(printed[1]); print(printed[2])
close(printed[2]:item(), printed[1]:item(), "cell 60")

expect(allclose(jax.jit(jax.grad(loss))(repl_params, repl_batch),
                jax.jit(jax.grad(loss_fsdp))(params, batch)), "true", "cell 60 grads")
-- (a check of this test: the policy is applied. The backward reads the gathered weights of
-- layers 2-6 (for d inputs), which it gathers again instead of keeping: 12 all_gathers in the
-- forward, 5 more in the backward.)
local function count_all_gathers(f)
  local n = 0
  for _ in f:lower(params, batch):compile():text():gmatch("= all_gather%[") do n = n + 1 end
  return n
end
assert(count_all_gathers(jax.grad(loss_fsdp)) == 12 + 5, "cell 60: remat's policy")

-- cell 61: gemm_tp is defined after predict_tp, which calls it (Python looks it up at the
-- call); Lua needs the local declared first.
mesh = jax.make_mesh({8}, {'feats'})
jax.set_mesh(mesh)

batch = jax.device_put(batch, NamedSharding(mesh, P(nil, 'feats')))
params = jax.device_put(params, NamedSharding(mesh, P('feats')))

local gemm_tp
local function predict_tp(params, inputs)
  local outputs
  for _, Wb in ipairs(params) do
    local W, b = table.unpack(Wb)
    outputs = gemm_tp(inputs, W, b)
    inputs = jax.nn.relu(outputs)
  end
  return outputs
end

gemm_tp = jax.shard_map({in_specs = {P(nil, 'feats'), P('feats', nil), P('feats')},
                         out_specs = P(nil, 'feats')})(function(inputs, W, b)
  local block_result = jnp.dot(inputs, W)
  return jax.lax.psum_scatter(block_result, 'feats',
                              {scatter_dimension = 1, tiled = true}) + b
end)

local function loss_tp(params, batch)
  local inputs, targets = table.unpack(batch)
  local predictions = predict_tp(params, inputs)
  return jnp.mean(jnp.sum((predictions - targets) ^ 2, {axis = -1}))  -- NOTE psum!
end
-- (the tutorial does not call loss_tp; run eagerly, it is the reference loss)
close(loss_tp(params, batch):item(), loss(jax.device_put(params, P()), jax.device_put(batch, P())):item(),
      "cell 61 loss_tp")

-- cell 62: `P(('feats', 'batch'))` is P({'feats', 'batch'}); jax.remat as in 59.
mesh = jax.make_mesh({4, 2}, {'batch', 'feats'})
jax.set_mesh(mesh)

batch = jax.device_put(batch, NamedSharding(mesh, P('batch', 'feats')))
params = jax.device_put(params, NamedSharding(mesh, P({'feats', 'batch'})))

-- mostly same as previous predict_fsdp definition, except we call gemm_tp
local predict_fsdp_tp = jax.remat(function(params_frag, inputs)
  local outputs
  for _, Wb_frag in ipairs(params_frag) do
    local W_frag, b_frag = table.unpack(Wb_frag)
    local W = jax.lax.all_gather(W_frag, 'batch', {tiled = true})
    local b = jax.lax.all_gather(b_frag, 'batch', {tiled = true})
    local block_result = jnp.dot(inputs, W)
    outputs = jax.lax.psum_scatter(block_result, 'feats',
                                   {scatter_dimension = 1, tiled = true}) + b
    inputs = jax.nn.relu(outputs)
  end
  return outputs
end, {policy = function(op, ...) return tostring(op) ~= 'all_gather' end})

local loss_fsdp_tp = jax.shard_map({in_specs = {P({'feats', 'batch'}), P('batch', 'feats')},
                                    out_specs = P()})(function(local_params, local_batch)
  local inputs, targets = table.unpack(local_batch)
  local predictions = predict_fsdp_tp(local_params, inputs)
  local sq_err = jax.lax.psum(jnp.sum((predictions - targets) ^ 2, {axis = -1}), 'feats')
  return jax.lax.pmean(jnp.mean(sq_err), 'batch')
end)

-- cell 63: two equal losses, then True.
repl_params = jax.device_put(params, P())
repl_batch = jax.device_put(batch, P())
printed = {jax.jit(loss)(repl_params, repl_batch), jax.jit(loss_fsdp_tp)(params, batch)}
print(printed[1]); print(printed[2])
close(printed[2]:item(), printed[1]:item(), "cell 63")

expect(allclose(jax.jit(jax.grad(loss))(repl_params, repl_batch),
                jax.jit(jax.grad(loss_fsdp_tp))(params, batch)), "true", "cell 63 grads")

-- cell 64: divmod(N, B) as N // B, N % B; f-strings as string.format.
local L = #params - 2        -- num layers, excluding first and last
local N = batch_size         -- batch size
local F = params[1][1].shape[2]  -- num features

-- choose some pipeline parameters
local S = 2      -- number of stages
local B = 8      -- size of each microbatch
assert(L % S == 0, "S (number of stages) must divide L (number of inner layers)")

-- compute some useful quantities
local M, ragged = N // B, N % B  -- M is number of microbatches
assert(ragged == 0, "B (size of each microbatch) must divide total batch size")
local K
K, ragged = M // S, M % S  -- K is microbatches per stage
assert(ragged == 0, "S (number of stages) must divide number of microbatches")
print(string.format('%d stages, %d layer(s) per stage, %d pipelined layers total', S, L // S, L))
print(string.format('%d examples per microbatch, %d microbatches total', B, M))
assert(L == 4 and F == 128 and M == 4 and K == 2, "cell 64")

-- cell 65: loss_pp's in_specs give params a tuple of specs (a pytree prefix: P() for the
-- first layer, P('stages') for the stacked inner layers, P() for the last), written as a table.
-- spmd_pipeline (cell 66) is defined after, as in the tutorial (Lua needs the local first).
mesh = Mesh({table.unpack(jax.devices(), 1, S)}, {'stages'})

local spmd_pipeline
local function predict_pp(params, inputs)
  local Wb_first, inner_params, Wb_last = table.unpack(params)
  local W_first, b_first = table.unpack(Wb_first)
  local W_last, b_last = table.unpack(Wb_last)
  inputs = jax.nn.relu(jnp.dot(inputs, W_first) + b_first)
  inputs = spmd_pipeline(function(Wb, x) return jax.nn.relu(jnp.matmul(x, Wb[1]) + Wb[2]) end,
                         inner_params, inputs)
  local outputs = jnp.dot(inputs, W_last) + b_last
  return outputs
end

local loss_pp = jax.shard_map({in_specs = {{P(), P('stages'), P()}, P('stages')},
                               out_specs = P()})(function(params, batch)
  local inputs, targets = table.unpack(batch)
  local predictions = predict_pp(params, inputs:reshape(K, B, -1)):reshape(K * B, -1)
  local local_loss = jnp.mean(jnp.sum((predictions - targets) ^ 2, {axis = -1}))
  return jax.lax.pmean(local_loss, 'stages')
end)
-- (`(W_first, b_first), inner_params, (W_last, b_last) = params` is table.unpack at each level;
-- `x @ Wb[0]` is jnp.matmul(x, Wb[1]): Lua has no @.)

-- cell 66: `stage == 0` compares a traced Array with a number, which Lua's == answers without
-- asking the Array (no metamethod for mixed types): by the translation rule of
-- docs/frontend.md, `a == b` with an Array operand is jnp.equal(a, b). `range(M+L-1)` is
-- `for i = 0, M + L - 2`, the list comprehension of ppermute's pairs a loop; Python's and
-- Lua's % of integers agree (floored). `Wb[0]`, `Wb[1]` (cell 65) are Wb[1], Wb[2].
local shift
function spmd_pipeline(fn, stage_params, inputs)
  local stage = jax.lax.axis_index('stages')
  local outputs = jnp.zeros_like(inputs) * jnp.nan
  local state = jnp.zeros({L // S, B, F}) * jnp.nan
  for i = 0, M + L - 2 do
    state = state.at[0]:set(jnp.where(jnp.equal(stage, 0), inputs[i % K], state[0]))
    state = jax.vmap(fn)(stage_params, state)
    outputs = outputs.at[(i - L + 1) % K]:set(jnp.where(jnp.equal(stage, S - 1), state[-1],
                                                        outputs[(i - L + 1) % K]))
    state, inputs, outputs = shift(i, state, inputs, outputs)
  end
  local perm = {}
  for i = 0, S - 1 do perm[#perm + 1] = {i, (i + 1) % S} end
  outputs = jax.lax.ppermute(outputs, 'stages', perm)
  return outputs
end

function shift(i, state, inputs, outputs)
  local sh = function(x, d)
    local perm = {}
    for i = 0, S - 1 do perm[#perm + 1] = {i, (i + d) % S} end
    return jax.lax.ppermute(x, 'stages', perm)
  end
  state = jnp.roll(state, 1, {axis = 0}).at[0]:set(sh(state[-1], 1))
  if (i % K) == (-1 % K) then
    inputs = sh(inputs, 1)
  end
  if ((i - L + 1) % K) == (-1 % K) then
    outputs = sh(outputs, 1)
  end
  return state, inputs, outputs
end

-- cell 67: `first, *inner, last = params` as the first, the middle and the last;
-- `Ws, bs = zip(*inner_params)` as a loop.
local first_params, last_params = params[1], params[#params]
local inner_params = {table.unpack(params, 2, #params - 1)}
local Ws, bs = {}, {}
for i, Wb in ipairs(inner_params) do Ws[i], bs[i] = Wb[1], Wb[2] end
local params_stacked = {jnp.stack(Ws), jnp.stack(bs)}
first_params = jax.device_put(first_params, NamedSharding(mesh, P()))
params_stacked = jax.device_put(params_stacked, NamedSharding(mesh, P('stages')))
last_params = jax.device_put(last_params, NamedSharding(mesh, P()))
local params_ = {first_params, params_stacked, last_params}

local batch_ = jax.device_put(batch, NamedSharding(mesh, P('stages')))
-- (Mesh's axes are Auto, so the types name no axis; the shardings do)
expect(jax.typeof(params_[2][1]), "f32[4,128,128]", "cell 67 stacked Ws")
expect(params_[2][1].sharding.spec, "P('stages')", "cell 67 stacked Ws' spec")
expect(batch_[1].sharding.spec, "P('stages')", "cell 67 inputs' spec")

-- cell 68: prints the loss. The tutorial's value is of JAX's random data; the check is that
-- the pipelined loss equals the model's loss without pipelining on the same parameters.
local reference = jax.jit(loss)(repl_params, repl_batch)  -- (on cell 63's mesh)
local g_ref = jax.jit(jax.grad(loss))(repl_params, repl_batch)
jax.set_mesh(mesh)
printed = jax.jit(loss_pp)(params_, batch_)
print(printed)
expect(jax.typeof(printed), "f32[]", "cell 68 type")
close(printed:item(), reference:item(), "cell 68")

-- cell 69: `_ = jax.jit(jax.grad(loss_pp))(params_, batch_)   # don't crash`. Checked against
-- the gradient without pipelining: the first and last layers and every bias agree; of the
-- stacked inner weights, the pipeline's bubbles (iterations where a stage's state is still
-- jnp.nan) multiply NaN activations by zero cotangents in W's gradient (x^T dy), which is NaN
-- in JAX as here, so only the weight no bubble reaches (stage 0's first layer, fed by inputs
-- every iteration) is finite and agrees; the others are NaN.
local g = jax.jit(jax.grad(loss_pp))(params_, batch_)
local function near(a, b, what)  -- allclose(a, b, atol=1e-2, rtol=1e-2) across two meshes
  local function flat(t, out)
    if type(t) ~= "table" then out[#out + 1] = t else for _, v in ipairs(t) do flat(v, out) end end
    return out
  end
  local x, y = flat(a:totable(), {}), flat(b:totable(), {})
  assert(#x == #y, what .. ": sizes differ")
  for k = 1, #x do
    assert(math.abs(x[k] - y[k]) <= 1e-2 + 1e-2 * math.abs(y[k]),
           string.format("%s: element %d is %s, without pipelining %s", what, k, x[k], y[k]))
  end
end
near(g[1][1], g_ref[1][1], "cell 69 W_first")
near(g[1][2], g_ref[1][2], "cell 69 b_first")
near(g[3][1], g_ref[#g_ref][1], "cell 69 W_last")
near(g[3][2], g_ref[#g_ref][2], "cell 69 b_last")
for l = 1, L do
  near(g[2][2][l - 1], g_ref[l + 1][2], "cell 69 stacked b " .. l)
  local total = jnp.sum(g[2][1][l - 1]):item()
  local finite = total == total and math.abs(total) < math.huge
  assert(finite == (l == 1), "cell 69 stacked W " .. l .. ": finite " .. tostring(finite))
end
near(g[2][1][0], g_ref[2][1], "cell 69 stacked W 1")

t.report("tutorial shard_map neural networks (cells 53-69): cells that do not run (fully) as "
         .. "written:")
