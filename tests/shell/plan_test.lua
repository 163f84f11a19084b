-- tests/shell/plan_test.lua: llama2-7b planned shape-only beyond this machine (issue 4 item 7):
-- 256-way fsdp and 64x4 fsdp x tensor compile quickly and report per-device memory,
-- collective bytes per axis and the 256-way layout.
local start = os.clock()
local cfg = sl.config{model = "llama2-7b", per_device_batch_size = 1, scan_layers = false}
local t = sl.trainer(cfg, sl.mesh{fsdp = 256, devices = 256}, {shape_only = true})
local c = t:compile()
local params = t:num_params()
assert(params > 6.5e9 and params < 7e9, params)
-- Params + mu + nu in f32, split 256 ways, plus the batch shards.
local state = 3 * 4 * params / 256
assert(c.memory.argument_bytes >= state and c.memory.argument_bytes < state * 1.02, c.memory.argument_bytes)
assert(c.memory.peak_bytes > c.memory.argument_bytes and c.memory.peak_bytes < 16 * 2 ^ 30)
assert(c.cost.collective_bytes.fsdp > 10 * 2 ^ 30, "fsdp all-gathers move tens of GiB per step")
local tab = t:shardings()
local wi = tab:find("params/decoder/layers_31/mlp/wi_0/kernel")
assert(wi.type == "f32[4096@fsdp,11008]" and wi.local_shape[1] == 16 and wi.bytes == 16 * 11008 * 4)
assert(tab:bytes() == c.memory.argument_bytes, tab:bytes() .. " vs " .. c.memory.argument_bytes)
assert(tostring(tab:find("inputs").spec) == "P('fsdp', None)")
assert(not t:audit().exceeds)

local t2 = sl.trainer(cfg, sl.mesh{fsdp = 64, tensor = 4}, {shape_only = true})
local c2 = t2:compile()
assert(c2.cost.collective_bytes.tensor > 0 and c2.cost.collective_bytes.fsdp > 0)
assert(t2:shardings():find("params/decoder/layers_0/mlp/wi_0/kernel").type == "f32[4096@fsdp,11008@tensor]")
local elapsed = os.clock() - start
assert(elapsed < 20, "7b plans took " .. elapsed .. " s")
print(string.format("plan_test ok (%.2f s): fsdp=256 peak %.2f GiB/device, %.1f GiB/step over fsdp",
                    elapsed, c.memory.peak_bytes / 2 ^ 30, c.cost.collective_bytes.fsdp / 2 ^ 30))
