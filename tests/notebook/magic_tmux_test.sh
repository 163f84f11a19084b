#!/usr/bin/env bash
# tests/notebook/magic_tmux_test.sh: %run, %timeit, %time and %hist in the real REPL (tmux send-keys / capture-pane).
# Usage: magic_tmux_test.sh path/to/shardlab
set -euo pipefail
bin=$(realpath "$1")
name=magic
source "$(dirname "$0")/../common/tmux_repl.sh"

cat > "$tmp/nb.lua" <<'LUA'
-- %% [markdown]
-- # prose is skipped by %run
-- %% tags=["parameters"]
n = 2
-- %%
local hidden = 5
total = n * 21
print("cell two prints")
-- %%
total + 0.5
-- %%
plot.line{a = {1, 2}, b = {2, 1}}
-- %% allow_error=true
error("allowed in run")
-- %%
after = "reached"
-- %%
error("stops here")
-- %%
never = true
LUA

start NO_COLOR=1

# %run: cells in this session, values auto-printed, errors reported, globals kept.
type_line '%run nb.lua -p n=3'
wait_for '^cell two prints$'
wait_for '^63\.5$'
wait_for '^<svg plot, [0-9]+ bytes, 2 polylines'
wait_for 'nb\.lua:14: allowed in run'
wait_for 'nb\.lua:18: stops here'
wait_for '^%run: stopped at the cell at line 18$'
type_line 'total, after, never, hidden'
wait_for '^63[[:space:]]+reached[[:space:]]+nil[[:space:]]+nil$'
type_line '%run missing.lua'
wait_for "^%run: notebook: cannot open 'missing.lua'$"

# %timeit: IPython's line, the first call apart; synced on StepHandles.
type_line '%timeit -n 3 -r 2 string.rep("x", 100)'
wait_for '^[0-9.]+ (ns|µs|ms|s) ± [0-9.]+ (ns|µs|ms|s) per loop \(mean ± std\. dev\. of 2 runs, 3 loops each\)$'
# nothing compiled: the first call is only "not in the mean" (issue 15 item 10)
wait_for '^first call: [0-9.]+ (ns|µs|ms|s) \(not in the mean\)$'
[[ $(count 'includes compilation') == 0 ]] || fail "string.rep compiles nothing"
type_line '_.runs * 10 + _.loops'
wait_for '^23$'
type_line 't = sl.trainer(sl.config{model="llama-tiny", base_num_decoder_layers=1, max_target_length=16, per_device_batch_size=1, steps=100}, nil, {store=false})'
type_line '%timeit -n 2 -r 3 t:step()'
wait_for 'of 3 runs, 2 loops each\)$' 60
type_line 't.current_step'
wait_for '^7$'                               # the first call + 3 runs x 2 loops, each synced
[[ $(count '\(includes compilation; not in the mean\)$') == 1 ]] || fail "the first t:step() compiles"
type_line '%timeit -n 1 -r 1 t:step()'         # compiled already: no compilation this time
wait_for 'of 1 run, 1 loop each\)$' 60
type_line '_.compiled'
wait_for '^false$'
[[ $(count '\(includes compilation; not in the mean\)$') == 1 ]] || fail "a compiled trainer's first call compiles nothing"
type_line '%timeit -r 1 -n 1 1 + 1'
wait_for 'of 1 run, 1 loop each\)$'
type_line '%timeit error("in timeit")'
wait_for 'timeit:1: in timeit'
# %time (IPython's): one run, CPU and wall time, then the value, which becomes `_`.
unit='[0-9.]+ (ns|µs|ms|s)'
type_line '%time 6 * 111'
wait_for "^CPU times: user $unit, sys: $unit, total: $unit\$"
wait_for "^Wall time: $unit\$"
wait_for '^666$'
type_line '_ + 1'
wait_for '^667$'
type_line '%time local t0 = os.clock() while os.clock() - t0 < 0.3 do end'
wait_for '^Wall time: ([3-9][0-9]{2} ms|[0-9.]+ s)$'  # a statement; at least 0.3 s
type_line '%time t:step()'                              # waited on, as in %timeit
wait_for '^StepHandle\(step=9, loss=[0-9.]+\)$'  # finished, not running
type_line 't.current_step'
wait_for '^10$'
type_line '%time error("in time")'
wait_for 'time:1: in time'
[[ $(count '^Wall time: ') == 3 ]] || fail "a %time that raised prints no time"
type_line '%time'
wait_for '^usage: %time stmt$'

# %hist: this session's input, numbered; a multi-line chunk is one entry.
type_line 'for i = 1, 2 do'
type_line 'end'
type_line '%hist'
wait_for '^ +1: %run nb\.lua -p n=3$'
wait_for '^ +[0-9]+: for i = 1, 2 do$'
wait_for '^ {6}end$'
wait_for '^ +[0-9]+: %hist$'
type_line '%nope'
wait_for "^unknown magic '%nope'"
type_line '2 + 40'
wait_for '^42$'
stop
grep -qx '%run nb.lua -p n=3' "$tmp/history" || fail "magics go to the history"
echo "magic_tmux_test: ok"
