-- tests/mpi/script_error.lua: a Lua error on one process only (tests/mpi/script_error_test.sh
-- says which case). Every process must end within seconds naming it, not wait in a collective
-- for the failed process until SHARDLAB_COLLECTIVE_TIMEOUT.
local case, rank = arg[1], tonumber(arg[2])
local function fail_here(what)
  if sl.process_index() == rank then
    local clock = io.popen("date +%s.%N")
    io.stderr:write("raising at " .. clock:read("l") .. "\n")
    clock:close()
    error("boom " .. what .. " on process " .. rank)
  end
end
if case == "before" then fail_here("before the trainer") end
local t = sl.trainer(sl.config{
  model = "llama-tiny", dtype = "float32", steps = 100, per_device_batch_size = 1,
  max_target_length = 16, base_emb_dim = 16, base_num_query_heads = 2, base_num_kv_heads = 2,
  head_dim = 8, base_mlp_dim = 32, base_num_decoder_layers = 1,
}, sl.mesh{data = 2, devices = 2})
t:train{steps = 2, quiet = true}
if case == "after" then fail_here("after steps") end
t:train{steps = 50, quiet = true}
print("not reached")
