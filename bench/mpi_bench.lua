-- bench/mpi_bench.lua: one side of bench/mpi_bench.sh: llama-tiny on data=2, global batch
-- 16 x 256, `steps` steps through t:train; process 0 prints the median step time and
-- tokens/s of the honest steps (no compile; v_step_time_pct) and each process's median
-- device time and collective wait (metrics dist/*/process_<p>, recorded under mpirun only).
local steps = tonumber(arg and arg[1]) or 30
local mesh = sl.mesh{data = 2, devices = 2}
local cfg = sl.config{
  model = "llama-tiny", steps = steps, per_device_batch_size = 8, max_target_length = 256,
  enable_checkpointing = false,
}
local t = sl.trainer(cfg, mesh)
t:compile()
t:train{steps = steps, quiet = true}
if sl.process_index() ~= 0 then return end
local p = sl.sql("SELECT n_steps, p50_s FROM v_step_time_pct")[1]
print(string.format("processes %d, threads %s: %d steps, median step %.4f s, %.0f tokens/s",
                    sl.process_count(), os.getenv("SHARDLAB_NUM_THREADS") or "?", p.n_steps,
                    p.p50_s, 16 * 256 / p.p50_s))
for _, r in ipairs(sl.sql([[
    SELECT substr(key, instr(substr(key, 6), '/') + 6) AS process,
           median(CASE WHEN key LIKE 'dist/device_time_s/%' THEN value END) AS device_s,
           median(CASE WHEN key LIKE 'dist/collective_wait_s/%' THEN value END) AS wait_s
    FROM metrics WHERE key LIKE 'dist/%' AND step > 0 GROUP BY process ORDER BY process]])) do
  print(string.format("  %s: median device time %.4f s, collective wait %.4f s", r.process,
                      r.device_s, r.wait_s))
end
