#!/usr/bin/env bash
# tests/shell/repl_tmux_test.sh: drives the real REPL in a pseudo-terminal (tmux send-keys / capture-pane).
# Checks completion, multi-line input, auto-print, `_`, ?help, that errors and Ctrl-C keep the
# prompt alive, the per-command timer, `$ cmd`, who(), and history across two sessions.
# Usage: repl_tmux_test.sh path/to/shardlab
set -euo pipefail
bin=$(realpath "$1")
name=repl
source "$(dirname "$0")/../common/tmux_repl.sh"

start
# Completion: globals/fields with typed suffixes, methods of userdata via the metatable.
type_keys 'sl.me'
T send-keys -t repl Tab
wait_for '^sl> sl\.mesh\($'
type_line '{data=2, tensor=3})'
wait_for "^Mesh\('diloco': 1, 'data': 2, "
type_line 'm = _'
type_line 'type(m)'
wait_for '^userdata$'  # m is set before Tab asks for its methods (races under load otherwise)
type_keys 'm:dev'
T send-keys -t repl Tab
wait_for '^sl> m:devices\($'
type_line ')'
wait_for '^6$'
type_keys 'string.for'
T send-keys -t repl Tab
wait_for '^sl> string\.format\($'
type_line '"%d-%s", 7, "x")'
wait_for '^7-x$'

# Completion inside calls (issue 15): keys of sl.config{ from the engine's config keys (as
# "key="; three start with "learn"), not in a value; strings of t:visualize/t:param/t:shardings
# from the trainer's state paths, closed once one is left.
type_keys 'cfg = sl.config{learn'
T send-keys -t repl Tab
wait_for '^sl> cfg = sl\.config\{learning_rate$'
T send-keys -t repl Tab Tab  # Readline lists on the second Tab that changes nothing
wait_for 'learning_rate= +learning_rate_final_fraction= +learning_rate_schedule_steps='
type_keys '=0.001, per_device_b'
T send-keys -t repl Tab
wait_for '^sl> cfg = sl\.config\{learning_rate=0\.001, per_device_batch_size=$'
type_keys '1, model=sl.me'
T send-keys -t repl Tab
wait_for '^sl> cfg = sl\.config\{learning_rate=0\.001, per_device_batch_size=1, model=sl\.mesh\($'
T send-keys -t repl BSpace BSpace BSpace BSpace BSpace BSpace BSpace BSpace
type_line '"llama-tiny", base_num_decoder_layers=1, max_target_length=16, scan_layers=false}'
type_line 'tp = sl.trainer(cfg, nil, {shape_only=true, store=false})'
type_line 'print("tp-ready", cfg:get("learning_rate"), tp.current_step)'
wait_for '^tp-ready[[:space:]]+0\.001[[:space:]]+0$'
type_keys 'tp:visualize("params/decoder/decoder_n'
T send-keys -t repl Tab
wait_for '^sl> tp:visualize\("params/decoder/decoder_norm/scale"$'
type_line ')'
wait_for '^params/decoder/decoder_norm/scale  f32\['
type_keys "tp:shardings('opt_state/n"
T send-keys -t repl Tab
wait_for "^sl> tp:shardings\\('opt_state/nu/$"
type_keys 'decoder/layers_0/mlp/wo'
T send-keys -t repl Tab
wait_for "^sl> tp:shardings\\('opt_state/nu/decoder/layers_0/mlp/wo/kernel'$"
T send-keys -t repl C-c
type_keys 'tp:param("params/tok'
T send-keys -t repl Tab
wait_for '^sl> tp:param\("params/token_embedder/embedding"$'
T send-keys -t repl C-c
type_line '8 + 8000'
wait_for '^8008$'

# Multi-line input continues on incomplete chunks.
type_line 'function sq(x)'
wait_for '^\.\.>'
type_line '  return x * x'
type_line 'end'
type_line 'sq(12)'
wait_for '^144$'

# Auto-print, `=`, trailing `;` suppresses, `_` keeps the last result, tables pretty-print.
type_line '7 * 6'
wait_for '^42$'
type_line '100 + 1;'
type_line '_ + 0.5'
wait_for '^101\.5$'
[[ $(count '^101$') == 0 ]] || fail "a trailing ';' must suppress printing"
type_line '= 2 ^ 10'
wait_for '^1024\.0$'
type_line '{b = 2, a = {1, 2}, sl.P("data")}'
wait_for "^\{P\('data'\), a = \{1, 2\}, b = 2\}$"

# ?name prints the binding's docstring.
type_line '?sl.mesh'
wait_for '^sl\.mesh\{data=2, fsdp=-1'

