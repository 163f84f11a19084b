-- examples/plan_7b.lua: plan llama2-7b training beyond this machine, shape-only (nothing is
-- allocated): per-device memory and collective traffic per step for a 256-device fsdp mesh
-- a 64x4 fsdp x tensor mesh and (for contrast) 8 devices, side by side, and whether each fits a device's HBM.
--
--   shardlab examples/plan_7b.lua
local GiB = 2 ^ 30
local hbm_gib = {16, 95}  -- per-device HBM to check against (e.g. v5e 16 GiB, v5p 95 GiB)

local plans = {
  {name = "fsdp=256", mesh = sl.mesh{fsdp = 256}},
  {name = "fsdp=64 x tensor=4", mesh = sl.mesh{fsdp = 64, tensor = 4}},
  {name = "fsdp=8 (one host)", mesh = sl.mesh{fsdp = 8}},  -- for contrast: state is 1/8 of 80 GB
}
local cfg = sl.config{model = "llama2-7b", per_device_batch_size = 1, max_target_length = 2048}

local start = os.clock()
for _, p in ipairs(plans) do
  local t = sl.trainer(cfg, p.mesh, {shape_only = true})
  p.compiled = t:compile()
  p.trainer = t
end
print(string.format("llama2-7b, per_device_batch_size=1, T=2048: %d plans compiled in %.2f s\n",
                    #plans, os.clock() - start))

-- One line per quantity, one column per mesh.
local function row(label, f)
  local cells = {string.format("%-28s", label)}
  for _, p in ipairs(plans) do cells[#cells + 1] = string.format("%20s", f(p)) end
  print(table.concat(cells))
end
local function gib(bytes) return string.format("%.2f GiB", bytes / GiB) end
row("", function(p) return p.name end)
row("devices", function(p) return tostring(p.mesh:devices()) end)
row("arguments / device", function(p) return gib(p.compiled.memory.argument_bytes) end)
row("temps / device", function(p) return gib(p.compiled.memory.temp_bytes) end)
row("peak / device", function(p) return gib(p.compiled.memory.peak_bytes) end)
row("state (shardings) / device", function(p) return gib(p.trainer:shardings():bytes()) end)
local axes = {}
for _, p in ipairs(plans) do
  for axis in pairs(p.compiled.cost.collective_bytes) do axes[axis] = true end
end
local sorted = {}
for axis in pairs(axes) do sorted[#sorted + 1] = axis end
table.sort(sorted)
for _, axis in ipairs(sorted) do
  row("collective GiB/step @" .. axis, function(p)
    return string.format("%.2f", (p.compiled.cost.collective_bytes[axis] or 0) / GiB)
  end)
end
row("TFLOP / device / step", function(p) return string.format("%.1f", p.compiled.cost.flops / 1e12) end)
for _, h in ipairs(hbm_gib) do
  row(string.format("fits %d GiB HBM?", h), function(p)
    return p.compiled.memory.peak_bytes <= h * GiB and "yes" or "no"
  end)
end

-- How one weight is split on each mesh.
print()
for _, p in ipairs(plans) do
  local r = p.trainer:shardings():find("params/decoder/layers_0/mlp/wi_0/kernel")
  print(string.format("%-20s wi_0: %-28s %-18s local (%d, %d)", p.name, r.type, tostring(r.spec),
                      r.local_shape[1], r.local_shape[2]))
end
print()
print(plans[1].compiled.memory.summary)
