#!/usr/bin/env bash
# tests/shell/train_interrupt_test.sh: Ctrl-C (SIGINT) during t:train{} ends it after the current
# step with interrupted = true in its result, also under pcall, and the script goes on
# (issue 15 item 11); a Ctrl-C in plain Lua code still raises "interrupted!".
# Usage: train_interrupt_test.sh path/to/shardlab
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
pid=""
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat > "$tmp/train.lua" <<'LUA'
local t = sl.trainer(sl.config{base_num_decoder_layers = 1, max_target_length = 16,
                               per_device_batch_size = 1, steps = 100000}, nil, {store = false})
io.stderr:write("training\n")
local ok, r = pcall(t.train, t, {steps = 100000, quiet = true})
print("pcall ok:", ok, "interrupted:", ok and r.interrupted, "steps:", ok and r.steps)
print("after train, current_step == steps:", t.current_step == r.steps)
io.stderr:write("spinning\n")
local ok2, err = pcall(function() while true do end end)
print("spin:", ok2, err)
LUA
"$bin" "$tmp/train.lua" > "$tmp/out" 2> "$tmp/err" &
pid=$!
wait_line() {  # wait_line FILE TEXT: up to 60 s
  for _ in $(seq 1 600); do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/out" "$tmp/err"; fail "exited before '$2'"; }
    sleep 0.1
  done
  fail "no '$2' after 60 s"
}
wait_line "$tmp/err" training
sleep 1
kill -INT "$pid"
wait_line "$tmp/err" spinning
sleep 0.3
kill -INT "$pid"
wait "$pid" || { cat "$tmp/out" "$tmp/err"; fail "the script failed"; }
pid=""
grep -qE '^pcall ok:	true	interrupted:	true	steps:	[1-9][0-9]*$' "$tmp/out" || { cat "$tmp/out" "$tmp/err"; fail "train result"; }
grep -qF 'after train, current_step == steps:	true' "$tmp/out" || fail "steps"
grep -qE '^spin:	false	.*interrupted!' "$tmp/out" || { cat "$tmp/out"; fail "a Ctrl-C in Lua code raises"; }
echo "train_interrupt_test ok"
