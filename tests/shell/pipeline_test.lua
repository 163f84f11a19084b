-- tests/shell/pipeline_test.lua: the pipeline schedule as a value through the shell:
-- t:pipeline() / c:pipeline() on S = 4 stages, M = 8 microbatches (11 iterations, bubble
-- fraction 3/11 counted from the grid), its printed Gantt grid, per-iteration collectives, the
-- measured share of step time spent in bubble slots ({measure = true} then steps), c.cost's
-- collective rows, the SVG (p:svg() and a notebook cell's value), and the errors.
local h = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua")
local bin = assert(os.getenv("SHARDLAB_BIN"), "SHARDLAB_BIN not set")
local scratch = assert(os.getenv("SHARDLAB_SCRATCH"), "SHARDLAB_SCRATCH not set")

local function config(extra)
  local keys = {model = "llama-tiny", base_num_decoder_layers = 4, max_target_length = 32,
                per_device_batch_size = 2, steps = 10, ici_pipeline_parallelism = 4,
                num_pipeline_microbatches = 8, dtype = "float32"}
  for k, v in pairs(extra or {}) do keys[k] = v end
  return sl.config(keys)
end
local t = sl.trainer(config(), sl.mesh{stage = 4, devices = 4}, {store = false})

-- The schedule: S, M, R, iterations M*R + S - 1, the grid (1-based: grid[i + 1][s + 1]).
local p = t:pipeline()
assert(p.S == 4 and p.M == 8 and p.R == 1 and p.delay == 1 and p.layers_per_stage == 1)
assert(p.iterations == 11 and #p.grid == 11 and #p.grid[1] == 4, p.iterations)
assert(p.cells == 44 and p.bubble_cells == 12, p.bubble_cells)
assert(p.bubble_fraction_text == "3/11", p.bubble_fraction_text)
assert(math.abs(p.bubble_fraction - 3 / 11) < 1e-12, p.bubble_fraction)
assert(p.movement == "shift" and p.circ_storage == false)
for i = 0, 10 do
  for s = 0, 3 do
    local c = p.grid[i + 1][s + 1]
    assert(c.iteration == i and c.stage == s)
    local m = i - s  -- stage s runs microbatch i - s (MaxText's schedule, delay 1)
    if m >= 0 and m < 8 then
      assert(not c.bubble and c.microbatch_id == m and c.repeat_id == 0, i .. "," .. s)
    else
      assert(c.bubble and c.microbatch_id == nil, i .. "," .. s)
    end
  end
end
assert(p.measured == nil, "nothing measured before a timed step")

-- Printed: a Gantt chart, one row per stage, bubbles as '.', and the fraction.
local text = tostring(p)
assert(text:find("Pipeline(S=4 stages, M=8 microbatches, R=1 repeats", 1, true), text)
assert(text:find("  stage 0   m0   m1   m2   m3   m4   m5   m6   m7    .    .    .", 1, true), text)
assert(text:find("  stage 3    .    .    .   m0   m1   m2   m3   m4   m5   m6   m7", 1, true), text)
assert(text:find("bubble fraction 3/11 = 0.2727 (12 of 44 stage-iterations", 1, true), text)

-- Per iteration: the compiled program's instructions and collectives (every iteration but the
-- last shifts its state over `stage`).
assert(#p.per_iteration == 11)
for i, row in ipairs(p.per_iteration) do
  assert(row.iteration == i - 1 and row.instructions > 0, i)
  assert((row.collective_bytes.stage or 0) > 0, "iteration " .. (i - 1) .. " moves nothing over stage")
end

-- c:pipeline() is the same schedule; c.cost.collectives lists the permutes along `stage`, all
-- inside pipeline iterations: the shifts (M + S - 2 = 10) and each finished microbatch's move
-- S-1 -> its owner stage (M = 8), forward and backward, and per microbatch its input placed on
-- stage 0 (one, no traffic) and its cotangent sent from stage 0 to the S stages (8 x 5):
-- 2 * 18 + 40 = 76.
local c = t:compile()
local cp = c:pipeline()
assert(cp.iterations == 11 and cp.bubble_fraction_text == "3/11" and cp.measured == nil)
assert(c.instructions > 0 and tostring(c):find(c.instructions .. " instructions", 1, true))
local permutes
for _, row in ipairs(c.cost.collectives) do
  if row.op == "collective_permute" and row.axes == "stage" then permutes = row end
end
assert(permutes and permutes.count == 76 and permutes.in_pipeline == 76,
       "permutes " .. tostring(permutes and permutes.count))
assert(permutes.bytes > 0)
assert(tostring(c.cost.collectives):find("collective_permute", 1, true))

-- Measured: timing on, two steps, then the share of step time in bubble slots. A bubble slot
-- runs the same ops as a busy one (on zeros), so its share of the pipeline's time is near the
-- counted fraction (loose bounds: a shared machine times noisily).
t:pipeline{measure = true}
assert(t:step().loss > 0 and t:step().loss > 0)
local m = t:pipeline().measured
assert(m and m.devices == 4 and m.step_s > 0 and m.pipeline_s > 0 and m.pipeline_s <= m.step_s)
assert(m.bubble_s > 0 and m.bubble_share <= m.bubble_share_of_pipeline)
assert(m.bubble_share_of_pipeline > 0.5 * 3 / 11 and m.bubble_share_of_pipeline < 1.5 * 3 / 11,
       "measured bubble share " .. m.bubble_share_of_pipeline .. " vs 3/11")
local measured = t:pipeline()
assert(tostring(measured):find("measured (last timed step, 4 devices): bubbles ", 1, true))
assert(measured.per_iteration[1].seconds > 0)
t:pipeline{measure = false}  -- later steps run untimed; the last timed step stays reported
t:step():wait()
assert(t:pipeline().measured.step_s == measured.measured.step_s)

-- The SVG: one rect per (iteration, stage), bubbles grey; a notebook cell's value draws it.
local svg = p:svg()
assert(svg:sub(1, 4) == "<svg", svg:sub(1, 40))
assert(select(2, svg:gsub("<rect ", "")) == 44)
assert(select(2, svg:gsub('fill="#d9d9d9"', "")) == 12)
assert(svg:find("bubble fraction 3/11", 1, true) and svg:find(">m7</text>", 1, true))
local nb = scratch .. "/pipeline_nb.lua"
local f = assert(io.open(nb, "w"))
f:write([[
-- %% The schedule
local cfg = sl.config{model = "llama-tiny", base_num_decoder_layers = 4, max_target_length = 32,
                      per_device_batch_size = 2, ici_pipeline_parallelism = 4,
                      num_pipeline_microbatches = 8}
t = sl.trainer(cfg, sl.mesh{stage = 4, devices = 4}, {shape_only = true, store = false})
-- %%
t:pipeline()
]])
f:close()
local report = scratch .. "/pipeline_nb/report.md"
local out = io.popen(string.format("'%s' --db '%s/nb.db' --notebook '%s' -o '%s' 2>&1; echo rc=$?",
                                   bin, scratch, nb, report)):read("a")
assert(out:find("rc=0", 1, true), out)
local md = assert(io.open(report)):read("a")
assert(md:find("![plot-1.svg](report_files/plot-1.svg)", 1, true), md)
local drawn = assert(io.open(scratch .. "/pipeline_nb/report_files/plot-1.svg")):read("a")
assert(drawn:find("bubble fraction 3/11", 1, true) and drawn:find("stage 3", 1, true))

-- The circular trainer: S = 4, M = 8, R = 2 (8 layers, one per stage and repeat): 19
-- iterations, 3/19, measured beside it.
local rt = sl.trainer(config{base_num_decoder_layers = 8, num_pipeline_repeats = 2},
                      sl.mesh{stage = 4, devices = 4}, {store = false})
rt:pipeline{measure = true}
rt:step():wait()
local rp = rt:pipeline()
assert(rp.R == 2 and rp.iterations == 19 and rp.bubble_fraction_text == "3/19", rp.bubble_fraction_text)
local rtext = tostring(rp)
assert(rtext:find("  stage 3   m7r0   m0r1   m1r1   m2r1   m3r1   m4r1   m5r1   m6r1   m7r1", 1, true), rtext)
assert(rtext:find("bubble fraction 3/19 = 0.1579", 1, true), rtext)
assert(rtext:find("measured (last timed step, 4 devices): bubbles ", 1, true), rtext)
assert(rp.measured.bubble_s > 0 and #rp.per_iteration == 19)

-- A schedule without a trainer: circular (R = 2) and delayed (d = 2) shapes.
local circ = sl.pipeline_schedule{stages = 4, microbatches = 8, repeats = 2}
assert(circ.iterations == 19 and circ.bubble_fraction_text == "3/19", circ.bubble_fraction_text)
assert(circ.per_iteration == nil and circ.measured == nil)
local c80 = circ.grid[9][1]  -- iteration 8, stage 0: microbatch 0 of repeat 1
assert(c80.microbatch_id == 0 and c80.repeat_id == 1 and not c80.bubble)
local ctext = tostring(circ)
assert(ctext:find("  stage 0   m0r0   m1r0   m2r0   m3r0   m4r0   m5r0   m6r0   m7r0   m0r1   m1r1", 1, true), ctext)
assert(ctext:find("iteration     10     11", 1, true), ctext)
assert(ctext:find("bubble fraction 3/19 = 0.1579 (12 of 76 stage-iterations", 1, true), ctext)
assert(select(2, circ:svg():gsub(">m7r1</text>", "")) == 4)
local delayed = sl.pipeline_schedule{stages = 4, microbatches = 8, delay = 2}
assert(delayed.iterations == 14 and delayed.bubble_cells == 24 and delayed.bubble_fraction_text == "3/7")
h.expect_error(function() return sl.pipeline_schedule{stages = 4, microbatches = 6} end,
               "sl.pipeline_schedule: pipeline schedule: num_pipeline_microbatches 6 is not divisible by the 4")
h.expect_error(function() return sl.pipeline_schedule{stages = 4} end, "stages and microbatches are required")

-- Errors: no pipeline; measuring a shape-only trainer; a bad option.
local flat = sl.trainer(sl.config{model = "llama-tiny"}, nil, {store = false})
h.expect_error(function() return flat:pipeline() end,
               "Trainer:pipeline: this run has no pipeline (ici_pipeline_parallelism = 1")
h.expect_error(function() return flat:compile():pipeline() end, "Compiled:pipeline: this run has no pipeline")
local plan = sl.trainer(config(), sl.mesh{stage = 4, devices = 4}, {shape_only = true, store = false})
assert(plan:pipeline().iterations == 11)
h.expect_error(function() return plan:pipeline{measure = true} end,
               "Trainer:pipeline: a shape_only trainer runs no steps to measure")
h.expect_error(function() return t:pipeline{measured = true} end, "measured")
print("pipeline_test: ok")
