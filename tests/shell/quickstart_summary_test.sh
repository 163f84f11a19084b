#!/usr/bin/env bash
# tests/shell/quickstart_summary_test.sh: examples/quickstart.lua summarises its own run even when
# the store already holds another (issue 15 item 1: a 3-step run after a 50-step one printed the
# older run's best loss). Usage: quickstart_summary_test.sh path/to/shardlab source-dir
set -euo pipefail
shardlab=$(realpath "$1")
src=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$tmp"
"$shardlab" --db q.db "$src/examples/quickstart.lua" steps=8 > first.txt
"$shardlab" --db q.db "$src/examples/quickstart.lua" steps=2 > second.txt
line=$(grep '^trained 2 steps' second.txt) || { cat second.txt; fail "no summary line"; }
best_step=$(sed -E 's/.* at step ([0-9]+)$/\1/' <<< "$line")
best_loss=$(sed -E 's/.*best ([0-9.]+) at step.*/\1/' <<< "$line")
run=$(sqlite3 q.db "select run_id from runs order by start_ms desc limit 1")
want=$(sqlite3 q.db "select printf('%.3f', min(loss)) from steps where run_id = '$run'")
((best_step < 2)) || fail "best at step $best_step is not a step of the 2-step run: $line"
[[ $best_loss == "$want" ]] || fail "best loss $best_loss, but this run's best is $want: $line"
n=$(grep -c '^compilations:' second.txt)
((n >= 1)) || fail "no compilations of this run listed"
echo "quickstart_summary_test ok: $line"
