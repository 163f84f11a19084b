-- tests/shell/scan_layers_test.lua: scanned layers (MaxText's scan_layers) through the
-- shell: the llama2-7b shape-only plan on fsdp=256 shows the stacked weights in t:shardings,
-- t:paths and t:visualize, with the same memory as the per-layer plan; a small scanned
-- trainer steps to the per-layer trainer's loss; scan_layers with pipeline stages is an error
-- naming both keys.
local cfg = sl.config{model = "llama2-7b", per_device_batch_size = 1, max_target_length = 2048,
                      scan_layers = true}
assert(cfg:get("param_scan_axis") == 1)  -- MaxText's default
local t = sl.trainer(cfg, sl.mesh{fsdp = 256, devices = 256}, {shape_only = true})
local wi = t:shardings():find("params/decoder/layers/mlp/wi_0/kernel")
assert(wi.type == "f32[4096@fsdp,32,11008]", wi.type)
assert(tostring(wi.spec) == "P('fsdp', None, None)", tostring(wi.spec))
assert(t:shardings():find("params/decoder/layers_0/mlp/wi_0/kernel") == nil)
local found = false
for _, p in ipairs(t:paths()) do
  found = found or p == "opt_state/nu/decoder/layers/self_attention/out/kernel"
  assert(not p:find("layers_%d"), p)
end
assert(found, "t:paths() lists the stacked optimizer state")
local grid = t:visualize("params/decoder/layers/mlp/wi_0/kernel")
assert(grid:find("f32[4096@fsdp,32,11008]", 1, true) and grid:find("CPU 0", 1, true), grid)
local flat = sl.trainer(sl.config{model = "llama2-7b", per_device_batch_size = 1,
                                  max_target_length = 2048, scan_layers = false},
                        sl.mesh{fsdp = 256, devices = 256}, {shape_only = true})
local c, cf = t:compile(), flat:compile()
assert(c.memory.argument_bytes == cf.memory.argument_bytes)
assert(math.abs(c.memory.peak_bytes / cf.memory.peak_bytes - 1) < 0.05,
       c.memory.peak_bytes .. " vs " .. cf.memory.peak_bytes)

local function tiny(scan)
  return sl.trainer(sl.config{model = "llama-tiny", base_num_decoder_layers = 2, max_target_length = 32,
                              per_device_batch_size = 1, steps = 10, scan_layers = scan},
                    sl.mesh{data = 2, fsdp = 2, devices = 4}, {store = false})
end
local a, b = tiny(false), tiny(true)
for _ = 1, 3 do
  local la, lb = a:step().loss, b:step().loss
  assert(la == lb, la .. " vs " .. lb)  -- the same arithmetic, bitwise
end

local ok, err = pcall(sl.trainer, sl.config{model = "llama-tiny", base_num_decoder_layers = 2,
                                            max_target_length = 32, per_device_batch_size = 1,
                                            ici_pipeline_parallelism = 2, scan_layers = true},
                      sl.mesh{stage = 2, devices = 2}, {store = false})
assert(not ok and tostring(err):find("scan_layers=true with ici_pipeline_parallelism=2", 1, true),
       tostring(err))
print(string.format("scan_layers_test ok: 7b fsdp=256 peak %.3f GiB (per-layer %.3f GiB)",
                    c.memory.peak_bytes / 2 ^ 30, cf.memory.peak_bytes / 2 ^ 30))
