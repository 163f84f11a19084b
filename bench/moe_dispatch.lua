-- bench/moe_dispatch.lua: mixtral-tiny's two dispatch modes side by side (issue 25): the dense
-- dispatch with capacity (sparse_matmul=false, capacity_factor 1.25, the preset's) and the
-- dropless one (sparse_matmul=true: moe_top_k, moe_permute, ragged_dot), beside llama-tiny
-- with the same active parameters per token (its MLP 2 x 704 = 1408 wide: mixtral-tiny routes
-- each token to 2 of its 4 experts of llama-tiny's 704). Each trains 40 steps of 8 x 128
-- tokens of the fortunes corpus on one device (default dtype, bfloat16; learning rate 3e-3,
-- remat none) and prints the loss (first step -> mean of the last 5), the median step time and
-- tokens/s over steps 4..40. Alternate runs on a shared machine: its noise is a few percent.
--
--   shardlab bench/moe_dispatch.lua [corpus]     (default /usr/share/games/fortunes/cookie)
local corpus = arg[1] or "/usr/share/games/fortunes/cookie"
local runs = {
  {name = "dense", model = "mixtral-tiny", keys = {sparse_matmul = false}},
  {name = "dropless", model = "mixtral-tiny", keys = {sparse_matmul = true}},
  {name = "llama", model = "llama-tiny", keys = {base_mlp_dim = 1408}},
}
for _, r in ipairs(runs) do
  local keys = {model = r.model, dataset = "text:" .. corpus, steps = 40,
                per_device_batch_size = 8, max_target_length = 128, learning_rate = 3e-3,
                warmup_steps_fraction = 0.05, remat_policy = "none"}
  if r.model == "mixtral-tiny" then keys.load_balance_loss_weight = 0.01 end
  for k, v in pairs(r.keys) do keys[k] = v end
  local t = sl.trainer(sl.config(keys), sl.mesh{devices = 1}, {store = false})
  local losses, times = {}, {}
  for i = 1, 40 do
    local h = t:step()
    losses[i] = h.loss
    if i > 3 then times[#times + 1] = h.step_time_s end
  end
  table.sort(times)
  local tail = 0
  for i = 36, 40 do tail = tail + losses[i] / 5 end
  local median = times[#times // 2 + 1]
  print(string.format("%-8s loss %.3f -> %.3f, median step %.3f s, %.0f tokens/s",
                      r.name, losses[1], tail, median, 8 * 128 / median))
end
