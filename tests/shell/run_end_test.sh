#!/usr/bin/env bash
# tests/shell/run_end_test.sh: how a run ends when its process is stopped (issue 15):
#  1. Ctrl-C during t:train{} with checkpointing on saves the state after the last completed
#     step, the run is KILLED, and a new process resumes from it (parent run, next step).
#  2. SIGTERM during t:train{}: the process ends within seconds, by SIGTERM, and the run is
#     already KILLED with every step row flushed (read with the sqlite3 CLI, before any other
#     shardlab opens the store); the same at the REPL prompt and in a plain Lua loop.
#  3. An uncaught Lua error after training ends the run FAILED (MLflow: an exception leaving
#     the run's block); the same error under pcall leaves it FINISHED; a REPL error does not.
# Usage: run_end_test.sh path/to/shardlab
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
pid=""
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
db="$tmp/runs.db"
q() { sqlite3 "$db" "$1"; }

# A tiny model, checkpointing on, a period that never comes (and no step-0 save, so the
# only checkpoint is the one Ctrl-C writes).
cat > "$tmp/cfg.lua" <<'LUA'
return sl.config{base_num_decoder_layers = 1, max_target_length = 16, per_device_batch_size = 1,
                 steps = 100000, enable_checkpointing = true, checkpoint_period = 100000,
                 save_checkpoint_on_start = false,
                 base_output_directory = os.getenv("OUT_DIR"), run_name = os.getenv("RUN_NAME")}
LUA
export OUT_DIR="$tmp/out" CFG="$tmp/cfg.lua"

