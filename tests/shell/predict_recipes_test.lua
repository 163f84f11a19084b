-- tests/shell/predict_recipes_test.lua: examples/predict_recipes.lua runs shape-only, prints a
-- row for every published MaxText run of docs/prediction.md, predicts the rows whose model
-- preset exists (all six since the model zoo and MoE landed) and says "model not available yet"
-- for any other (never a number); MaxText's TFLOP count at the logged step time reproduces the
-- logged TFLOP/s. How long a plan takes is bench material (the example prints it), not asserted.
local here = arg[0]:match("^(.*)/")
local rows = dofile(here .. "/../../examples/predict_recipes.lua")
assert(#rows == 6, #rows)
local predicted = 0
for _, row in ipairs(rows) do
  if row.missing then
    assert(row.predicted == nil and row.error == nil)
  else
    predicted = predicted + 1
    local p = row.predicted
    assert(p.step_time_s > 0 and p.tflops_per_device > 0, row.recipe.model)
    -- MaxText's count, in the row's convention, at the logged step time: within 0.5%.
    local rel = math.abs(row.tflops_at_logged - row.recipe.tflops) / row.recipe.tflops
    assert(rel < 0.005, string.format("%s: %.3f vs logged %.3f", row.recipe.model,
                                      row.tflops_at_logged, row.recipe.tflops))
    assert(p.step_time_s >= p.compute_s - 1e-9)
    assert(p.breakdown.compute.matmul.seconds > 0)
    assert(tostring(p):find("predicted step on " .. row.recipe.topology, 1, true))
  end
end
local by = {}
for _, row in ipairs(rows) do by[row.recipe.model] = row end
assert(by["llama2-70b"].predicted, "llama2-70b is a preset: its row is predicted")
assert(by["llama2-70b"].predicted.fits)
local p70 = by["llama2-70b"].predicted
assert(p70.headroom_bytes == p70.hbm_bytes - p70.peak_bytes and p70.headroom_bytes > 0)
-- llama3.1-405b with num_vocab_tiling=4 fits v5p's 95 GiB, as MaxText's run did: its running
-- sum of the tiles' kernel gradients is accumulated in place (it planned 97.02 GiB before).
local p405 = by["llama3.1-405b"].predicted
assert(p405.fits and p405.peak_bytes < 94 * 2^30, p405.peak_bytes)
-- The matrix unit: v6e's public sustained fraction, v5p's peak (none measured).
assert(math.abs(p70.mxu_flops_per_s - 727.699e12) < 1e6, p70.mxu_flops_per_s)
assert(p405.mxu_sustained_fraction == 0 and p405.mxu_flops_per_s == 4.59e14)

-- sl.plan on a mesh the topology cannot hold names the topology's device count.
local ok, err = pcall(sl.plan, sl.config{model_name = "llama-tiny", compile_topology = "v6e-8",
                                         ici_fsdp_parallelism = 3}, {store = false})
assert(not ok and err:find("Number of devices per slice 8", 1, true), err)
ok, err = pcall(sl.plan, sl.config{model_name = "llama-tiny", compile_topology = "v6e-9"})
assert(not ok and err:find("v6e-8", 1, true), err)  -- the known sizes
ok, err = pcall(sl.plan, sl.config{model_name = "llama-tiny"})
assert(not ok and err:find("compile_topology is not set", 1, true), err)
print(string.format("predict_recipes_test ok: %d of %d rows predicted", predicted, #rows))
