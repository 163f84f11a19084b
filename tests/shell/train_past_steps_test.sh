#!/usr/bin/env bash
# tests/shell/train_past_steps_test.sh: t:train{} and the config's steps (issue 30 item 20):
#  1. t:train{} at the config's steps says there is nothing left; t:train{steps = N} beyond them
#     says which steps are past it and that the schedule's learning rate is 0 there;
#  2. the progress bar's fill counts what its counter counts (global steps), also in a call
#     that starts after earlier steps (it counted the call's steps: "[#....] 212/401");
#  3. a REPL session whose t:train{} is interrupted once (Ctrl-C) and then ended normally
#     (Ctrl-D, end of input) ends its run FINISHED, not KILLED.
# Usage: train_past_steps_test.sh path/to/shardlab
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
pid=""
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$tmp"
cat > cfg.lua <<'LUA'
return sl.config{base_num_decoder_layers = 1, max_target_length = 16, per_device_batch_size = 1,
                 steps = tonumber(os.getenv("STEPS") or "3")}
LUA

# 1. Past the config's steps.
cat > past.lua <<'LUA'
local t = sl.trainer(dofile("cfg.lua"), nil, {store = false})
print("first", t:train{quiet = true}.steps)
print("second", t:train{quiet = true}.steps)
print("third", t:train{steps = 2, quiet = true}.steps)
LUA
"$bin" past.lua > past.out 2>&1 || fail "past.lua: $(cat past.out)"
grep -q "^first	3$" past.out || fail "first call: $(cat past.out)"
grep -q "^Trainer:train: nothing to train: the trainer is at step 3, the config's steps = 3 are done" past.out ||
  fail "t:train{} at the config's steps said nothing: $(cat past.out)"
grep -q "^second	0$" past.out || fail "second call: $(cat past.out)"
grep -q "^Trainer:train: steps 3-4 are past the config's steps = 3; .* the learning rate is 0" past.out ||
  fail "t:train{steps = 2} past the config's steps said nothing: $(cat past.out)"
grep -q "^third	2$" past.out || fail "third call: $(cat past.out)"

# 2. The bar on a terminal (script(1) gives it one): 2 steps, then a call of 4 more (3/6 .. 6/6).
cat > bar.lua <<'LUA'
local t = sl.trainer(dofile("cfg.lua"), nil, {store = false})
t:train{steps = 2}
t:train{steps = 4}
LUA
STEPS=8 script -qfec "$bin bar.lua" /dev/null > bar.out 2>&1 || fail "bar.lua: $(cat bar.out)"
python3 - bar.out <<'PY' || fail "progress bar: $(tr '\r' '\n' < bar.out)"
import re, sys
bars = re.findall(r"\[([#.]{30})\] (\d+)/(\d+)", open(sys.argv[1], errors="replace").read())
assert len(bars) >= 6, bars
for fill, n, total in bars:
    assert fill.count("#") == 30 * int(n) // int(total), (fill, n, total)
assert ("3", "6") in [(n, t) for _, n, t in bars], bars
PY

# 3. Ctrl-C once in a REPL session, then Ctrl-D: the run ends FINISHED.
mkfifo in.fifo
STEPS=100000 "$bin" --db runs.db -i < in.fifo > repl.out 2>&1 &
pid=$!
exec 3> in.fifo
echo 't = sl.trainer(dofile("cfg.lua")) r = t:train{quiet = true}' >&3
for _ in $(seq 1 600); do
  n=$(sqlite3 runs.db "select count(*) from steps" 2>/dev/null || echo 0)
  ((n >= 2)) && break
  kill -0 "$pid" 2>/dev/null || fail "the REPL ended: $(cat repl.out)"
  sleep 0.1
done
kill -INT "$pid"
echo 'print("interrupted:", r.interrupted)' >&3
exec 3>&-
for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
wait "$pid" || fail "the REPL failed: $(cat repl.out)"
pid=""
grep -q "interrupted:	true" repl.out || fail "t:train was not interrupted: $(cat repl.out)"
status=$(sqlite3 runs.db "select status from runs")
[[ $status == FINISHED ]] || fail "run ended $status after Ctrl-C then Ctrl-D: $(cat repl.out)"
echo "train_past_steps_test ok"
