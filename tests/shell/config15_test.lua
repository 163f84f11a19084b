-- tests/shell/config15_test.lua: issue 15 items 9 and 12 through the real binary: a fractional
-- or non-positive per_device_batch_size is an error at sl.trainer, t:train{} warns (once, through
-- print) while the learning rate is still warming up, sl.trainer builds the mesh from the ici_*
-- keys when given none, and sl.config takes MaxText's key=value override strings.
local expect_error = dofile(arg[0]:match("^(.*)/") .. "/helpers.lua").expect_error

local small = "base_num_decoder_layers=1 max_target_length=16 vocab_size=256 base_emb_dim=32 " ..
              "base_num_query_heads=2 base_num_kv_heads=2 head_dim=16 base_mlp_dim=64"
local function cfg(extra) return sl.config(small .. " " .. (extra or "")) end
local function trainer(c, mesh) return sl.trainer(c, mesh, {store = false}) end

-- ---- item 9: the batch --------------------------------------------------------------------
-- 0.3 on 4 devices was silently a batch of 1 that failed at t:compile().
expect_error(function() trainer(cfg("per_device_batch_size=0.3"), sl.mesh{fsdp = 4}) end,
             "sl.trainer: config: per_device_batch_size 0.3 on 4 devices gives a global batch of " ..
             "4 x 0.3 = 1.2 sequences, not a whole number (MaxText's int() would silently make it " ..
             "1); use a per_device_batch_size whose product with 4 is a whole number >= 1, e.g. " ..
             "0.25 (global batch 1) or 0.5 (global batch 2)")
expect_error(function() trainer(cfg("per_device_batch_size=0.1"), sl.mesh{fsdp = 4}) end,
             "4 x 0.1 = 0.4 sequences, less than one")
expect_error(function() trainer(cfg("per_device_batch_size=0"), sl.mesh{fsdp = 4}) end,
             "sl.trainer: config: per_device_batch_size must be positive, got 0 (4 devices x 0 = " ..
             "a global batch of 0 sequences)")
expect_error(function() trainer(sl.config{per_device_batch_size = -2}) end,
             "per_device_batch_size must be positive, got -2 (1 devices x -2")
