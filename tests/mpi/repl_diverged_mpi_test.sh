#!/usr/bin/env bash
# tests/mpi/repl_diverged_mpi_test.sh <shardlab> <mpirun>: a REPL line that makes a collective
# call (t:step()) on process 0 only, under `mpirun -np 2 shardlab -i` (lines piped). Process 1
# finishes the line and tells the others (dist::end_line); process 0, waiting in the step's
# collectives, sees it and ends the job naming process 1 within seconds, not after
# SHARDLAB_COLLECTIVE_TIMEOUT (set to 100 s here).
set -euo pipefail
shardlab=$(realpath "$1")
mpirun=$2
source "$(dirname "$0")/mpi_env.sh"
export SHARDLAB_COLLECTIVE_TIMEOUT=100
cd "$work"
cat >in.lua <<'LUA'
m = sl.mesh{data = 2, devices = 2}
t = sl.trainer(sl.config{model = "llama-tiny", steps = 10, per_device_batch_size = 1, max_target_length = 32, base_emb_dim = 32, base_num_query_heads = 4, base_num_kv_heads = 4, head_dim = 8, base_mlp_dim = 64, base_num_decoder_layers = 2, enable_checkpointing = false}, m, {store = false})
h = t:step()
io.stderr:write(string.format("stepped on %d\n", sl.process_index()))
if sl.process_index() == 0 then h = t:step() end
io.stderr:write("after the diverged line\n")
LUA
start=$SECONDS
if timeout 90 "$mpirun" -np 2 "$shardlab" -i <in.lua >out.txt 2>err.txt; then
  fail "the diverged line ended the job with 0"
fi
elapsed=$((SECONDS - start))
((elapsed < 60)) || fail "took ${elapsed} s: the collective timeout, not the line's notice"
for p in 0 1; do grep -q "^stepped on $p$" err.txt || fail "process $p did not step: $(cat err.txt)"; done
grep -q "process 0: a collective of this line waits for process 1, which finished the line without it" \
  err.txt || fail "the divergence is not named: $(cat err.txt)"
grep -q "after the diverged line" err.txt && fail "a line ran after the divergence"
echo "repl_diverged_mpi_test: ok (${elapsed} s)"
