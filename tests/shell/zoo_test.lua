-- tests/shell/zoo_test.lua: MaxText's model zoo from Lua: t:num_params(), the trainer's
-- "number parameters" line, examples/plan.lua for any model name, qwen3-235b-a22b's total and
-- active counts and qk-norm paths, unknown-model hints.
local bin = assert(os.getenv("SHARDLAB_BIN"), "SHARDLAB_BIN not set")
local scratch = assert(os.getenv("SHARDLAB_SCRATCH"), "SHARDLAB_SCRATCH not set")
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")
local examples = here .. "/../../examples"

local function run(cmd)
  local p = assert(io.popen(string.format("cd %q && %s 2>&1; echo \"rc=$?\"", scratch, cmd)))
  local out = p:read("a")
  p:close()
  local body, rc = out:match("^(.-)rc=(%d+)\n$")
  return body, tonumber(rc)
end

-- t:num_params(): total and active (equal for a dense model), the declared parameters' elements.
local cfg = sl.config{model = "llama3.1-70b", per_device_batch_size = 1, max_target_length = 8192}
local t = sl.trainer(cfg, sl.mesh{fsdp = 256, devices = 256}, {shape_only = true})
local total, active = t:num_params()
assert(total == 70553706496 and active == total, tostring(total) .. " " .. tostring(active))
local sum = 0
for _, r in ipairs(t:shardings()) do
  if r.path:find("^params/") then
    local n = 1
    for _, d in ipairs(r.shape) do n = n * d end
    sum = sum + n
  end
end
assert(sum == total, sum .. " vs " .. total)
local q = t:shardings():find("params/decoder/layers/self_attention/query/kernel")
assert(q.type == "f32[8192@fsdp,80,64,128]", q.type)

-- MaxText's line, once, before the first step's line.
local out, rc = run(string.format(
    "%q --db zoo.db -e 't = sl.trainer(sl.config{steps = 2, per_device_batch_size = 1, " ..
    "max_target_length = 16}, sl.mesh{data = 1}); t:train(); t:train{steps = 1}'", bin))
assert(rc == 0, out)
local at = out:find("number parameters: 0.00[0-9] billion\n")
assert(at and at < out:find("completed step: 0,", 1, true), out)
assert(not out:find("number parameters", at + 1, true), "printed once per trainer:\n" .. out)

-- examples/plan.lua takes any model name (and optionally the device count).
out, rc = run(string.format("%q --db zoo.db %q mistral-7b", bin, examples .. "/plan.lua"))
assert(rc == 0, out)
assert(out:find("mistral-7b (7.24B parameters, 7.24B active per token)", 1, true), out)
assert(out:find("fsdp=8", 1, true), out)
out, rc = run(string.format("%q --db zoo.db %q llama3.1-8b 16", bin, examples .. "/plan.lua"))
assert(rc == 0 and out:find("llama3.1-8b (8.03B parameters", 1, true) and out:find("fsdp=16", 1, true), out)

-- qwen3-235b-a22b (MoE): total and active differ; the qk norms are MaxText's paths.
cfg = sl.config{model = "qwen3-235b-a22b", per_device_batch_size = 1, max_target_length = 1024,
                sparse_matmul = false, capacity_factor = 1.25}
t = sl.trainer(cfg, sl.mesh{fsdp = 4, expert = 2}, {shape_only = true})
total, active = t:num_params()
assert(total == 235093634560 and active == 22190763520, tostring(total) .. " " .. tostring(active))
local qn = t:shardings():find("params/decoder/layers/self_attention/query_norm/scale")
assert(qn and qn.type == "f32[128,94]", qn and qn.type)
assert(t:shardings():find("params/decoder/layers/moe_block/gate/kernel"))

-- An unknown model names the nearest known ones.
local ok, err = pcall(sl.config, {model = "llama3-70b"})
assert(not ok and err:find("the nearest known are llama2-70b, llama3-8b, llama3.1-70b", 1, true), err)
print("zoo_test ok")
