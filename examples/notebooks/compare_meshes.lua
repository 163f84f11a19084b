-- examples/notebooks/compare_meshes.lua: the same small llama on two 2-device meshes, data=2 vs fsdp=2.
-- Run: shardlab --notebook examples/notebooks/compare_meshes.lua --html [-p steps=40]   (writes
-- compare_meshes.report.md and .html in the current directory, which git ignores)
-- Cells are jupytext percent cells (`-- %%`); cells share globals, not locals (docs/notebook.md).

-- %% [markdown]
-- # Data parallel or FSDP? One model, two meshes
--
-- Both runs train the same llama-tiny-shaped model (2 layers, sequence 32) on the same bytes
-- (this notebook's own source: byte-level text, so the loss starts near ln 256 = 5.55) with
-- the same seed, on two simulated devices. Only the mesh differs:
--
-- - **data=2** replicates every parameter and optimizer state on both devices and all-reduces
--   the gradients.
-- - **fsdp=2** shards parameters and optimizer state over the `fsdp` axis: each device keeps
--   half, all-gathers weights before using them and reduce-scatters the gradients.
--
-- The maths is identical, so the loss curves should lie on top of each other; what changes is
-- memory per device and which collectives run.

-- %% Parameters tags=["parameters"]
steps = 20        -- training steps per mesh (papermill-style: -p steps=40 overrides)
layers = 2        -- decoder layers
seq = 32          -- max_target_length
batch = 2         -- per_device_batch_size
corpus = arg[0]   -- the notebook itself (arg[0] is the notebook's path, as for a script)

-- %% The two meshes
meshes = {
  ["data=2"] = sl.mesh{data = 2, devices = 2},
  ["fsdp=2"] = sl.mesh{fsdp = 2, devices = 2},
}
names = {"data=2", "fsdp=2"}
for _, name in ipairs(names) do print(name, meshes[name]) end

-- %% Configure, build and compile both trainers
function make_config()
  return sl.config{model = "llama-tiny", steps = steps, base_num_decoder_layers = layers,
                   max_target_length = seq, per_device_batch_size = batch,
                   dataset = "text:" .. corpus, learning_rate = 3e-3, log_period = 5,
                   scan_layers = false}
end
trainers, compiled = {}, {}
for _, name in ipairs(names) do
  trainers[name] = sl.trainer(make_config(), meshes[name])
  compiled[name] = trainers[name]:compile()
  print(name, compiled[name])
end

-- %% [markdown]
-- ## Memory per device
--
-- `c.memory` is the compiler's memory analysis (argument, output, temporary and aliased bytes
-- per device; peak = argument + output + temp − alias). FSDP should roughly halve the argument
-- bytes, since parameters and Adam moments are split across the two devices.

-- %% Memory analysis side by side
memory_rows = {}
for _, name in ipairs(names) do
  local m = compiled[name].memory
  memory_rows[#memory_rows + 1] = {mesh = name, argument_KiB = m.argument_bytes // 1024,
                                   output_KiB = m.output_bytes // 1024, temp_KiB = m.temp_bytes // 1024,
                                   alias_KiB = m.alias_bytes // 1024, peak_KiB = m.peak_bytes // 1024}
end
memory_rows

-- %% Collectives per step (bytes per device, by mesh axis)
collective_rows = {}
for _, name in ipairs(names) do
  local cost = compiled[name].cost
  local row = {mesh = name, GFLOP = math.floor(cost.flops / 1e6 + 0.5) / 1e3}
  for axis, bytes in pairs(cost.collective_bytes) do row[axis .. "_KiB"] = math.floor(bytes / 1024 + 0.5) end
  collective_rows[#collective_rows + 1] = row
end
collective_rows

-- %% How the parameters are laid out
-- t:shardings() (sharding inspection) when this build has it; otherwise the mesh is all we show.
for _, name in ipairs(names) do
  local t = trainers[name]
  print("== " .. name)
  if t.shardings then
    print(t:shardings("decoder/layers_0/mlp"))
  else
    print(t.mesh)
  end
end

-- %% [markdown]
-- ## Training
--
-- Each trainer runs the same number of steps. The step lines below are printed by the engine
-- itself (MaxText's format) and land in this cell's output.

-- %% Train both
results = {}
for _, name in ipairs(names) do
  print("== " .. name)
  results[name] = trainers[name]:train{steps = steps}
end
for _, name in ipairs(names) do
  print(string.format("%-7s final loss %.4f", name, results[name].last.loss))
end

-- %% Loss from the store, as sparklines
-- Each trainer recorded a run; its mesh row (meshes.repr is the mesh's printed form) finds it.
losses = {}
for _, name in ipairs(names) do
  local run = sl.sql("SELECT run_id FROM meshes WHERE repr = ? ORDER BY mesh_id DESC LIMIT 1",
                     tostring(meshes[name]))[1].run_id
  losses[name] = sl.sql("SELECT step, loss FROM steps WHERE run_id = ? ORDER BY step", run)
  print(string.format("%-7s %s", name, plot.spark(losses[name])))
end

-- %% Loss curves from the store
plot.line{["data=2"] = losses["data=2"], ["fsdp=2"] = losses["fsdp=2"],
          title = "training loss: data=2 vs fsdp=2", ylabel = "loss", logy = true}

-- %% [markdown]
-- ## What to read from this
--
-- - The curves coincide: sharding changes where arrays live, not what is computed.
-- - FSDP's argument bytes per device are about half of data parallelism's; the price is
--   all-gathers of the weights (the `fsdp` collective bytes) on every step.
-- - Rerun with more steps or layers: `-p steps=100 -p layers=4`.