# Errors keep the session alive.
type_line 'error("boom")'
wait_for '^stdin:1: boom$'
type_line 'sl.mesh{data="x"}'
wait_for "sl\.mesh: argument 'data' expected integer, got string"
type_line 'sl.sql("SELEC 1")'
wait_for 'store: near "SELEC": syntax error'
type_line 'x = = 1'
wait_for "unexpected symbol near '='"
type_line '1 + 1000'
wait_for '^1001$'

# Ctrl-C while Lua runs raises "interrupted!"; Ctrl-C at the prompt clears the line.
type_line 'print("spin" .. "ning") while true do end'
wait_for '^spinning$'  # Lua runs: a C-c sent before the REPL read the line would discard it
T send-keys -t repl C-c
wait_for 'interrupted!'
type_line '2 + 2000'
wait_for '^2002$'
type_keys 'half_typed_garbage'
wait_for '^sl> half_typed_garbage$'  # read by Readline: C-c would discard unread input
T send-keys -t repl C-c
wait_for '^sl> half_typed_garbage\^C$'
type_line '3 + 3000'
wait_for '^3003$'
type_line 'for i = 1, 3 do'
wait_for '^\.\.> $|^\.\.>$'
T send-keys -t repl C-c
type_line '4 + 4000'
wait_for '^4004$'

# Ctrl-C during t:train{} stops after the current step and returns to the prompt.
type_line 'tr = sl.trainer(sl.config{base_num_decoder_layers = 1, max_target_length = 64, per_device_batch_size = 2, steps = 100000}, nil, {store = false})'
type_line 'tr:train{}'
wait_for '\] [0-9]+/100000 loss' 120  # builds and compiles a trainer first
T send-keys -t repl C-c
wait_for 'interrupted!'
type_line 'print("stopped at", tr.current_step, tr.current_step > 0 and tr.current_step < 100000)'
wait_for '^stopped at\s+[0-9]+\s+true$'
type_line '5 + 5000'
wait_for '^5005$'

# trepl's timer: a command over 0.1 s is followed by `[0.1234s]` at the right edge (the pane is
# 200 columns: 199 wide, no autowrap); fast ones print none; sl.timing(false) turns it off.
slow='local t0 = os.clock() while os.clock() - t0 < 0.2 do end'
timer='^ {180,}\[[0-9]+\.[0-9]{4}s\]$'
timers() { screen | sed -n '/^timer-mark$/,$p' | grep -cE -- "$timer" || true; }
type_line 'print("timer-mark")'
wait_for '^timer-mark$'
type_line '7 + 7000'
wait_for '^7007$'
[[ $(timers) == 0 ]] || fail "a fast command prints no timer"
type_line "$slow"
for _ in $(seq 1 1200); do [[ $(timers) == 1 ]] && break; sleep 0.05; done  # 60 s
[[ $(timers) == 1 ]] || fail "one timer line per slow command"
grep -qE '^ {180,}\[0\.[2-9][0-9]{3}s\]$' <<<"$(screen | sed -n '/^timer-mark$/,$p')" || fail "the timer shows >= 0.2 s"
type_line 'sl.timing(false)'
type_line "$slow"
type_line '6 + 6000'
wait_for '^6006$'
[[ $(timers) == 1 ]] || fail "sl.timing(false) must hide the timer"

# `$ cmd` runs a shell command; its output is printed and becomes `_`. who() lists user globals.
type_line '$ echo from-shell'
wait_for '^from-shell$'
type_line '_ .. "!"'
wait_for '^from-shell!$'
type_line 'who()'
wait_for '^  sq +function$'
type_line 'marker = 31337'
stop

grep -qx 'sq(12)' "$tmp/history" || { cat "$tmp/history"; echo "FAIL: history file lacks sq(12)"; exit 1; }
grep -q 'half_typed_garbage' "$tmp/history" && { echo "FAIL: a cleared line went to history"; exit 1; }

# A second session reads the history written by the first.
start
T send-keys -t repl Up
wait_for '^sl> marker = 31337$'
T send-keys -t repl Enter
type_line 'marker + 1'
wait_for '^31338$'
# %hist lists this session's input only, not the history file's earlier sessions.
type_line '%hist'
wait_for '^   3: %hist$'
grep -qE '^   1: marker = 31337$' <<<"$(screen)" || fail "%hist starts at this session's first input"
grep -qE '^   2: marker \+ 1$' <<<"$(screen)" || fail "%hist numbers the inputs"
[[ $(count '^ +[0-9]+: sq\(12\)$') == 0 ]] || fail "%hist lists an earlier session's input"
stop
echo "repl_tmux_test: ok"
