#!/usr/bin/env bash
# tests/shell/kill_soak_test.sh: repeated SIGKILLs of a checkpointing training run (issue 16).
# Starts `shardlab` training llama-tiny with checkpointing into a temporary output directory
# and store, SIGKILLs it at a random moment after its first recorded step (fixed seed), N
# times over; after each kill checks that the store passes `PRAGMA integrity_check`, that
# every step flushed before the kill is still there and each run's steps are contiguous, that
# the next shardlab process marks the killed run KILLED (a RUNNING run of this host whose
# pid is gone, engine/store/runs.cpp), and that the next run resumes right after the latest
# checkpoint (its first step = checkpoint step + 1, or 0 when there is none). A last run
# finishes normally. Prints one summary line.
# Usage: kill_soak_test.sh path/to/shardlab [kills] [seed]
set -euo pipefail
bin=$(realpath "$1")
kills=${2:-8}
RANDOM=${3:-16}
tmp=$(mktemp -d)
pid=""
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [[ -f $tmp/out.log ]] && tail -20 "$tmp/out.log"
  exit 1
}
db="$tmp/run.db"
ckdir="$tmp/out/soak/checkpoints"
q() { sqlite3 -cmd ".timeout 5000" "$db" "$1"; }

# Starts a run training up to step $1 in the background; sets pid.
start_run() {
  "$bin" --db "$db" -e "
    local t = sl.trainer(sl.config{base_num_decoder_layers = 1, max_target_length = 32,
                                   per_device_batch_size = 1, steps = $1, run_name = 'soak',
                                   enable_checkpointing = true, checkpoint_period = 3,
                                   base_output_directory = '$tmp/out'})
    t:train{quiet = true}" > "$tmp/out.log" 2>&1 &
  pid=$!
}

# The latest complete checkpoint step on disk (a step directory holding its file), or -1.
latest_checkpoint() {
  local best=-1 d
  for d in "$ckdir"/*; do
    [[ -f $d/state.safetensors ]] || continue
    d=${d##*/}
    [[ $d =~ ^[0-9]+$ ]] && ((d > best)) && best=$d
  done
  echo "$best"
}

# Waits until run of process $pid has recorded a step; prints its run_id.
wait_first_step() {
  local run="" n
  for _ in $(seq 1 600); do  # up to 60 s
    run=$(q "select run_id from tags where key = 'shardlab.pid' and value = '$pid'" \
          2>/dev/null || true)
    if [[ -n $run ]]; then
      n=$(q "select count(*) from steps where run_id = '$run'" 2>/dev/null || echo 0)
      ((n > 0)) && { echo "$run"; return; }
    fi
    kill -0 "$pid" 2>/dev/null || fail "shardlab exited before its first step"
    sleep 0.1
  done
  fail "no step recorded after 60 s"
}

# Checks the new run $1 (just started after a kill of run $2, checkpoint $3 at the start).
check_resume() {
  local run=$1 killed=$2 ck=$3 first status
  first=$(q "select min(step) from steps where run_id = '$run'")
  ((first == ck + 1)) || fail "run resumed at step $first, latest checkpoint was $ck"
  ((ck < 0)) || resumes=$((resumes + 1))
  if [[ -n $killed ]]; then
    status=$(q "select status from runs where run_id = '$killed'")
    [[ $status == KILLED ]] ||
      fail "killed run reads '$status' after the next process opened the store"
    parent=$(q "select coalesce(parent_run_id, '') from runs where run_id = '$run'")
    ((ck < 0)) || [[ $parent == "$killed" ]] ||
      fail "resumed run names parent '$parent', not '$killed'"
  fi
}

lost=0
resumes=0
killed=""
total_steps=0
for i in $(seq 1 "$kills"); do
  ck=$(latest_checkpoint)
  start_run 100000
  run=$(wait_first_step)
  check_resume "$run" "$killed" "$ck"
  # A random moment 0 - 2.9 s after the first step (fixed seed: the same delays every run).
  sleep "$((RANDOM % 3)).$((RANDOM % 10))"
  before=$(q "select count(*) from steps where run_id = '$run'")
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
  [[ $(q "pragma integrity_check") == ok ]] || fail "integrity_check failed after kill $i"
  after=$(q "select count(*) from steps where run_id = '$run'")
  ((after >= before)) || lost=$((lost + before - after))
  contiguous=$(q "select max(step) - min(step) + 1 = count(*) from steps where run_id = '$run'")
  [[ $contiguous == 1 ]] || fail "steps of run $i are not contiguous"
  [[ $(q "select status from runs where run_id = '$run'") == RUNNING ]] ||
    fail "a killed run should read RUNNING until another process opens the store"
  total_steps=$((total_steps + after))
  killed=$run
done
((lost == 0)) || fail "$lost flushed steps lost"

# A last run resumes and finishes.
ck=$(latest_checkpoint)
start_run $((ck + 4))
run=$(wait_first_step)
check_resume "$run" "$killed" "$ck"
wait "$pid" || fail "the last run failed"
pid=""
[[ $(q "select status from runs where run_id = '$run'") == FINISHED ]] ||
  fail "last run did not finish"
[[ $(q "pragma integrity_check") == ok ]] || fail "integrity_check failed at the end"
statuses=$(q "select group_concat(status || '=' || n, ' ') from
                (select status, count(*) n from runs group by status order by status)")
echo "kill_soak: kills=$kills steps_lost=$lost resumes=$resumes steps_recorded=$total_steps" \
     "latest_checkpoint=$ck statuses: $statuses"
