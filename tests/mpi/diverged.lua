-- tests/mpi/diverged.lua: both processes compile the same program and step once; then rank 1
-- makes a different call than rank 0 (tests/mpi/diverged_test.sh says which). Both must stop at
-- once with an error naming both processes and both calls, not after the collective timeout.
local case = arg[1]
local t = sl.trainer(sl.config{
  model = "llama-tiny", dtype = "float32", steps = 4, per_device_batch_size = 1,
  max_target_length = 16, base_emb_dim = 16, base_num_query_heads = 2, base_num_kv_heads = 2,
  head_dim = 8, base_mlp_dim = 32, base_num_decoder_layers = 1,
}, sl.mesh{fsdp = 2, devices = 2})
t:step():wait()
local function embedding()  -- sharded over fsdp: fetching it gathers across the processes
  for _, p in ipairs(t:paths()) do
    if p:find("embedding") then return p end
  end
end
if case == "fetch" then  -- rank 0 steps again, rank 1 fetches a parameter
  if sl.process_index() == 1 then t:param(embedding()) else t:step():wait() end
else  -- "extra": rank 1 runs one more step, then both fetch
  if sl.process_index() == 1 then t:step():wait() end
  t:param(embedding())
end
print("not reached")
