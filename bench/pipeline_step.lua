-- bench/pipeline_step.lua: the wall-clock step time of a pipelined trainer, to compare two
-- builds of the engine on one machine (run each a few times, alternating: a shared machine's
-- noise is a few percent). A widened llama-tiny (emb 256, mlp 1024, 8 layers, seq 256, 4 rows
-- per device, float32) on stage=2 (2 simulated devices), M = 4: the median of 12 steps after
-- 3 warm-up steps, and the summed instruction seconds of one timed step
-- (t:pipeline{measure=true}).
--
--   shardlab bench/pipeline_step.lua
local keys = {model = "llama-tiny", base_emb_dim = 256, base_num_query_heads = 8,
              base_num_kv_heads = 8, head_dim = 32, base_mlp_dim = 1024,
              base_num_decoder_layers = 8, max_target_length = 256, per_device_batch_size = 4,
              ici_pipeline_parallelism = 2, num_pipeline_microbatches = 4,
              num_layers_per_pipeline_stage = -1, dtype = "float32", steps = 100}
local t = sl.trainer(sl.config(keys), sl.mesh{stage = 2, devices = 2}, {store = false})
local times = {}
for i = 1, 15 do
  local s = t:step().step_time_s
  if i > 3 then times[#times + 1] = s end
end
table.sort(times)
print(string.format("median step %.4f s (min %.4f, max %.4f) over %d steps",
                    times[#times // 2 + 1], times[1], times[#times], #times))
t:pipeline{measure = true}
local _ = t:step().loss
local m = t:pipeline().measured
print(string.format("one timed step: %.3f instruction-seconds over %d devices, %.3f in the pipeline",
                    m.step_s, m.devices, m.pipeline_s))
