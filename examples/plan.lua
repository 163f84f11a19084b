-- examples/plan.lua: plan training beyond this machine, shape-only (nothing is allocated):
-- per-device memory and collective traffic per step for several meshes side by side, and
-- whether each fits a device's HBM.
--
--   shardlab examples/plan.lua              -- llama2-7b: fsdp=256, fsdp=64 x tensor=4, fsdp=8
--   shardlab examples/plan.lua llama2-70b   -- MaxText's llama2-70b (emb 8192, 64 query heads
--                                           -- over 8 kv heads, mlp 28672, 80 layers; 68.98B
--                                           -- params): fsdp=256, fsdp=32 x tensor=8
--   shardlab examples/plan.lua MODEL [DEVICES]  -- any preset (docs/models.md), e.g.
--                                           -- llama3.1-70b, llama3.1-405b, mistral-7b: its
--                                           -- recipe's fsdp mesh (reference hardware.md
--                                           -- section 7), or fsdp=DEVICES
local model = (arg and arg[1]) or "llama2-7b"
local devices = arg and tonumber(arg[2])
local GiB = 2 ^ 30
local hbm_gib = {16, 95}  -- per-device HBM to check against (e.g. v5e 16 GiB, v5p 95 GiB)

-- tensor stays <= the number of kv heads (8 for llama2-70b's grouped-query attention).
local meshes = {
  ["llama2-7b"] = {
    {name = "fsdp=256", mesh = sl.mesh{fsdp = 256}},
    {name = "fsdp=64 x tensor=4", mesh = sl.mesh{fsdp = 64, tensor = 4}},
    {name = "fsdp=8 (one host)", mesh = sl.mesh{fsdp = 8}},  -- for contrast: state is 1/8 of 80 GB
  },
  ["llama2-70b"] = {
    {name = "fsdp=256", mesh = sl.mesh{fsdp = 256}},
    {name = "fsdp=32 x tensor=8", mesh = sl.mesh{fsdp = 32, tensor = 8}},
  },
  -- MaxText's v5p-1024 recipe (configs/tpu/v5p/gpt3_175b): ici_fsdp 64 x ici_tensor 8.
  ["gpt3-175b"] = {{name = "fsdp=64 x tensor=8", mesh = sl.mesh{fsdp = 64, tensor = 8}}},
  -- deepseek3-671b (MLA, 256 experts): 512 chips, fsdp alone and fsdp x expert.
  ["deepseek3-671b"] = {
    {name = "fsdp=512", mesh = sl.mesh{fsdp = 512}},
    {name = "fsdp=64 x expert=8", mesh = sl.mesh{fsdp = 64, expert = 8}},
  },
}
-- The published recipes' device counts (ici_fsdp -1): v6e-256, v6e-8 (mistral-7b), v5p-1024
-- (512 chips, llama3.1-405b); any other model: 256.
local recipe_devices = {["llama3.1-405b"] = 512, ["mistral-7b"] = 8}
local n = devices or recipe_devices[model] or 256
local plans = (not devices and meshes[model]) or
              {{name = "fsdp=" .. n, mesh = sl.mesh{fsdp = n, devices = n}}}
-- The MoE presets plan MaxText's dense dispatch (its default dropless one has no expert
-- parallelism here, and these meshes may split `expert`).
local moe = {["deepseek3-671b"] = true, ["qwen3-235b-a22b"] = true, ["mixtral-8x7b"] = true,
             ["mixtral-8x22b"] = true}
local cfg = moe[model]
    and sl.config{model = model, per_device_batch_size = 1, max_target_length = 2048,
                  sparse_matmul = false, capacity_factor = 1.25}
    or sl.config{model = model, per_device_batch_size = 1, max_target_length = 2048}

local start = os.clock()
for _, p in ipairs(plans) do
  local t = sl.trainer(cfg, p.mesh, {shape_only = true})
  p.compiled = t:compile()
  p.trainer = t
end
local total, active = plans[1].trainer:num_params()
print(string.format("%s (%.2fB parameters, %.2fB active per token), per_device_batch_size=1, "
                    .. "T=2048: %d plans compiled in %.2f s\n",
                    model, total / 1e9, active / 1e9, #plans, os.clock() - start))

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
local negligible = {}  -- axes whose traffic rounds to 0.00 GiB on every mesh: no row of zeros
for _, axis in ipairs(sorted) do
  local most = 0
  for _, p in ipairs(plans) do most = math.max(most, p.compiled.cost.collective_bytes[axis] or 0) end
  if most < 0.005 * GiB then
    negligible[#negligible + 1] = string.format("%s (%.1f MiB at most)", axis, most / 2 ^ 20)
  else
    row("collective GiB/step @" .. axis, function(p)
      return string.format("%.2f", (p.compiled.cost.collective_bytes[axis] or 0) / GiB)
    end)
  end
end
row("TFLOP / device / step", function(p) return string.format("%.1f", p.compiled.cost.flops / 1e12) end)
for _, h in ipairs(hbm_gib) do
  row(string.format("fits %d GiB HBM?", h), function(p)
    return p.compiled.memory.peak_bytes <= h * GiB and "yes" or "no"
  end)
end
if #negligible > 0 then
  print("collectives under 0.01 GiB/step on every mesh: " .. table.concat(negligible, ", "))
end

-- How an MLP weight and a (grouped-query) key weight are split on each mesh: scanned layers
-- (MaxText's default scan_layers): one array per weight kind, the layer dim second. gpt3's
-- are mlp/wi and the fused self_attention/qkv_proj.
print()
for _, p in ipairs(plans) do
  local tab = p.trainer:shardings()
  for _, w in ipairs{{"wi_0", "mlp/wi_0/kernel", "mlp/wi/kernel"},
                     {"key", "self_attention/key/kernel", "self_attention/qkv_proj/kernel"}} do
    local r = tab:find("params/decoder/layers/" .. w[2]) or tab:find("params/decoder/layers/" .. w[3])
    if r then
      print(string.format("%-20s %-5s %-40s %-34s local (%s)", p.name, w[1] .. ":", r.type,
                          tostring(r.spec), table.concat(r.local_shape, ", ")))
    end
  end
end
-- MaxText's memory line (what JAX prints at compile), one per plan.
print()
for _, p in ipairs(plans) do print(string.format("%s: %s", p.name, p.compiled.memory.summary)) end
