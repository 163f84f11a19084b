#!/usr/bin/env bash
# tests/mpi/train_mpi_test.sh <shardlab> <mpirun>: the real binary under mpirun (docs/distributed.md).
#  0. sl.process_index/process_count/devices/local_devices with --local-devices.
#  1. tests/mpi/train_mpi.lua on 2 and 4 processes prints bitwise the losses (from process 0's
#     store) and parameters (gathered) of the same mesh simulated in one process; the store has
#     one row per step (only process 0 writes it).
#  2. A checkpoint written on 4 processes restores on 1 and on 2 processes: the next steps and
#     the final parameters equal an uninterrupted one-process run.
#  3. Bad input ends at once with a clear error: a mesh that does not split over the processes;
#     different configs on different ranks (named before the first step).
#  4. A rank killed mid-run ends the job within 10 s, the message names the rank (Open MPI's
#     mpirun reports it and ends the others), and process 0's store keeps its flushed steps.
#  5. The REPL under mpirun -np 2 (lines piped): lockstep, errors on both, the prompt survives.
set -euo pipefail
shardlab=$1
mpirun=$2
here=$(cd "$(dirname "$0")" && pwd)
script=$here/train_mpi.lua
source "$(dirname "$0")/mpi_env.sh"
export TRAIN_MPI_DATASET="text:$here/train_mpi_test.sh"  # a text stream: rows differ

# run NAME NP ARGS...: runs the script in $work/NAME on NP processes (1: without mpirun).
run() {
  local name=$1 np=$2
  shift 2
  mkdir -p "$work/$name"
  if [[ $np == 1 ]]; then
    (cd "$work/$name" && "$shardlab" --db run.db "$script" "$@" >out.txt 2>err.txt) ||
      fail "$name: $(cat "$work/$name/err.txt")"
  else
    (cd "$work/$name" && "$mpirun" -np "$np" "$shardlab" --db run.db "$script" "$@" >out.txt \
      2>err.txt) || fail "$name: $(cat "$work/$name/err.txt")"
  fi
}
same() {  # same A B: identical outputs
  diff "$work/$1/out.txt" "$work/$2/out.txt" >/dev/null ||
    fail "$1 differs from $2: $(diff "$work/$1/out.txt" "$work/$2/out.txt" | head -5)"
}

# 0. JAX's process functions, with --local-devices (stderr: every process's line is kept).
"$mpirun" -np 2 "$shardlab" --local-devices 2 -e 'local d = sl.local_devices()
  io.stderr:write(string.format("proc %d/%d devices %d local %d,%d\n", sl.process_index(),
    sl.process_count(), #sl.devices(), d[1].id, d[2].id))' 2>"$work/procs.txt"
grep -q "^proc 0/2 devices 4 local 0,1$" "$work/procs.txt" || fail "$(cat "$work/procs.txt")"
grep -q "^proc 1/2 devices 4 local 2,3$" "$work/procs.txt" || fail "$(cat "$work/procs.txt")"
if "$shardlab" --local-devices 0 -e '' 2>"$work/bad_flag.txt"; then fail "--local-devices 0 ran"; fi
grep -q "expects a device count" "$work/bad_flag.txt" || fail "$(cat "$work/bad_flag.txt")"

# 1. Bitwise equal to the simulated mesh.
run sim_data 1 data:2 3 "$work/sim_data/out"
run mpi_data 2 data:2 3 "$work/mpi_data/out"
same sim_data mpi_data
run sim_df 1 data:2,fsdp:2 3 "$work/sim_df/out"
run mpi_df2 2 data:2,fsdp:2 3 "$work/mpi_df2/out"
run mpi_df4 4 data:2,fsdp:2 3 "$work/mpi_df4/out"
same sim_df mpi_df2
same sim_df mpi_df4
grep -q "^step 2 loss " "$work/mpi_df4/out.txt" || fail "no losses printed"
rows=$("$shardlab" --db "$work/mpi_df4/run.db" -e 'io.write(#sl.sql("SELECT * FROM steps"))')
[[ $rows == 3 ]] || fail "store of the 4-process run has $rows step rows, expected 3"
# ... and every process's device time and collective wait per step (metrics dist/*/process_<p>).
per=$("$shardlab" --db "$work/mpi_df4/run.db" -e 'io.write(#sl.sql(
  "SELECT * FROM metrics WHERE key LIKE ? AND value >= 0", "dist/collective_wait_s/process_%"))')
[[ $per == 12 ]] || fail "store of the 4-process run has $per collective wait rows, expected 3 x 4"
# ... and the job's process count (JAX's process_count) as a param of the run.
for case in sim_df:1 mpi_df2:2 mpi_df4:4; do
  pc=$("$shardlab" --db "$work/${case%%:*}/run.db" -e 'io.write(sl.sql(
    "SELECT value FROM params WHERE key = ?", "process_count")[1].value)')
  [[ $pc == "${case#*:}" ]] || fail "${case%%:*}: params.process_count is '$pc', expected ${case#*:}"
done

# 2. Restore a 4-process checkpoint (after step 2) on 1 and 2 processes; run 2 more steps.
run sim_5 1 data:2,fsdp:2 5 "$work/sim_5/out"
for np in 1 2; do
  mkdir -p "$work/resume$np"
  cp -r "$work/mpi_df4/out" "$work/resume$np/out"
  run resume$np $np data:2,fsdp:2 2 "$work/resume$np/out"
  # The resumed run's store holds steps 3 and 4; the uninterrupted one 0..4.
  grep -v "^step [012] " "$work/sim_5/out.txt" >"$work/sim_5/tail.txt"
  grep -q "^resumed from step 2 of .*/checkpoints/2/" "$work/resume$np/out.txt" ||
    fail "restore on $np: did not resume from step 2"
  grep -v "^resumed from" "$work/resume$np/out.txt" >"$work/resume$np/tail.txt"
  diff "$work/sim_5/tail.txt" "$work/resume$np/tail.txt" >/dev/null ||
    fail "restore on $np: $(diff "$work/sim_5/tail.txt" "$work/resume$np/tail.txt" | head -5)"