-- A whole product is fine, a fractional per-device size included (MaxText's rule): 0.5 x 2 = 1
-- on a tensor-parallel mesh, where the batch is not split.
local half = trainer(cfg("per_device_batch_size=0.5"), sl.mesh{tensor = 2})
assert(tostring(half):find("batch=1x16", 1, true), tostring(half))
half = nil

-- t:train{} far short of the schedule: steps=150001 (MaxText's default), t:train{steps=3}.
local printed = {}
local real_print = print
print = function(...) printed[#printed + 1] = table.concat({...}, "\t") end
local t = trainer(cfg("per_device_batch_size=1 learning_rate=3e-4"))
local r = t:train{steps = 3, quiet = true}
print = real_print
assert(r.steps == 3 and not r.interrupted)
assert(#printed == 1, "expected one warning, got " .. #printed)
local w = printed[1]
assert(w:find("ran 3 steps (to step 2) of a 150001-step learning-rate schedule", 1, true), w)
assert(w:find(string.format("lr %.3g at step 2", r.last.lr), 1, true), w)  -- the lr it trained at
assert(w:find("it reaches learning_rate 0.0003 at step 15000", 1, true), w)
-- Once per trainer; a print that raises loses only the warning.
print = function() printed[#printed + 1] = "again" end
t:train{steps = 1, quiet = true}
print = real_print
assert(#printed == 1, "the warning was printed twice")
print = function() error("print is broken") end
local t2 = trainer(cfg("per_device_batch_size=1"))
local ok, res = pcall(t2.train, t2, {steps = 1, quiet = true})
print = real_print
assert(ok and res.steps == 1, tostring(res))
-- No warning once the warmup is over (a run over its whole schedule).
printed = {}
print = function(...) printed[#printed + 1] = table.concat({...}, "\t") end
local whole = trainer(cfg("per_device_batch_size=1 steps=4"))
whole:train{quiet = true}
print = real_print
assert(#printed == 0, printed[1])
t, t2, whole = nil, nil, nil
collectgarbage()

-- ---- item 12: the mesh from the ici_* keys ------------------------------------------------
local dp = trainer(cfg("per_device_batch_size=1 steps=1 ici_data_parallelism=2"))
assert(tostring(dp.mesh):find("'data': 2, 'stage': 1, 'fsdp': 1", 1, true), tostring(dp.mesh))
assert(tostring(dp):find("batch=2x16, devices=2", 1, true), tostring(dp))
assert(dp:train{steps = 1, quiet = true}.steps == 1)
-- num_devices fills the -1 axis (fsdp by default), as MaxText does with the host's devices.
local filled = trainer(cfg("per_device_batch_size=1 num_devices=4 ici_tensor_parallelism=2"))
assert(tostring(filled.mesh):find("'fsdp': 2", 1, true) and tostring(filled.mesh):find("'tensor': 2", 1, true),
       tostring(filled.mesh))
assert(filled.mesh:devices() == 4)
local explicit = trainer(cfg("per_device_batch_size=1 ici_fsdp_parallelism=2 shard_mode=explicit"))
assert(tostring(explicit.mesh):find("Explicit", 1, true), tostring(explicit.mesh))
-- No ici_* key: the one-device mesh without axes, as before.
assert(tostring(trainer(cfg("per_device_batch_size=1")).mesh) == "Mesh()")
dp, filled, explicit = nil, nil, nil
collectgarbage()
expect_error(function() trainer(cfg("per_device_batch_size=1 num_devices=3 ici_tensor_parallelism=2")) end,
             "sl.trainer: mesh: cannot fill 'fsdp' (-1): 3 devices are not divisible by 2")
expect_error(function() trainer(cfg("per_device_batch_size=1 ici_data_parallelism=-1")) end,
             "sl.trainer: mesh: only one axis may be -1, got 'data' and 'fsdp'")
expect_error(function() trainer(cfg("per_device_batch_size=1 ici_tensor_parallelism=0")) end,
             "sl.trainer: config: ici_tensor_parallelism must be >= 1 or -1 (fill), got 0")
expect_error(function() trainer(cfg("per_device_batch_size=1 num_devices=0")) end,
             "sl.trainer: config: num_devices must be >= 1 or -1, got 0")
expect_error(function() trainer(cfg("per_device_batch_size=1 num_devices=8"), sl.mesh{fsdp = 4}) end,
             "sl.trainer: config: num_devices=8 but the mesh has 4 devices")
-- The fractional check sees the mesh built from the keys.
expect_error(function() trainer(cfg("per_device_batch_size=0.3 ici_fsdp_parallelism=4")) end,
             "per_device_batch_size 0.3 on 4 devices")

-- ---- item 12: MaxText's override strings --------------------------------------------------
local c = sl.config("model=llama-tiny steps=10 per_device_batch_size=1")
assert(c:get("model_name") == "llama-tiny" and c:get("steps") == 10 and math.type(c:get("steps")) == "integer")
assert(c:get("per_device_batch_size") == 1.0 and math.type(c:get("per_device_batch_size")) == "float")
c = sl.config([[use_iota_embed=True enable_checkpointing=false learning_rate=3e-4 run_name='my run' ]] ..
              [[dataset_path="a \"b\".txt" steps=5 steps=7 'base_output_directory=/tmp/x y']])
assert(c:get("use_iota_embed") == true and c:get("enable_checkpointing") == false)
assert(c:get("learning_rate") == 3e-4 and c:get("run_name") == "my run")
assert(c:get("dataset_path") == 'a "b".txt' and c:get("base_output_directory") == "/tmp/x y")
assert(c:get("steps") == 7)  -- the last of a repeated key wins, as in MaxText's argv
assert(sl.config(""):get("steps") == 150001)
-- model is applied first wherever it is written: the preset does not undo an earlier key.
assert(sl.config("max_target_length=64 model=llama-small"):get("max_target_length") == 64)
-- logical_axis_rules in base.yml's form, quoted.
assert(sl.config([=[logical_axis_rules="[['embed', ['fsdp']]]"]=]):get("logical_axis_rules") == "[['embed', ['fsdp']]]")

expect_error(function() sl.config("model=llama-tiny stpes=10") end,
             "sl.config: unknown key 'stpes' (did you mean 'steps'?) (in 'stpes=10')")
expect_error(function() sl.config("model=llama-tiny steps") end,
             "sl.config: 'steps' is not key=value (MaxText's override syntax, e.g. steps=10)")
expect_error(function() sl.config("=3") end, "sl.config: '=3' has no key before '='")
expect_error(function() sl.config("steps=1.5") end, "sl.config: steps expects an integer, got '1.5' (in 'steps=1.5')")
expect_error(function() sl.config("steps=") end, "sl.config: steps expects an integer, got '' (in 'steps=')")
expect_error(function() sl.config("learning_rate=fast") end, "sl.config: learning_rate expects a number, got 'fast'")
expect_error(function() sl.config("learning_rate=nan") end, "sl.config: learning_rate expects a finite number, got nan (in 'learning_rate=nan')")
expect_error(function() sl.config("use_iota_embed=yes") end,
             "sl.config: use_iota_embed expects a boolean (true or false), got 'yes' (in 'use_iota_embed=yes')")
expect_error(function() sl.config("model=gpt5") end, "unknown model 'gpt5'")
expect_error(function() sl.config("run_name='abc") end, "sl.config: unterminated single quote in 'run_name='abc'")
expect_error(function() sl.config("run_name=../../x") end, "run_name '../../x'")
expect_error(function() sl.config(42) end, "sl.config: argument 'options' expected table or \"key=value ...\" string, got number")
expect_error(function() sl.config("steps=99999999999999999999") end, "does not fit in 64 bits")
-- The shell survives all of it.
assert(sl.config("steps=3"):get("steps") == 3)
print("config15 ok")
