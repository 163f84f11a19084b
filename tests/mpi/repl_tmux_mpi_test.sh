#!/usr/bin/env bash
# tests/mpi/repl_tmux_mpi_test.sh <shardlab> <mpirun>: the REPL under `mpirun -np 2 shardlab`,
# typed into a pseudo-terminal (tmux), as a user would (docs/distributed.md, "The REPL").
#  - No -i needed: process 0 finds that mpirun reads the terminal and every process enters
#    the REPL.
#  - A trainer is built on a 2-device mesh (one device per process), stepped and inspected.
#  - An error raised on process 1 only is reported by process 0 as `process 1: <message>`; an
#    error on both is printed once, with `process 1: the same error`; the prompt survives.
#  - The next lines still run on both processes: a step (its collectives need both), and a line
#    that writes each process's index to stderr.
#  - Process 0 reads with Readline (mpirun forwards the keys): Ctrl-C at the prompt drops the
#    typed text, Up recalls the previous line, Tab completes.
# Every wait polls the screen (tests/common/tmux_repl.sh): robust on a loaded 2-core machine.
set -euo pipefail
bin=$(realpath "$1")
mpirun=$2
name=mpirepl
source "$(dirname "$0")/../common/tmux_repl.sh"
# Lines typed ahead while a line runs are echoed by the terminal (and again by Readline), so a
# result can follow a prompt on its line.
out() { wait_for "^(sl> )*$1" "${@:2}"; }

start SHARDLAB_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 SHARDLAB_COLLECTIVE_TIMEOUT=60 "$mpirun" -np 2
type_line 'print("count", sl.process_count())'
out 'count[[:space:]]+2$'

# A trainer on data=2: process 0 hosts device 0, process 1 device 1.
type_line 'm = sl.mesh{data = 2, devices = 2}'
type_line 't = sl.trainer(sl.config{model = "llama-tiny", steps = 100, per_device_batch_size = 1, max_target_length = 32, base_emb_dim = 32, base_num_query_heads = 4, base_num_kv_heads = 4, head_dim = 8, base_mlp_dim = 64, base_num_decoder_layers = 2, enable_checkpointing = false}, m, {store = false})'
type_line 'h = t:step()'
type_line 'print(string.format("stepped %d loss %.4f", t.current_step, h.loss))'
out 'stepped 1 loss [0-9]+\.[0-9]{4}$' 120
type_line "t:shardings('params/decoder/decoder_norm/scale')"
wait_for "params/decoder/decoder_norm/scale +f32\\[32\\]"
type_line 'print("local", #sl.local_devices(), "of", #sl.devices())'
out 'local[[:space:]]+1[[:space:]]+of[[:space:]]+2$'

# An error on process 1 only: process 0's line succeeded, process 1's is named.
type_line 'if sl.process_index() == 1 then error("only on one") end'
out 'process 1: stdin:1: only on one$'
# The same error everywhere: printed once by process 0, process 1's noted.
type_line 'error("boom")'
out 'stdin:1: boom$'
out 'process 1: the same error$'
[[ $(count '^(sl> )*stdin:1: boom$') == 1 ]] || fail "the error is printed once"

# Both processes survived and still run every line in lockstep.
type_line 'h = t:step()'
type_line 'print(string.format("stepped %d loss %.4f", t.current_step, h.loss))'
out 'stepped 2 loss [0-9]+\.[0-9]{4}$' 120
type_line 'io.stderr:write(string.format("alive %d\n", sl.process_index()))'
out 'alive 0$'
wait_for 'alive 1$'  # process 1's stderr comes straight from mpirun: anywhere on a line
type_line 'print("done")'
out 'done$'

# Readline on process 0: Ctrl-C drops the typed text (a key: mpirun never sees a SIGINT), Up
# recalls the last line, Tab completes; the recalled line runs on both processes.
wait_prompt
type_keys 'half_typed_garbage'
wait_for '^sl> half_typed_garbage$'
T send-keys -t repl C-c
wait_for '^sl> half_typed_garbage\^C$'
wait_prompt  # keys typed before Readline reads again are echoed by the terminal too
type_line 'x = 20 + sl.process_index()'
wait_prompt
T send-keys -t repl Up
wait_for '^sl> x = 20 \+ sl\.process_index\(\)$'
T send-keys -t repl C-c
wait_prompt
type_keys 'sl.process_cou'
T send-keys -t repl Tab
wait_for '^sl> sl\.process_count\($'
type_line ')'
out '2$'
type_line 'io.stderr:write(string.format("x on %d is %d\n", sl.process_index(), x));'
out 'x on 0 is 20$'
wait_for 'x on 1 is 21$'
stop
echo "repl_tmux_mpi_test: ok"
