-- examples/predict_recipes.lua: MaxText's published step times (tpu-recipes logs, the rows of
-- docs/prediction.md) against shardlab's prediction for the same config on the same named
-- hardware. Shape-only: seconds per row, nothing allocated.
--
--   shardlab examples/predict_recipes.lua
--
-- A row whose model preset is not in this build prints "model not available yet" (never a
-- number). Returns the rows (with .predicted or .missing) for tests/shell/predict_recipes_test.
--
-- Remat: {policy, saved on the device, offloaded to host}: MaxText's "custom" policy offloads
-- the named tensors to host memory (remat_offload_names here: moved over the host link after
-- the forward, back before the backward, their bytes in host memory, not in HBM).
-- tflops_halved: the row's MaxText version counts causal attention halved (PR #1988, 2025-07)
-- or whole (tpu-recipes v0.1.0-v0.1.4, the v6e rows).
-- The splash attention keys of each row's MaxText config at the row's MaxText version
-- (benchmarks/maxtext_trillium_model_configs.py at tpu-recipes-v0.1.2 / v0.1.4,
-- maxtext_v5p_model_configs.py at 3eb77db; base.yml's 512 and sa_use_fused_bwd_kernel
-- False where the config sets none): sa_block_q, _kv, _q_dkv, _kv_dkv, _q_dq, _kv_dq, fused.
local function splash(q, kv, q_dkv, kv_dkv, q_dq, kv_dq, fused, more)
  local keys = more or {}
  keys.sa_block_q, keys.sa_block_kv = q, kv
  keys.sa_block_q_dkv, keys.sa_block_kv_dkv = q_dkv, kv_dkv
  keys.sa_block_q_dq, keys.sa_block_kv_dq = q_dq, kv_dq
  keys.sa_use_fused_bwd_kernel = fused
  return keys
end

local recipes = {
  {model = "llama3.1-70b", topology = "v6e-256", batch = 5, seq = 8192,
   sharding = {ici_fsdp_parallelism = -1}, keys = splash(2048, 2048, 2048, 2048, 2048, 2048, true),
   remat = {"custom", "", "decoder_layer_input,query_proj,key_proj,value_proj"},
   note = "custom: decoder_layer_input, q/k/v proj offloaded; flash 2048 blocks",
   step_s = 42.656, tflops = 462.297, tflops_halved = false},
  {model = "llama3.1-8b", topology = "v6e-256", batch = 4, seq = 8192,
   sharding = {ici_fsdp_parallelism = -1}, keys = splash(2048, 2048, 2048, 2048, 2048, 2048, true),
   remat = {"custom", "", "decoder_layer_input,out_proj,query_proj,key_proj,value_proj"},
   note = "custom: decoder_layer_input, out_proj, q/k/v proj offloaded",
   step_s = 4.546, tflops = 417.397, tflops_halved = false},
  {model = "llama2-70b", topology = "v6e-256", batch = 2, seq = 4096,
   sharding = {ici_fsdp_parallelism = 1, ici_fsdp_transpose_parallelism = -1},
   keys = splash(1024, 512, 2048, 512, 2048, 512, false),
   remat = {"qkv_proj_offloaded", "", ""},
   note = "qkv_proj_offloaded",
   step_s = 9.052, tflops = 402.274, tflops_halved = false},
  {model = "mixtral-8x7b", topology = "v6e-256", batch = 12, seq = 4096,
   sharding = {ici_fsdp_parallelism = -1},
   keys = splash(2048, 512, 2048, 512, 2048, 512, false, {sparse_matmul = false, capacity_factor = 1.25}),
   remat = {"custom", "", "decoder_layer_input,out_proj,query_proj,key_proj,value_proj"},
   note = "dense dispatch, capacity_factor 1.25; custom: decoder_layer_input, out_proj, q/k/v",
   step_s = 13.484, tflops = 302.311, tflops_halved = false},
  {model = "mistral-7b", topology = "v6e-8", batch = 6, seq = 8192,
   sharding = {ici_fsdp_parallelism = -1}, keys = splash(2048, 2048, 2048, 2048, 2048, 2048, true),
   remat = {"custom", "", "decoder_layer_input,out_proj,query_proj,key_proj,value_proj"},
   note = "custom: decoder_layer_input, out_proj, q/k/v proj offloaded",
   step_s = 6.320, tflops = 431.981, tflops_halved = false},
  {model = "llama3.1-405b", topology = "v5p-1024", batch = 2, seq = 8192,
   sharding = {ici_fsdp_parallelism = -1},
   keys = splash(2048, 2048, 2048, 2048, 2048, 2048, false, {num_vocab_tiling = 4}),
   remat = {"custom", "", "context,mlpwo"},
   note = "custom: context, mlpwo offloaded; num_vocab_tiling 4",
   step_s = 131.474, tflops = 314.530, tflops_halved = true},
}

