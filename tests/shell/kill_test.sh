#!/usr/bin/env bash
# tests/shell/kill_test.sh: SIGKILL in the middle of a real training run loses no flushed step.
# Runs `shardlab` training into a store, kills it with SIGKILL once the sqlite3 CLI (reading
# while the run writes) sees some steps, then checks the file opens cleanly, every flushed
# step is still there (contiguous from 0) and the config is in `params`.
# Usage: kill_test.sh path/to/shardlab
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
pid=""
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
db="$tmp/run.db"

"$bin" --db "$db" -e '
  local t = sl.trainer(sl.config{base_num_decoder_layers = 1, max_target_length = 64,
                                 per_device_batch_size = 2, steps = 100000, run_name = "killed"})
  t:train{quiet = true}' > "$tmp/out.log" 2>&1 &
pid=$!

seen=0
for _ in $(seq 1 600); do  # up to 60 s
  seen=$(sqlite3 "$db" "select count(*) from steps" 2>/dev/null || echo 0)
  ((seen >= 20)) && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/out.log"; fail "shardlab exited early"; }
  sleep 0.1
done
((seen >= 20)) || fail "only $seen steps after 60 s"
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
pid=""

[[ $(sqlite3 "$db" "pragma integrity_check") == ok ]] || fail "integrity_check failed"
after=$(sqlite3 "$db" "select count(*) from steps")
((after >= seen)) || fail "$seen steps were visible before the kill, $after after"
[[ $(sqlite3 "$db" "select max(step) - min(step) + 1 = count(*) from steps") == 1 ]] ||
  fail "steps are not contiguous"
[[ $(sqlite3 "$db" "select count(*) from params where key = 'model_name' and value = 'llama-tiny'") == 1 ]] ||
  fail "params lack model_name"
[[ $(sqlite3 "$db" "select status from runs where name = 'killed'") == RUNNING ]] ||
  fail "a killed run should still read RUNNING (it never ended)"
# The file keeps working: a new process appends a run to it.
"$bin" --db "$db" -e 'assert(#sl.sql("select * from steps") >= 1)' || fail "the store did not reopen"
echo "kill_test: ok ($after steps survived)"