done

# 3. A mesh of 3 devices on 2 processes.
mkdir -p "$work/bad"
if (cd "$work/bad" && timeout 60 "$mpirun" -np 2 "$shardlab" --db run.db "$script" data:3 1 \
  "$work/bad/out" >out.txt 2>err.txt); then
  fail "a 3-device mesh on 2 processes ran"
fi
grep -q "a mesh of 3 devices cannot be split over 2 processes" "$work/bad/err.txt" ||
  fail "no clear error: $(head -5 "$work/bad/err.txt")"

# 3b. Different configs on the two ranks (schedules of 8 and 9 steps: different programs).
mkdir -p "$work/mismatch"
if (cd "$work/mismatch" && timeout 60 "$mpirun" -np 1 "$shardlab" --db run.db "$script" data:2 1 \
  "$work/mismatch/out" 8 : -np 1 "$shardlab" --db run.db "$script" data:2 1 "$work/mismatch/out" 9 \
  >out.txt 2>err.txt); then
  fail "different programs on the two ranks ran"
fi
grep -q "process 1 compiled a different program than process 0" "$work/mismatch/err.txt" ||
  fail "mismatch not named: $(head -5 "$work/mismatch/err.txt")"
grep -q "^step 0 loss" "$work/mismatch/out.txt" && fail "a step ran despite the mismatch"

# 4. Kill rank 2 of 4 once the job is training; it must end within 10 s naming the rank.
mkdir -p "$work/kill"
(cd "$work/kill" && exec "$mpirun" -np 4 "$shardlab" --db run.db "$script" data:4 100000 \
  "$work/kill/out" 100000 >out.txt 2>err.txt) &
job=$!
victim=""
for _ in $(seq 1 300); do  # the ranks are mpirun's children, in rank order
  mapfile -t ranks < <(pgrep -P "$job" -f "$script" | sort -n)
  if ((${#ranks[@]} == 4)) && grep -q "process 2 of 4" "$work/kill/err.txt"; then
    victim=${ranks[2]}
    break
  fi
  sleep 0.1
done
[[ -n $victim ]] || { kill "$job"; fail "the 4-process job did not start"; }
sleep 1
kill -9 "$victim"
start=$SECONDS
for _ in $(seq 1 150); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$job" 2>/dev/null; then
  kill "$job"
  fail "the job outlived its killed rank by 15 s"
fi
wait "$job" && fail "the job with a killed rank exited 0"
elapsed=$((SECONDS - start))
((elapsed < 10)) || fail "the job took ${elapsed} s to end after a rank was killed"
grep -q "rank 2" "$work/kill/err.txt" || fail "the message does not name rank 2: $(cat "$work/kill/err.txt")"
# Process 0 (ended by mpirun's SIGTERM, then SIGKILL) kept its flushed steps. The run is KILLED
# when process 0 got to mark it, else RUNNING until the store sees its process gone.
kept=$("$shardlab" --db "$work/kill/run.db" \
  -e 'local r = sl.sql("SELECT status, (SELECT count(*) FROM steps) AS n FROM runs")[1]
      io.write(r.status, " ", r.n)')
[[ $kept =~ ^(KILLED|RUNNING)\ [1-9] ]] || fail "store after the kill: '$kept', expected steps"
# 5. The REPL on 2 processes (stdin piped into mpirun, -i): process 0 reads each line, both run
# it in lockstep: a trainer is built and stepped, an error is reported on both, and both keep
# taking lines (a multi-line chunk included).
mkdir -p "$work/repl"
cat >"$work/repl/in.lua" <<'EOF'
m = sl.mesh{data = 2, devices = 2}
t = sl.trainer(sl.config{model = "llama-tiny", steps = 4, per_device_batch_size = 1, max_target_length = 32, base_emb_dim = 32, base_num_query_heads = 4, base_num_kv_heads = 4, head_dim = 8, base_mlp_dim = 64, base_num_decoder_layers = 2, enable_checkpointing = false}, m)
h = t:step()
io.stderr:write(string.format("rank %d loss %a\n", sl.process_index(), h.loss));
error("boom")
for i = 1,
  2 do io.stderr:write(string.format("rank %d alive %d\n", sl.process_index(), i)) end
EOF
(cd "$work/repl" && timeout 120 "$mpirun" -np 2 "$shardlab" --db run.db -i <in.lua >out.txt \
  2>err.txt) || fail "repl: $(cat "$work/repl/err.txt")"
# Process 0 prints the error and names process 1's, the same error (docs/distributed.md).
[[ $(grep -c "boom" "$work/repl/err.txt") == 1 ]] && grep -q "^process 1: the same error$" \
  "$work/repl/err.txt" || fail "repl error not on both: $(cat "$work/repl/err.txt")"
for r in 0 1; do
  grep -q "^rank $r alive 2$" "$work/repl/err.txt" || fail "repl: rank $r did not survive the error"
done
[[ $(grep "^rank . loss" "$work/repl/err.txt" | cut -d' ' -f3- | sort -u | wc -l) == 1 ]] ||
  fail "repl: the ranks' losses differ: $(grep loss "$work/repl/err.txt")"

echo "train_mpi_test: ok (killed rank ended the job in ${elapsed} s)"
