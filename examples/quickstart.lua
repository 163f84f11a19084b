-- examples/quickstart.lua: train llama-tiny on real English text (the fortunes corpus) on four
-- simulated devices (data=2 x fsdp=2), then ask the metrics store what happened.
-- Run: scripts/quickstart.sh   (or: build/shell/shardlab --db quickstart.db examples/quickstart.lua)
--
-- Arguments: MaxText-style config overrides, applied by sl.config below over its own keys,
-- e.g. `shardlab examples/quickstart.lua steps=50 dataset=text:/usr/share/games/fortunes/art`.
for i = 1, #(arg or {}) do
  if not arg[i]:find("=", 1, true) then
    error(string.format("quickstart.lua: arguments are config overrides key=value (steps=50), got '%s'",
                        arg[i]), 0)
  end
end

-- A mesh over MaxText's 12 axes: data parallel x FSDP on 4 simulated devices.
local mesh = sl.mesh{data = 2, fsdp = 2, devices = 4}
print(mesh)

local cfg = sl.config{
  model = "llama-tiny",              -- vocab 256 (bytes), emb 256, 4 layers, 4 heads, mlp 704
  dataset = "text:/usr/share/games/fortunes/cookie",  -- byte-level: loss starts near ln(256) = 5.55
  steps = 300,
  per_device_batch_size = 2,         -- global batch 4 x 2 = 8 sequences of 256 tokens
  learning_rate = 3e-3,
  warmup_steps_fraction = 0.05,
  remat_policy = "none",             -- keep activations (MaxText's default "full" recomputes)
  scan_layers = false,               -- one array per layer (MaxText's default stacks them)
  -- dtype: "bfloat16" by default, MaxText's mixed precision (f32 weights, bf16 activations);
  -- dtype = "float32" ends within 1% of its loss here (docs/precision.md "Default")
}
print(cfg)

local t = sl.trainer(cfg, mesh)
print(t)

-- How one layer's MLP is split: weights over fsdp (MaxText's rules), the batch over (data, fsdp).
print(t:shardings("layers_0/mlp/wi_0"))
print(t:visualize("params/decoder/layers_0/mlp/wi_0/kernel"))

local c = t:compile()                -- ahead of time, with the batch's real sharding
print(c)
for axis, bytes in pairs(c.cost.collective_bytes) do
  print(string.format("collectives over %-10s %8.1f MiB per device per step", axis, bytes / 2^20))
end

local result = t:train{}             -- to the config's steps (300, or steps=N given)

-- Everything is in the store (--db): one row per step, the config, the compilation. The
-- queries name this run (t.run_id): the file may hold earlier runs too.
local run = t.run_id
local best = sl.sql("select step, loss from v_best_loss where run_id = ?", run)[1]
local pct = sl.sql("select p50_s, p90_s from v_step_time_pct where run_id = ?", run)[1]
local compiles = sl.sql([[select outcome, cache_level, count(*) as n from compilations
                          where run_id = ? group by outcome, cache_level order by outcome]], run)
print(string.format("trained %d steps on %d devices: final loss %.3f, best %.3f at step %d",
                    result.steps, mesh:devices(), result.last.loss, best.loss, best.step))
print(string.format("step time p50 %.3f s, p90 %.3f s (compile steps excluded)", pct.p50_s, pct.p90_s))
for _, row in ipairs(compiles) do
  print(string.format("compilations: %-4s at %-10s x %d", row.outcome, row.cache_level, row.n))
end
