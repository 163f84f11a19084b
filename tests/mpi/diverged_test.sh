#!/usr/bin/env bash
# tests/mpi/diverged_test.sh <shardlab> <mpirun>: a script whose rank 1 makes a different call
# than rank 0 after both compiled the same program (tests/mpi/diverged.lua) ends within seconds
# (the collective timeout stays at its 300 s default) with, on each process, an error naming
# both processes and both calls (docs/distributed.md, "Faults").
set -euo pipefail
shardlab=$1
mpirun=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$(dirname "$0")/mpi_env.sh"
unset SHARDLAB_COLLECTIVE_TIMEOUT

# check CASE RANK0_CALL RANK1_CALL: both processes name both calls.
check() {
  local case=$1 call0=$2 call1=$3 start end
  start=$(date +%s)
  if (cd "$work" && timeout 120 "$mpirun" -np 2 "$shardlab" "$here/diverged.lua" "$case" \
        >"$work/$case.out" 2>"$work/$case.err"); then
    fail "$case: the job succeeded: $(cat "$work/$case.out")"
  fi
  end=$(date +%s)
  (( end - start < 60 )) || fail "$case: took $((end - start)) s"
  ! grep -q "not reached" "$work/$case.out" || fail "$case: a process went on"
  for me in 0 1; do
    local peer=$((1 - me))
    grep -q "process $me and process $peer diverged" "$work/$case.err" ||
      fail "$case: process $me did not name the divergence: $(cat "$work/$case.err")"
  done
  grep -q "process 0 runs $call0" "$work/$case.err" || fail "$case: rank 0's call: $(cat "$work/$case.err")"
  grep -q "process 1 runs $call1" "$work/$case.err" || fail "$case: rank 1's call: $(cat "$work/$case.err")"
  echo "$case: stopped in $((end - start)) s: $(grep -m1 'diverged' "$work/$case.err")"
}

check fetch "instruction [0-9]* ([a-z_]* over fsdp in train_step) of program [0-9a-f]*, execution 1" \
  "fetch of 'params/"
check extra "fetch of 'params/" \
  "instruction [0-9]* ([a-z_]* over fsdp in train_step) of program [0-9a-f]*, execution 1"
