-- tests/shell/train_test.lua: sl.config / sl.trainer / Compiled through the real binary.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error

-- Config: MaxText names, presets, did-you-mean, types.
local cfg = sl.config{model = "llama-tiny", steps = 20, learning_rate = 3e-3,
                      base_num_decoder_layers = 1, max_target_length = 32, per_device_batch_size = 2}
assert(tostring(cfg):find("model_name=llama-tiny", 1, true))
assert(cfg:get("steps") == 20)
assert(cfg:get("base_emb_dim") == 256)            -- from the preset
assert(cfg:get("adam_weight_decay") == 0.1)       -- MaxText default
expect_error(function() sl.config{learning_rat = 1} end, "did you mean 'learning_rate'?")
expect_error(function() sl.config{steps = "ten"} end, "steps expects an integer, got a string")
expect_error(function() sl.config{model = "llama-huge"} end, "unknown model 'llama-huge'")
expect_error(function() sl.config{dataset = "text:/nonexistent/corpus.txt"}:get("nope") end, "unknown key 'nope'")
expect_error(function() sl.trainer(sl.config{dataset = "text:/nonexistent/corpus.txt"}) end,
             "cannot open '/nonexistent/corpus.txt'")
expect_error(function() sl.trainer(sl.config{base_num_query_heads = 3, base_num_kv_heads = 3, head_dim = 7}) end,
             "head_dim 7 must be even")
expect_error(function() sl.trainer("not a config") end, "sl.trainer: argument 'config' expected Config, got string")

-- A small trainer on synthetic data: compile, step, train.
local t = sl.trainer(cfg, sl.mesh{devices = 1})
assert(tostring(t):find("Trainer(model=llama-tiny", 1, true))
local c = t:compile()
assert(c.memory.peak_bytes == c.memory.argument_bytes + c.memory.output_bytes
                              + c.memory.temp_bytes - c.memory.alias_bytes)
assert(c.memory.summary:find("^Total estimated memory size: "))
assert(c.cost.flops > 0)
assert(#c:temps(3) == 3 and c:temps(3)[1].bytes >= c:temps(3)[2].bytes)
expect_error(function() c:temps(-1) end, "Compiled:temps: n must be >= 0, got -1")
-- The mesh decides the layout: an ici_* key (always ici_pipeline_parallelism) must agree.
expect_error(function() sl.trainer(cfg, sl.mesh{stage = 2}) end,
             "ici_pipeline_parallelism=1 but the mesh's 'stage' axis has size 2")
assert(c:text():find("adamw", 1, true))
assert(t:program():find("attention_grad", 1, true))

local h = t:step()
assert(h.step == 0)
assert(h.loss > 0 and h.lr == 0)
assert(h:wait().step == 0 and h:ready())
local r = t:train{steps = 3, quiet = true}
assert(r.steps == 3 and r.last.step == 3 and not r.interrupted)
assert(t.current_step == 4)
assert(#t:param("params/decoder/decoder_norm/scale") == 256)
expect_error(function() t:train{stesp = 1} end, "unknown key 'stesp'")

-- Shape-only: llama2-7b compiles and reports memory without allocating.
local big = sl.trainer(sl.config{model = "llama2-7b", per_device_batch_size = 1}, nil, {shape_only = true})
local bc = big:compile()
assert(bc.memory.argument_bytes > 3 * 4 * 6.7e9)
expect_error(function() big:step() end, "shape_only")
print("train_test ok")
