-- tests/mpi/train_mpi.lua: the same script on every process (tests/mpi/train_mpi_test.sh runs it
-- with and without mpirun). Arguments: mesh ("data:2,fsdp:2"; key=value arguments are
-- config overrides), steps to run now, output dir,
-- [steps of the schedule, default 8].
-- Trains llama-tiny through the real Trainer (async dispatch, data, checkpoints) and prints
-- every loss as a hex float, so runs compare bitwise; resumes from the latest checkpoint in
-- the output dir when there is one.
local mesh_arg, steps, out, total = arg[1], tonumber(arg[2]), arg[3], tonumber(arg[4] or 8)
local axes = {}
local n = 1
for name, size in mesh_arg:gmatch("(%w+):(%d+)") do
  axes[name] = tonumber(size)
  n = n * tonumber(size)
end
axes.devices = n
local mesh = sl.mesh(axes)
local cfg = sl.config{
  model = "llama-tiny", dtype = "float32", steps = total, per_device_batch_size = 1,
  max_target_length = 32, base_emb_dim = 32, base_num_query_heads = 4, base_num_kv_heads = 4,
  head_dim = 8, base_mlp_dim = 64, base_num_decoder_layers = 2, learning_rate = 1e-3,
  base_output_directory = out, run_name = "mpi", enable_checkpointing = true,
  checkpoint_period = 1000, save_checkpoint_on_completion = true,
  -- real rows (each process loads only its own): TRAIN_MPI_DATASET="text:PATH" from the test
  dataset = os.getenv("TRAIN_MPI_DATASET") or "synthetic",
}
local t = sl.trainer(cfg, mesh)
local c = t:compile()
local keys = {}
for axis, bytes in pairs(c.cost.collective_bytes) do keys[#keys + 1] = axis .. "=" .. bytes end
table.sort(keys)
print("collectives " .. table.concat(keys, " "))
io.stderr:write(string.format("process %d of %d, %d local devices\n", sl.process_index(),
                              sl.process_count(), #sl.local_devices()))
t:train{steps = steps, quiet = true}  -- saves a checkpoint on completion (process 0 writes it)
-- Process 0 recorded the run (a fresh --db per invocation): its losses, exactly.
if sl.process_index() == 0 then
  for _, row in ipairs(sl.sql("SELECT step, loss FROM steps ORDER BY step")) do
    print(string.format("step %d loss %a", row.step, row.loss))
  end
end
-- Every parameter, gathered from every process (each t:param is a collective): two exact sums.
for _, path in ipairs(t:paths()) do
  local ok, a = pcall(t.param, t, path)  -- `step` is an integer: skipped
  if not ok then goto continue end
  local sum, weighted = 0.0, 0.0
  for i = 1, #a do
    sum = sum + a[i]
    weighted = weighted + i * a[i]
  end
  print(string.format("param %s %d %a %a", path, #a, sum, weighted))
  ::continue::
end
