#!/usr/bin/env bash
# tests/mpi/repl_interrupt_mpi_test.sh <shardlab> <mpirun>: Ctrl-C while a line runs under
# `mpirun -np 2 shardlab`, typed in tmux (docs/distributed.md, "Ctrl-C while a line runs").
#  - t:train{} on a 2-device mesh (one device per process, each step slowed by the debug
#    delay): Ctrl-C stops it on both processes after the same step; process 0 prints
#    `interrupted! (stopped after the current step)` once; the prompt comes back; both
#    processes report the same step count (an error raised on both with the numbers is
#    printed once, with `process 1: the same error`, only when both messages are equal).
#  - The session goes on in lockstep: t:train{steps = 2} runs on both (its collectives need
#    both), a pure-Lua loop is interrupted on both.
#  - Keys typed while a line runs are not lost: Readline gets them at the next prompt.
#  - A second Ctrl-C in the same line (the first one caught by pcall) ends the job, and the
#    terminal is left in the user's modes (canonical, echo, ISIG).
#  - Notebook mode: Ctrl-C during a cell's t:train stops it on both processes after the same
#    step; the notebook goes on in lockstep and writes its report.
set -euo pipefail
bin=$(realpath "$1")
mpirun=$2
name=mpiint
source "$(dirname "$0")/../common/tmux_repl.sh"
out() { wait_for "^(sl> )*$1" "${@:2}"; }
env=(SHARDLAB_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
     OMPI_MCA_rmaps_base_oversubscribe=1 SHARDLAB_COLLECTIVE_TIMEOUT=60)
# After the job: the terminal's modes, as the shell that started mpirun sees them.
after="stty -a | tr ' ;' '\n\n' | grep -E '^-?(icanon|isig|echo)$' | tr '\n' ' '; echo" \
  start "${env[*]}" "'$mpirun'" -np 2

# A trainer on data=2 whose every step sleeps 0.2 s on the devices: Ctrl-C lands mid-training.
type_line 'delays = {} for i = 0, 1999 do delays[#delays + 1] = i end delays = table.concat(delays, ",")'
type_line 't = sl.trainer(sl.config{model = "llama-tiny", steps = 2000, per_device_batch_size = 1, max_target_length = 32, base_emb_dim = 32, base_num_query_heads = 4, base_num_kv_heads = 4, head_dim = 8, base_mlp_dim = 64, base_num_decoder_layers = 2, enable_checkpointing = false, debug_device_delay_seconds = 0.2, debug_device_delay_steps = delays}, sl.mesh{data = 2, devices = 2}, {store = false})'
wait_prompt 120
type_line 'r = t:train{steps = 1000}'
wait_for '\] ([4-9]|[1-9][0-9]+)/1000 loss' 120  # process 0's progress bar (mpirun's pty)
T send-keys -t repl C-c
out 'interrupted! \(stopped after the current step\)$'
wait_prompt
[[ $(count 'interrupted! \(stopped') == 1 ]] || fail "interrupted! is printed once"
grep -q 'Forwarding signal 10' <(screen) || fail "mpirun did not forward the interrupt"
# The same numbers on both processes: the error is printed once, process 1's is the same.
type_line 'error(string.format("stopped at %d after %d steps, interrupted %s", t.current_step, r.steps, tostring(r.interrupted)))'
out 'stdin:1: stopped at [0-9]+ after [0-9]+ steps, interrupted true$'
out 'process 1: the same error$'
steps=$(screen | grep -oE 'stopped at [0-9]+ after [0-9]+ steps' | grep -oE '[0-9]+ steps' | grep -oE '[0-9]+')
((steps >= 4 && steps < 1000)) || fail "t:train ran $steps steps"

# Lockstep intact: two more steps on both processes, then the same step on both.
type_line 'r2 = t:train{steps = 2, quiet = true}'
wait_prompt 120
type_line 'error(string.format("now at %d, %d steps", t.current_step, r2.steps))'
out "stdin:1: now at $((steps + 2)), 2 steps$" 120
out 'process 1: the same error$'

# A pure-Lua loop is interrupted on every process (Ctrl-C once both are in it; each process
# says so in one write: process 1's stderr reaches the terminal through mpirun, interleaved).
type_line 'io.stderr:write(string.format("looping on %d\n", sl.process_index())) while true do end'
wait_for 'looping on 0'
wait_for 'looping on 1'
T send-keys -t repl C-c
out 'interrupted!$'
out 'process 1: (the same error|interrupted!)$'
wait_prompt