local function config_for(r)
  local keys = {model_name = r.model, compile_topology = r.topology,
                per_device_batch_size = r.batch, max_target_length = r.seq,
                remat_policy = r.remat[1], remat_save_names = r.remat[2],
                remat_offload_names = r.remat[3]}
  for k, v in pairs(r.sharding) do keys[k] = v end
  for k, v in pairs(r.keys or {}) do keys[k] = v end
  return sl.config(keys)
end

local rows = {}
print(string.format("%-14s %-9s %-8s %-36s %10s %10s %8s %9s %9s %5s",
                    "model", "topology", "batch", "sharding / remat", "predicted", "MaxText",
                    "error", "TFLOP/s", "MaxText", "fits"))
for _, r in ipairs(recipes) do
  local row = {recipe = r}
  rows[#rows + 1] = row
  -- A preset this build lacks, or a key the row needs that it lacks (the MoE rows' dispatch
  -- keys), is "not available yet": never a number.
  local ok, cfg = pcall(sl.config, {model_name = r.model})
  if ok then ok, cfg = pcall(config_for, r) end
  local sharding = {}
  for k, v in pairs(r.sharding) do
    if v ~= 1 then sharding[#sharding + 1] = k:gsub("^ici_", ""):gsub("_parallelism$", "") .. "=" .. v end
  end
  table.sort(sharding)
  local what = table.concat(sharding, ",") .. " " .. r.remat[1]
  local batch = string.format("%dx%d", r.batch, r.seq)
  if not ok then
    row.missing = tostring(cfg)
    local why = row.missing:find("unknown model", 1, true) and "model not available yet"
                or ("config not available yet: " .. row.missing)
    print(string.format("%-14s %-9s %-8s %-36s %s (%.3f s logged)", r.model, r.topology, batch,
                        what, why, r.step_s))
  else
    local start = os.clock()
    local c = sl.plan(cfg, {causal_attention_halved = r.tflops_halved, store = false})
    row.seconds = os.clock() - start
    local p = c.predicted
    row.predicted = p
    row.compiled = c
    row.error = (p.step_time_s - r.step_s) / r.step_s
    -- MaxText's count at MaxText's logged step time: comparable with its log line.
    row.tflops_at_logged = p.tflops_per_device / r.step_s
    print(string.format("%-14s %-9s %-8s %-36s %9.3fs %9.3fs %+7.1f%% %9.1f %9.1f %5s",
                        r.model, r.topology, batch, what, p.step_time_s, r.step_s,
                        100 * row.error, p.tflops_per_s_per_device, r.tflops,
                        tostring(p.fits)))
  end
end
for _, row in ipairs(rows) do
  if row.predicted then
    print(string.format("\n%s on %s (%s; planned in %.1f s of CPU):", row.recipe.model,
                        row.recipe.topology, row.recipe.note, row.seconds))
    print(tostring(row.predicted))
    print(string.format("  MaxText's count at the logged %.3f s: %.3f TFLOP/s/device (logged %.3f)",
                        row.recipe.step_s, row.tflops_at_logged, row.recipe.tflops))
  end
end
return rows
