-- examples/quickstart.lua: train llama-tiny on real English text (the fortunes corpus) and
-- look at what was recorded. Run: scripts/quickstart.sh  (or build/shell/shardlab examples/quickstart.lua)
--
-- Arguments: [steps] [corpus]   e.g. shardlab examples/quickstart.lua 50
local steps = tonumber(arg and arg[1]) or 300
local corpus = (arg and arg[2]) or "/usr/share/games/fortunes/cookie"

local mesh = sl.mesh{devices = 1}
print(mesh)

local cfg = sl.config{
  model = "llama-tiny",              -- vocab 256 (bytes), emb 256, 4 layers, 4 heads, mlp 704
  dataset = "text:" .. corpus,       -- byte-level: the loss starts near ln(256) = 5.55
  steps = steps,
  learning_rate = 3e-3,
  warmup_steps_fraction = 0.05,
  per_device_batch_size = 8,
  max_target_length = 256,
}
print(cfg)

local t = sl.trainer(cfg, mesh)
print(t)

local c = t:compile()                -- ahead of time: the first step reuses this executable
print(c)
print(c.memory.summary)

local result = t:train{steps = steps}
print(string.format("trained %d steps: loss %.3f -> see the store (--db) for every step",
                    result.steps, result.last and result.last.loss or 0/0))
