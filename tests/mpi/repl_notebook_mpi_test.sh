#!/usr/bin/env bash
# tests/mpi/repl_notebook_mpi_test.sh <shardlab> <mpirun>: notebook mode under `mpirun -np 2`
# (docs/distributed.md, "The REPL on several processes"): every process runs each cell in
# lockstep; only process 0 reads the notebook and writes the report; a cell that fails on
# process 1 only fails on every process (all stop at the same cell, nothing hangs) and the
# report names process 1's error; an error on both is named once.
set -euo pipefail
shardlab=$(realpath "$1")
mpirun=$2
source "$(dirname "$0")/mpi_env.sh"
export SHARDLAB_COLLECTIVE_TIMEOUT=60
cd "$work"
cat >nb.lua <<'LUA'
-- %% [markdown]
-- # Two processes
-- %%
m = sl.mesh{data = 2, devices = 2}
t = sl.trainer(sl.config{model = "llama-tiny", steps = 10, per_device_batch_size = 1, max_target_length = 32, base_emb_dim = 32, base_num_query_heads = 4, base_num_kv_heads = 4, head_dim = 8, base_mlp_dim = 64, base_num_decoder_layers = 2, enable_checkpointing = false}, m)
h = t:step()
print(string.format("stepped %d on %d processes", t.current_step, sl.process_count()))
-- %%
error("on both")
-- %%
if sl.process_index() == 1 then error("only on one") end
-- %%
h = t:step()
io.stderr:write(string.format("process %d stepped %d\n", sl.process_index(), t.current_step))
LUA
# --allow-errors: every cell runs on both processes, errors recorded.
timeout 120 "$mpirun" -np 2 "$shardlab" --db nb.db --notebook nb.lua --allow-errors -o all.md \
  >out.txt 2>err.txt || fail "allow-errors run: $(cat err.txt)"
grep -q '^stepped 1 on 2 processes$' all.md || fail "cell 1 output missing: $(cat all.md)"
grep -q '^nb.lua:9: on both$' all.md || fail "process 0's error missing"
grep -q '^process 1: the same error$' all.md || fail "process 1's same error not named"
grep -q '^process 1: nb.lua:11: only on one$' all.md || fail "process 1's own error not named"
# The cells' output (stderr too) is captured into the report; the step needs both processes.
grep -q "^process 0 stepped 2$" all.md || fail "the last cell did not step on both processes"
[[ $(ls ./*.md) == "./all.md" ]] || fail "only process 0 writes a report: $(ls)"
# Without --allow-errors both stop at the first failing cell (process 0's own cell succeeded).
sed -i 's/^error("on both")$/x = 1/' nb.lua
if timeout 120 "$mpirun" -np 2 "$shardlab" --db nb.db --notebook nb.lua -o stop.md >out2.txt \
  2>err2.txt; then
  fail "a failing cell on process 1 ended the notebook with 0"
fi
grep -q '^process 1: nb.lua:11: only on one$' stop.md || fail "process 1's error not in the report"
grep -q 'not run: an earlier cell failed' stop.md || fail "the last cell ran after the failure"
grep -q 'stepped 2' stop.md err2.txt && fail "a process ran past the failing cell"
echo "repl_notebook_mpi_test: ok"
