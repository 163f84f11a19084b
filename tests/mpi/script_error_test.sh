#!/usr/bin/env bash
# tests/mpi/script_error_test.sh <shardlab> <mpirun>: a Lua error on one of two processes
# (tests/mpi/script_error.lua), before the trainer exists or after steps, on process 1 or 0,
# ends both processes within 5 s of the error (SHARDLAB_COLLECTIVE_TIMEOUT stays at its 300 s
# default), the job fails, and each process names the error: the failed one reports it, the
# other names the failed process and its error (docs/distributed.md, "Faults"; issue 30 item 9).
set -euo pipefail
shardlab=$1
mpirun=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$(dirname "$0")/mpi_env.sh"
unset SHARDLAB_COLLECTIVE_TIMEOUT

# check CASE RANK: the other process names RANK's error; the job ends within 5 s of it.
check() {
  local case=$1 rank=$2 other=$((1 - $2)) name="$1$2" end raised
  if (cd "$work" && timeout 120 "$mpirun" -np 2 "$shardlab" --db "$name.db" \
        "$here/script_error.lua" "$case" "$rank" >"$work/$name.out" 2>"$work/$name.err"); then
    fail "$name: the job succeeded: $(cat "$work/$name.out")"
  fi
  end=$(date +%s.%N)
  local err="$work/$name.err" what
  ! grep -q "not reached" "$work/$name.out" || fail "$name: a process went on"
  raised=$(sed -n 's/^raising at //p' "$err" | head -1)
  [[ -n $raised ]] || fail "$name: the error was not raised: $(cat "$err")"
  what="boom $( [[ $case == before ]] && echo "before the trainer" || echo "after steps") on process $rank"
  # The failed process's own report, and the other's, naming the failed one and its error.
  grep -q "^shardlab: .*script_error.lua:[0-9]*: $what$" "$err" ||
    fail "$name: process $rank did not report its error: $(cat "$err")"
  grep -q "process $rank ended with an error.*$what" "$err" ||
    fail "$name: process $other did not name process $rank's error: $(cat "$err")"
  awk -v a="$raised" -v b="$end" 'BEGIN { exit !(b - a < 5) }' ||
    fail "$name: the job ended $(awk -v a="$raised" -v b="$end" 'BEGIN { print b - a }') s after the error"
  echo "$name: ended $(awk -v a="$raised" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s after the error: $(grep -m1 "ended with an error" "$err")"
}

check before 1
check after 1
check after 0
check before 0
