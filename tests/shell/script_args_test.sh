#!/usr/bin/env bash
# tests/shell/script_args_test.sh: a script's key=value arguments are MaxText-style overrides of
# every sl.config it makes, or an error; never ignored (issue 30 item 18: `shardlab
# examples/quickstart.lua steps=5` trained 300 steps). Usage: script_args_test.sh path/to/shardlab
set -euo pipefail
shardlab=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$tmp"
cat > cfg.lua <<'LUA'
local a = sl.config{model = "llama-tiny", steps = 300, learning_rate = 1e-3}
local b = sl.config("model=llama-tiny steps=40")
print(string.format("steps %d %d lr %g run %s args %s", a:get("steps"), b:get("steps"),
                    a:get("learning_rate"), a:get("run_name"), table.concat(arg, " ")))
LUA
out=$("$shardlab" cfg.lua steps=5 learning_rate=3e-4 "run_name=a b" data:2 plain)
[[ $out == "steps 5 5 lr 0.0003 run a b args steps=5 learning_rate=3e-4 run_name=a b data:2 plain" ]] ||
  fail "overrides not applied: $out"
out=$("$shardlab" cfg.lua)
[[ $out == "steps 300 40 lr 0.001 run  args " ]] || fail "without arguments: $out"
# expect_error NAME TEXT ARGS...: the script fails before it prints, naming TEXT.
expect_error() {
  local name=$1 want=$2
  shift 2
  if "$shardlab" "$@" > "$name.out" 2> "$name.err"; then fail "$name: ran: $(cat "$name.out")"; fi
  grep -qF -- "$want" "$name.err" || fail "$name: error does not name '$want': $(cat "$name.err")"
}
expect_error typo "unknown key 'stesp' (did you mean 'steps'?) (in 'stesp=5')" cfg.lua stesp=5
[[ ! -s typo.out ]] || fail "the script ran despite a bad argument: $(cat typo.out)"
expect_error type "(in 'steps=five')" cfg.lua steps=five
echo 'print("no config")' > noconfig.lua
expect_error unused "script arguments steps=5 were not applied" noconfig.lua steps=5
echo "script_args_test ok"
