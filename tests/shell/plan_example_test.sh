#!/usr/bin/env bash
# tests/shell/plan_example_test.sh: examples/plan.lua's table has no row of zeros (an axis whose
# collectives round to 0.00 GiB on every mesh is named below the table instead) and each memory
# line names its plan (issue 30 item 19). Usage: plan_example_test.sh path/to/shardlab source-dir
set -euo pipefail
shardlab=$(realpath "$1")
src=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$shardlab" --db "$tmp/p.db" "$src/examples/plan.lua" > "$tmp/out" 2>&1 || fail "$(cat "$tmp/out")"
! grep -E '^[a-zA-Z@ ,/=]+( +0\.00( GiB)?)+ *$' "$tmp/out" || fail "a row of zeros: $(cat "$tmp/out")"
n=$(grep -c "Total estimated memory size" "$tmp/out")
[[ $n == 3 ]] || fail "$n memory lines, expected one per plan: $(cat "$tmp/out")"
m=$(grep -cE '^fsdp=[^:]*: Total estimated memory size' "$tmp/out")
[[ $m == "$n" ]] || fail "a memory line without its plan's name: $(grep 'Total estimated' "$tmp/out")"
grep -q "^collective GiB/step @fsdp " "$tmp/out" || fail "no fsdp collective row: $(cat "$tmp/out")"
echo "plan_example_test ok"
