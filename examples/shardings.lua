-- examples/shardings.lua: the everyday question: how is each tensor split on
-- data=2 x fsdp=2 x tensor=2? Then one weight's device grid and the replication audit.
--
--   shardlab examples/shardings.lua
local mesh = sl.mesh{data = 2, fsdp = 2, tensor = 2}
local cfg = sl.config{model = "llama-tiny", base_num_decoder_layers = 2, max_target_length = 64,
                      per_device_batch_size = 2, scan_layers = false}  -- layers_<l> paths
local t = sl.trainer(cfg, mesh, {shape_only = true})

print(mesh)
print(t:shardings("params/"))            -- the parameters, one aligned row each
print(t:shardings("inputs"))             -- the batch: split over (data, fsdp)

-- MaxText's debug_sharding dump for one layer's MLP.
print(t:shardings("layers_0/mlp/"):dump())

-- Where each block of one weight lives (replicas share a cell: "CPU 0,4").
print(t:visualize("params/decoder/layers_0/mlp/wi_0/kernel"))

-- The logical -> physical rule behind it, and what an override would do.
print(sl.logical_to_mesh({"embed", "mlp"}, mesh))                      -- P('fsdp', 'tensor')
print(sl.logical_to_mesh({"embed", "mlp"}, mesh, {{"mlp", {}}}))       -- P('fsdp', None)

-- Large parameters left replicated on a non-trivial axis (MaxText's sharding_tolerance check).
print(t:audit())
local r = t:audit()
for i = 1, math.min(3, #r.offenders) do
  local o = r.offenders[i]
  print(string.format("  %-45s %-20s not sharded on %s", o.path, o.spec, table.concat(o.unsharded_axes, ", ")))
end
