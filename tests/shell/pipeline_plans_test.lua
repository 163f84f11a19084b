-- tests/shell/pipeline_plans_test.lua: examples/pipeline_plans.lua (MaxText PR #2744's cases as
-- shape-only llama2-7b plans on a v5p-8-sized mesh) runs, prints its table, and its numbers
-- hold together: the schedule's bubble fraction, collectives over stage and fsdp, and the
-- trade pipeline_fsdp_ag_once makes (fewer fsdp bytes per step, more temp memory).
local here = arg[0]:match("^(.*)/")
local plans = dofile(here .. "/../../examples/pipeline_plans.lua")
assert(#plans == 7, #plans)
local by = {}
for _, p in ipairs(plans) do by[p.name .. "/" .. p.mode] = p end

local base = by["stage=2 fsdp=2, per-iteration gathers/auto"]
assert(base and not base.error, base and base.error)
assert(base.pipeline.S == 2 and base.pipeline.M == 8 and base.pipeline.iterations == 9)
assert(base.pipeline.bubble_fraction_text == "1/9", base.pipeline.bubble_fraction_text)
assert(base.compiled.cost.collective_bytes.stage > 0 and base.compiled.cost.collective_bytes.fsdp > 0)
assert(base.compiled.instructions > 0 and base.compiled.memory.peak_bytes > 0)

-- The ag_once plans: numbers where this build has the key, else the config's error naming it.
for key, p in pairs(by) do
  if p.error then
    assert(p.error:find("pipeline_fsdp_ag_once", 1, true) or p.error:find("repeats", 1, true),
           key .. ": " .. p.error)
  elseif key:find("ag_once", 1, true) then
    local cost = p.compiled.cost.collective_bytes
    if key:find("fsdp=2", 1, true) then
      assert(cost.fsdp < base.compiled.cost.collective_bytes.fsdp, key .. ": ag_once moves fewer fsdp bytes")
    end
    local R = p.pipeline.R
    assert(p.pipeline.bubble_fraction_text == (R == 2 and "1/17" or "1/9"), key)
  end
end
print("pipeline_plans_test: ok")
