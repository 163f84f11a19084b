-- tests/shell/pipeline_plans_test.lua: examples/pipeline_plans.lua (MaxText PR #2744's cases as
-- shape-only llama2-7b plans on a v5p-8-sized mesh) runs, prints its table, and its numbers
-- hold together: the schedule's bubble fraction (1/9; 1/17 circular), collectives over stage
-- and fsdp, auto = explicit, and the trade pipeline_fsdp_ag_once makes (fewer fsdp bytes per
-- step, more temp memory), and layers after the pipeline (fewer fsdp bytes, their gradients
-- reduced over stage). ~25 s of CPU: eight llama2-7b compiles of a fully unrolled pipeline.
local here = arg[0]:match("^(.*)/")
local plans = dofile(here .. "/../../examples/pipeline_plans.lua")
assert(#plans == 8, #plans)
local by = {}
for _, p in ipairs(plans) do by[p.name .. "/" .. p.mode] = p end

local base = by["stage=2 fsdp=2, per-iteration gathers/auto"]
assert(base and not base.error, base and base.error)
assert(base.pipeline.S == 2 and base.pipeline.M == 8 and base.pipeline.iterations == 9)
assert(base.pipeline.bubble_fraction_text == "1/9", base.pipeline.bubble_fraction_text)
assert(base.compiled.cost.collective_bytes.stage > 0 and base.compiled.cost.collective_bytes.fsdp > 0)
assert(base.compiled.instructions > 0 and base.compiled.memory.peak_bytes > 0)

-- Every plan compiles; auto and explicit agree on memory and traffic.
local bfsdp = base.compiled.cost.collective_bytes.fsdp
for key, p in pairs(by) do
  assert(not p.error, key .. ": " .. tostring(p.error))
  local R = p.pipeline.R
  assert(p.pipeline.bubble_fraction_text == (R == 2 and "1/17" or "1/9"), key)
  local other = by[p.name .. "/" .. (p.mode == "auto" and "explicit" or "auto")]
  if other then
    assert(other.compiled.memory.peak_bytes == p.compiled.memory.peak_bytes, key)
    assert(other.compiled.cost.collective_bytes.stage == p.compiled.cost.collective_bytes.stage, key)
  end
  -- pipeline_fsdp_ag_once: fewer fsdp bytes per step, more temp memory (the gathered weights).
  if key:find("ag_once", 1, true) then
    assert(p.compiled.cost.collective_bytes.fsdp < bfsdp, key .. ": ag_once moves fewer fsdp bytes")
    assert(p.compiled.memory.temp_bytes > base.compiled.memory.temp_bytes, key)
  end
end
-- 16 of the 32 layers after the pipeline: their weights are gathered 3 times per step instead
-- of in each of the 9 iterations, and their gradients reduced over `stage` as over data.
local outside = by["P=16 of 32 layers: stage=2 fsdp=2/auto"]
assert(outside.compiled.cost.collective_bytes.fsdp < bfsdp)
assert(outside.compiled.cost.collective_bytes.stage > 2 * base.compiled.cost.collective_bytes.stage)
-- ZeRO-1 over data=2: no fsdp traffic (fsdp = 1), optimizer state split over data.
local zero1 = by["case 2: data=2 stage=2, ZeRO-1/auto"]
assert(zero1.compiled.cost.collective_bytes.fsdp == nil and zero1.compiled.cost.collective_bytes.data > 0)
print("pipeline_plans_test: ok")
