-- tests/shell/moe_test.lua: mixture of experts through the shell: t:shardings shows the
-- experts' weights split over `expert`, c.cost the all-to-all bytes over `expert`,
-- t:experts() the last step's load (each layer routes B x T x k choices), the store the same
-- numbers per step; bad MoE settings are errors naming both values; the dropless dispatch
-- (sparse_matmul) trains and plans, and refuses expert parallelism.
local mesh = sl.mesh{expert = 2, devices = 2}
local cfg = sl.config{model = "mixtral-tiny", base_num_decoder_layers = 2, max_target_length = 32,
                      per_device_batch_size = 2, steps = 3, dtype = "float32",
                      load_balance_loss_weight = 0.01}
local t = sl.trainer(cfg, mesh)
local wi = t:shardings():find("params/decoder/layers/MoeBlock_0/wi_0")
assert(wi.type == "f32[4@expert,2,256,704]", wi.type)
local gate = t:shardings():find("params/decoder/layers/MoeBlock_0/gate/kernel")
assert(gate.type == "f32[256,2,4]", gate.type)
local c = t:compile()
assert((c.cost.collective_bytes.expert or 0) > 0, "no bytes over expert")
assert(c:text():find("all_to_all", 1, true), "no all_to_all in the partitioned program")

t:train{steps = 2, quiet = true}
local e = t:experts()
assert(e.step == 1 and #e.layers == 2, tostring(e))
for l = 1, 2 do
  local sum = 0
  for _, v in ipairs(e.layers[l].tokens) do sum = sum + v end
  assert(sum == 4 * 32 * 2, sum)  -- global batch 4 x 32 tokens x top-2
end
assert(tostring(e):find("expert_3", 1, true), tostring(e))
local rows = sl.sql("SELECT count(*) AS n FROM metrics WHERE run_id = ? AND key LIKE 'moe/layer_%'",
                    t.run_id)
assert(rows[1].n == 2 * 2 * 4 * 2, rows[1].n)  -- 2 steps x 2 layers x 4 experts x 2 kinds
local lb = sl.sql("SELECT value FROM metrics WHERE run_id = ? AND key = 'learning/moe_lb_loss'",
                  t.run_id)
assert(#lb == 2 and lb[1].value > 0, #lb)

local ok, err = pcall(sl.trainer, sl.config{model = "mixtral-tiny", num_experts_per_tok = 5},
                      sl.mesh{devices = 1}, {store = false})
assert(not ok and err:find("num_experts_per_tok 5", 1, true) and err:find("num_experts 4", 1, true),
       err)
-- MaxText's default dispatch, dropless (sparse_matmul): mixtral-8x7b plans shape-only on fsdp;
-- (expert parallelism below).
local big = sl.trainer(sl.config{model = "mixtral-8x7b", per_device_batch_size = 1,
                                 max_target_length = 256, sparse_matmul = true},
                       sl.mesh{fsdp = 8, devices = 8}, {shape_only = true, store = false})
assert(big:compile():text():find("ragged_dot", 1, true), "no ragged_dot in mixtral-8x7b's plan")
-- With expert parallelism (the keys, or the mesh alone) its rows move by ragged all-to-all over
-- `expert`, as MaxText's sparse_matmul under shard_map: moe_ep_plan's offsets, the exchange.
for _, keys in ipairs({{ici_expert_parallelism = 2}, {}}) do
  local t = sl.trainer(sl.config{model = "mixtral-tiny", sparse_matmul = true,
                                 ici_expert_parallelism = keys.ici_expert_parallelism},
                       sl.mesh{expert = 2, devices = 2}, {shape_only = true, store = false})
  local text = t:compile():text()
  assert(text:find("ragged_all_to_all", 1, true) and text:find("moe_ep_plan", 1, true),
         "no ragged all-to-all in the expert-parallel dropless plan")
end

-- mixtral-tiny dropless on fsdp=2 trains: the grouped matmul in the program, nothing dropped.
local d = sl.trainer(sl.config{model = "mixtral-tiny", sparse_matmul = true,
                               base_num_decoder_layers = 2, max_target_length = 32,
                               per_device_batch_size = 2, dtype = "float32",
                               learning_rate = 3e-3, warmup_steps_fraction = 0.1},
                     sl.mesh{fsdp = 2, devices = 2}, {store = false})
assert(d:compile():text():find("ragged_dot", 1, true), "no ragged_dot in the dropless program")
local first = d:step().loss
for _ = 1, 8 do d:step() end
local last = d:step().loss
assert(last < first, string.format("dropless mixtral-tiny: loss %g -> %g", first, last))
local de = d:experts()
assert(de.capacity == 0 and tostring(de):find("none dropped", 1, true), tostring(de))
for l = 1, 2 do
  local sum, dropped = 0, 0
  for _, v in ipairs(de.layers[l].tokens) do sum = sum + v end
  for _, v in ipairs(de.layers[l].dropped) do dropped = dropped + v end
  assert(sum == 4 * 32 * 2 and dropped == 0, sum .. " " .. dropped)
end
ok, err = pcall(function() return sl.trainer(sl.config{model = "llama-tiny"}, sl.mesh{devices = 1},
                                             {store = false}):experts() end)
assert(not ok and err:find("has no experts", 1, true), err)
print("moe_test ok")