# wait_steps NAME N: until the store has N steps of run NAME (up to 60 s).
wait_steps() {
  for _ in $(seq 1 600); do
    local n
    n=$(q "select count(*) from steps join runs using (run_id) where name = '$1'" 2>/dev/null || echo 0)
    ((n >= $2)) && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/log"; fail "$1: exited before $2 steps"; }
    sleep 0.1
  done
  fail "$1: fewer than $2 steps after 60 s"
}
# ended_within PID SECONDS: waits for the process; fails if it takes longer.
ended_within() {
  local start=$SECONDS
  for _ in $(seq 1 $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  fail "still running $(($SECONDS - start)) s after the signal"
}

# ---- 1. Ctrl-C: checkpoint of the last completed step, KILLED, resume ----------------------
cat > "$tmp/train.lua" <<'LUA'
local t = sl.trainer(dofile(arg[1]))
local r = t:train{quiet = true}
print("result", r.interrupted, r.steps, t.current_step)
LUA
RUN_NAME=ctrlc "$bin" --db "$db" "$tmp/train.lua" "$tmp/cfg.lua" > "$tmp/log" 2>&1 &
pid=$!
wait_steps ctrlc 3
kill -INT "$pid"
ended_within "$pid" 30
wait "$pid" || { cat "$tmp/log"; fail "ctrl-c: the script failed"; }
pid=""
read -r _ interrupted steps current < <(grep '^result' "$tmp/log" | tr '\t' ' ') || true
[[ $interrupted == true && $steps -ge 3 && $current == "$steps" ]] || { cat "$tmp/log"; fail "ctrl-c: result"; }
last=$((steps - 1))
[[ $(q "select status from runs where name = 'ctrlc'") == KILLED ]] || fail "ctrl-c: run not KILLED"
[[ $(q "select count(*) || ' ' || max(step) from steps join runs using (run_id) where name = 'ctrlc'") == "$steps $last" ]] ||
  fail "ctrl-c: steps rows"
[[ $(q "select group_concat(c.step || ':' || c.status) from checkpoints c join runs using (run_id) where name = 'ctrlc'") == "$last:committed" ]] ||
  fail "ctrl-c: expected one committed checkpoint of step $last, got: $(q 'select step, status from checkpoints')"
grep -q "$last" <<<"$(ls "$OUT_DIR/ctrlc/checkpoints")" || fail "ctrl-c: no checkpoint file for step $last"
first_id=$(q "select run_id from runs where name = 'ctrlc'")
# A new process resumes at the next step, naming the stopped run as its parent.
RUN_NAME=ctrlc "$bin" --db "$db" -e '
  local t = sl.trainer(dofile(os.getenv("CFG")))
  print("resumed at", t.current_step, t.run.parent_run_id)
  local r = t:train{steps = 2, quiet = true}
  print("then", r.steps, r.last.step)' > "$tmp/log2" 2>&1 < /dev/null ||
  { cat "$tmp/log2"; fail "ctrl-c: resume failed"; }
grep -qF "resumed from step $last of run ctrlc" "$tmp/log2" || { cat "$tmp/log2"; fail "ctrl-c: no resume note"; }
grep -qP "^resumed at\t$steps\t$first_id$" "$tmp/log2" || { cat "$tmp/log2"; fail "ctrl-c: resumed at the wrong step or parent"; }
grep -qP "^then\t2\t$((steps + 1))$" "$tmp/log2" || { cat "$tmp/log2"; fail "ctrl-c: training after the resume"; }
echo "ctrl-c: checkpoint of step $last, KILLED, resumed at step $steps"

# ---- 2. SIGTERM: KILLED at once, rows flushed, no hang ---------------------------------------
term_check() {  # term_check NAME: the process ended by SIGTERM, the run KILLED, steps contiguous
  local rc=$1 name=$2
  ((rc == 143)) || { cat "$tmp/log"; fail "$name: exit status $rc, expected 143 (SIGTERM)"; }
  [[ $(q "select status from runs where name = '$name'") == KILLED ]] ||
    { cat "$tmp/log"; fail "$name: status $(q "select status from runs where name = '$name'"), expected KILLED at once"; }
  [[ $(q "select count(*) > 0 and max(step) + 1 = count(*) from steps join runs using (run_id) where name = '$name'") == 1 ]] ||
    fail "$name: steps rows missing"
  [[ -n $(q "select end_ms from runs where name = '$name'") ]] || fail "$name: no end_ms"
}
RUN_NAME=term "$bin" --db "$db" "$tmp/train.lua" "$tmp/cfg.lua" > "$tmp/log" 2>&1 &
pid=$!
wait_steps term 3
kill -TERM "$pid"
ended_within "$pid" 12
rc=0; wait "$pid" || rc=$?
pid=""
term_check "$rc" term
grep -q "terminated (SIGTERM)" "$tmp/log" || { cat "$tmp/log"; fail "term: no message"; }
last=$(q "select max(step) from steps join runs using (run_id) where name = 'term'")
[[ $(q "select step from checkpoints join runs using (run_id) where name = 'term'") == "$last" ]] ||
  fail "term: no checkpoint of the last step ($last)"
# Under pcall the script cannot go on: every later Lua instruction raises again.
cat > "$tmp/pcall.lua" <<'LUA'
local t = sl.trainer(dofile(arg[1]))
io.stderr:write(tostring(pcall(t.train, t, {quiet = true})), "\n")
while true do pcall(function() end) end
LUA
RUN_NAME=term_pcall "$bin" --db "$db" "$tmp/pcall.lua" "$tmp/cfg.lua" > "$tmp/log" 2>&1 &
pid=$!
wait_steps term_pcall 2
kill -TERM "$pid"
ended_within "$pid" 12
rc=0; wait "$pid" || rc=$?
pid=""
term_check "$rc" term_pcall
# At the REPL prompt (stdin a pipe that stays open) and in a Lua loop.
mkfifo "$tmp/in"
RUN_NAME=term_repl "$bin" --db "$db" -i -e 't = sl.trainer(dofile(os.getenv("CFG"))) t:train{steps = 2, quiet = true} io.stderr:write("prompt\n")' \
  < "$tmp/in" > "$tmp/log" 2>&1 &
pid=$!
exec 3> "$tmp/in"
for _ in $(seq 1 600); do grep -q prompt "$tmp/log" && break; sleep 0.1; done
grep -q prompt "$tmp/log" || { cat "$tmp/log"; fail "repl: no prompt"; }
sleep 0.3
kill -TERM "$pid"
ended_within "$pid" 12
rc=0; wait "$pid" || rc=$?
pid=""
exec 3>&-
term_check "$rc" term_repl
RUN_NAME=term_loop "$bin" --db "$db" -e 't = sl.trainer(dofile(os.getenv("CFG"))) t:train{steps = 2, quiet = true} io.stderr:write("spin\n") while true do end' \
  > "$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q spin "$tmp/log" && break; sleep 0.1; done
kill -TERM "$pid"
ended_within "$pid" 12
rc=0; wait "$pid" || rc=$?
pid=""
term_check "$rc" term_loop
# A notebook: no further cell runs, the report is still written, the run KILLED.
cat > "$tmp/nb.lua" <<'LUA'
-- %%
t = sl.trainer(dofile(os.getenv("CFG")))
t:train{steps = 2, quiet = true}
io.stderr:write("cell two\n")
while true do end
-- %%
print("never runs")
LUA
RUN_NAME=term_nb "$bin" --db "$db" --notebook "$tmp/nb.lua" -o "$tmp/nb.report.md" > "$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "cell two" "$tmp/log" && break; sleep 0.1; done
kill -TERM "$pid"
ended_within "$pid" 12
rc=0; wait "$pid" || rc=$?
pid=""
term_check "$rc" term_nb
grep -q "terminated (SIGTERM)" "$tmp/nb.report.md" || { cat "$tmp/log"; fail "notebook: no report with the error"; }
! grep -q "^never runs" "$tmp/nb.report.md" || fail "notebook: a cell ran after SIGTERM"
echo "sigterm: KILLED at once in t:train{}, under pcall, at the prompt, in a Lua loop and in a notebook"

# ---- 3. A Lua error after training: FAILED; under pcall or at the REPL: FINISHED ---------------
cat > "$tmp/err.lua" <<'LUA'
local t = sl.trainer(dofile(arg[1]))
t:train{steps = 2, quiet = true}
if arg[2] == "pcall" then print(pcall(error, "caught")) else error("after training") end
LUA
rc=0; RUN_NAME=err "$bin" --db "$db" "$tmp/err.lua" "$tmp/cfg.lua" > "$tmp/log" 2>&1 || rc=$?
((rc == 1)) || { cat "$tmp/log"; fail "err: exit status $rc"; }
[[ $(q "select status from runs where name = 'err'") == FAILED ]] || fail "err: run not FAILED"
q "select message from events join runs using (run_id) where name = 'err' and kind = 'error'" |
  grep -q "the script ended with an error: .*after training" || fail "err: no error event"
RUN_NAME=err_pcall "$bin" --db "$db" "$tmp/err.lua" "$tmp/cfg.lua" pcall > "$tmp/log" 2>&1 || { cat "$tmp/log"; fail "pcall"; }
[[ $(q "select status from runs where name = 'err_pcall'") == FINISHED ]] || fail "err_pcall: run not FINISHED"
rc=0; RUN_NAME=err_e "$bin" --db "$db" -e 't = sl.trainer(dofile(os.getenv("CFG"))) t:train{steps = 1, quiet = true} local x = nil + 1' \
  > "$tmp/log" 2>&1 || rc=$?
((rc == 1)) && [[ $(q "select status from runs where name = 'err_e'") == FAILED ]] || fail "err_e: -e chunk"
printf 't = sl.trainer(dofile(os.getenv("CFG")))\nt:train{steps = 1, quiet = true}\nerror("typo")\n' |
  RUN_NAME=err_repl "$bin" --db "$db" -i > "$tmp/log" 2>&1 || { cat "$tmp/log"; fail "err_repl"; }
[[ $(q "select status from runs where name = 'err_repl'") == FINISHED ]] || fail "err_repl: an error at the prompt ended the run"
echo "errors: FAILED after an uncaught error, FINISHED under pcall and at the REPL"
echo "run_end_test ok"
