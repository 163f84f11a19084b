-- examples/pipeline_plans.lua: MaxText PR #2744's two pipeline test cases as shape-only plans
-- (nothing is allocated), in auto and explicit mode, plus a circular variant and one with
-- layers after the pipeline (pipeline_parallel_layers): per-device
-- memory, collective bytes per mesh axis per step, the schedule's bubble fraction, the
-- program's instruction count and compile time, printed as the Markdown table of
-- docs/sharding.md ("MaxText PR #2744's cases as plans").
--
--   shardlab examples/pipeline_plans.lua           -- every plan
--   shardlab examples/pipeline_plans.lua auto      -- auto mode only (half the compiles)
--
-- Mesh: a v5p-8 slice is 4 JAX devices (2x2x1 chips, one megacore device per chip; MaxText's
-- accelerator_to_spec_map "v5p-8": devices_per_slice 4), so stage=2 leaves fsdp=2 (case 1) or,
-- with ici_data_parallelism=2, data=2 and fsdp=1 (case 2, ZeRO-1; without
-- pipeline_fsdp_ag_once, which has no fsdp to gather there). llama2-7b, MaxText's
-- max_target_length 2048, per_device_batch_size 4: global batch 16, 8 microbatches of 2 rows,
-- so each microbatch still splits over data x fsdp = 2.
-- A plan the engine refuses prints its error instead of numbers.
local only_mode = arg and arg[1]
local GiB = 2 ^ 30

local pr = {ici_pipeline_parallelism = 2, num_pipeline_microbatches = 8, pipeline_fsdp_ag_once = true}
local function with(base, extra)
  local t = {}
  for k, v in pairs(base) do t[k] = v end
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end
local cases = {
  {name = "stage=2 fsdp=2, per-iteration gathers", mesh = {stage = 2, fsdp = 2},
   keys = {ici_pipeline_parallelism = 2, num_pipeline_microbatches = 8}, modes = {"auto"}},
  {name = "case 1: stage=2 fsdp=2, ag_once", mesh = {stage = 2, fsdp = 2}, keys = pr},
  -- On 4 devices data=2 x stage=2 leaves fsdp=1: nothing to gather, and the engine refuses
  -- pipeline_fsdp_ag_once without fsdp (naming both sizes), so this case runs without it.
  {name = "case 2: data=2 stage=2, ZeRO-1", mesh = {data = 2, stage = 2},
   keys = {ici_pipeline_parallelism = 2, num_pipeline_microbatches = 8, ici_data_parallelism = 2,
           shard_optimizer_over_data = true}},
  {name = "circular R=2: stage=2 fsdp=2, ag_once", mesh = {stage = 2, fsdp = 2},
   keys = with(pr, {num_pipeline_repeats = 2})},
  -- pipeline_parallel_layers: the first 16 layers in the pipeline, the other 16 after it
  -- (MaxText's layers_outside_pipeline, `stage` acting as data there).
  {name = "P=16 of 32 layers: stage=2 fsdp=2", mesh = {stage = 2, fsdp = 2},
   keys = {ici_pipeline_parallelism = 2, num_pipeline_microbatches = 8,
           pipeline_parallel_layers = 16}, modes = {"auto"}},
}

-- One plan: the trainer's compile and its numbers, or the error that stopped it.
local function plan(case, mode)
  -- num_layers_per_pipeline_stage = -1: layers per stage derived from num_pipeline_repeats
  -- (R = 1 unless a case sets it). MaxText's default, 1, would make every case circular
  -- with R = 32 / 2 = 16.
  local keys = with(case.keys, {model = "llama2-7b", per_device_batch_size = 4,
                                max_target_length = 2048, shard_mode = mode,
                                num_layers_per_pipeline_stage = -1})
  local mesh = with(case.mesh, {devices = 4})
  local ok, res = pcall(function()
    local t = sl.trainer(sl.config(keys), sl.mesh(mesh), {shape_only = true, store = false})
    local c = t:compile()
    return {compiled = c, pipeline = c:pipeline()}
  end)
  if not ok then return {name = case.name, mode = mode, error = tostring(res):gsub("\n.*", "")} end
  res.name, res.mode = case.name, mode
  return res
end

local plans = {}
for _, case in ipairs(cases) do
  for _, mode in ipairs(case.modes or {"auto", "explicit"}) do
    if not only_mode or only_mode == mode then plans[#plans + 1] = plan(case, mode) end
  end
end

-- Columns: the collective axes any plan uses, sorted.
local axes, sorted = {}, {}
for _, p in ipairs(plans) do
  for axis in pairs(p.compiled and p.compiled.cost.collective_bytes or {}) do axes[axis] = true end
end
for axis in pairs(axes) do sorted[#sorted + 1] = axis end
table.sort(sorted)

local function gib(bytes) return string.format("%.2f", bytes / GiB) end
local header = {"plan", "mode", "args GiB", "temps GiB", "peak GiB"}
for _, axis in ipairs(sorted) do header[#header + 1] = axis .. " GiB/step" end
for _, h in ipairs({"bubble", "instructions", "compile s"}) do header[#header + 1] = h end
print("| " .. table.concat(header, " | ") .. " |")
print("|" .. string.rep("---|", #header))
for _, p in ipairs(plans) do
  local cells = {p.name, p.mode}
  if p.error then
    cells[#cells + 1] = "not supported: " .. p.error
  else
    local m, c = p.compiled.memory, p.compiled
    for _, v in ipairs({m.argument_bytes, m.temp_bytes, m.peak_bytes}) do cells[#cells + 1] = gib(v) end
    for _, axis in ipairs(sorted) do cells[#cells + 1] = gib(c.cost.collective_bytes[axis] or 0) end
    cells[#cells + 1] = p.pipeline.bubble_fraction_text
    cells[#cells + 1] = tostring(c.instructions)
    cells[#cells + 1] = string.format("%.1f", c.cache.compile_s)
  end
  print("| " .. table.concat(cells, " | ") .. " |")
end
return plans