# Typeahead: keys typed while a line runs reach the next prompt (not echoed while it runs).
type_line 'r3 = t:train{steps = 15}'
wait_for "\\] $((steps + 5))/$((steps + 17)) loss" 120
type_line 'print("typed" .. "ahead", r3.steps)'
out 'typedahead[[:space:]]+15$' 120
wait_prompt
# Shown once, by Readline: the terminal did not echo it while the line ran.
[[ $(count 'print\("typed"') == 1 ]] || fail "the typed-ahead line is shown $(count 'print\("typed"') times"

# A second Ctrl-C in the same line ends the job (the first one is caught by pcall), and the
# terminal is given back in the user's modes.
type_line 'io.stderr:write(string.format("caught on %d\n", sl.process_index())) while true do pcall(function() while true do end end) end'
wait_for 'caught on 0'
wait_for 'caught on 1'
forwarded=$(count 'Forwarding signal 10')
T send-keys -t repl C-c
for _ in $(seq 1 600); do (($(count 'Forwarding signal 10') > forwarded)) && break; sleep 0.05; done
(($(count 'Forwarding signal 10') > forwarded)) || fail "the first Ctrl-C was not forwarded"
sleep 1  # both processes took the first SIGUSR1 (caught by pcall; the loop goes on)
T send-keys -t repl C-c
wait_for '^SESSION-ENDED' 60
wait_for '^(-?(icanon|isig|echo) ){3}$' 10
modes=$(screen | grep -A1 '^SESSION-ENDED' | tail -n 1)
for m in icanon isig echo; do
  grep -qw -- "-$m" <<<"$modes" && fail "the terminal was left with -$m ($modes)"
done
T kill-session -t repl

# Notebook mode under mpirun: Ctrl-C during a cell's t:train stops it on both processes after
# the same step, the notebook goes on (in lockstep) and writes its report.
cat >"$tmp/nb.lua" <<'LUA'
-- %%
delays = {} for i = 0, 1999 do delays[#delays + 1] = i end delays = table.concat(delays, ",")
t = sl.trainer(sl.config{model = "llama-tiny", steps = 2000, per_device_batch_size = 1, max_target_length = 32, base_emb_dim = 32, base_num_query_heads = 4, base_num_kv_heads = 4, head_dim = 8, base_mlp_dim = 64, base_num_decoder_layers = 2, enable_checkpointing = false, debug_device_delay_seconds = 0.2, debug_device_delay_steps = delays}, sl.mesh{data = 2, devices = 2}, {store = false})
-- %%
t:train{steps = 3, quiet = true}
io.open("training", "w"):close()
r = t:train{steps = 1000, quiet = true}
-- %%
error(string.format("stopped at %d after %d steps, interrupted %s", t.current_step, r.steps, tostring(r.interrupted)))
-- %%
t:train{steps = 2, quiet = true}
print("then at " .. t.current_step)
LUA
T new-session -d -s repl -x 200 -y 60 \
  "cd '$tmp' && HOME='$tmp' TERM=xterm ${env[*]} '$mpirun' -np 2 '$bin' --db '$tmp/nb.db' --notebook nb.lua --allow-errors -o nb.md; echo NOTEBOOK-ENDED \$?; sleep 60"
for _ in $(seq 1 2400); do [[ -e $tmp/training ]] && break; sleep 0.05; done
[[ -e $tmp/training ]] || fail "the notebook did not start training"
sleep 0.5
T send-keys -t repl C-c
wait_for '^NOTEBOOK-ENDED 0$' 120
report=$(cat "$tmp/nb.md")
nb_steps=$(grep -oE 'stopped at [0-9]+ after [0-9]+ steps, interrupted true' <<<"$report" |
           grep -oE '^stopped at [0-9]+' | grep -oE '[0-9]+') || fail "no interrupted stop in the report: $report"
((nb_steps > 3 && nb_steps < 1003)) || fail "the notebook trained to step $nb_steps"
grep -q '^process 1: the same error$' <<<"$report" || fail "process 1 stopped elsewhere: $report"
grep -q "^then at $((nb_steps + 2))$" <<<"$report" || fail "no lockstep after the interrupt: $report"
T kill-session -t repl
echo "repl_interrupt_mpi_test: ok"
