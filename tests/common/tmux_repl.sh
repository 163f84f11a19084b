# tests/common/tmux_repl.sh: drive the real REPL in a pseudo-terminal (tmux send-keys /
# capture-pane). Sourced by the tmux tests: set `bin` (the shardlab binary) and `name` (a word
# for the tmux socket) first. Gives a temp dir $tmp and functions start/stop, type_keys,
# type_line, wait_for REGEX [SECONDS], wait_prompt, count REGEX, screen and fail.
# Every wait polls the screen for the text it needs, never a fixed sleep: under a loaded machine
# (ctest -j2 next to a build) the REPL can take seconds to read what tmux typed. In particular
# a C-c must wait until the text before it is on the screen: the terminal turns C-c into SIGINT
# the moment tmux writes it and then discards the input the REPL has not read yet; a C-d
# (stop) waits for an idle prompt.
tmp=$(mktemp -d)
sock="shardlab-$name-test-$$"
T() { tmux -L "$sock" "$@"; }
cleanup() { T kill-server 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

screen() { T capture-pane -p -J -S -500 -t repl; }
fail() { echo "FAIL: $*"; echo "--- screen:"; screen; exit 1; }
# wait_for REGEX [SECONDS]: poll the screen every 0.05 s (60 s by default) until a line matches.
wait_for() {
  local tries=$(( ${2:-60} * 20 ))
  for _ in $(seq 1 "$tries"); do
    if grep -qE -- "$1" <<<"$(screen)"; then return 0; fi
    sleep 0.05
  done
  fail "timed out waiting for /$1/"
}
count() { screen | grep -cE -- "$1" || true; }
# tmux reads a trailing ';' as a command separator unless escaped.
type_keys() {
  local s=$1
  [[ $s == *";" ]] && s="${s%;}\\;"
  T send-keys -t repl -l -- "$s"
}
type_line() { type_keys "$1"; T send-keys -t repl Enter; }
# start [ENV...]: a REPL in $tmp with its own HOME, history file and store. The words given
# go before the binary (environment, or a launcher such as `mpirun -np 2`); $after, if set, is
# a shell command run in the terminal once the REPL has ended (after SESSION-ENDED).
start() {
  T new-session -d -s repl -x 200 -y 60 \
    "cd '$tmp' && HOME='$tmp' SHARDLAB_HISTORY='$tmp/history' TERM=xterm $* '$bin' --db '$tmp/m.db'; echo SESSION-ENDED; ${after:+$after;} sleep 60"
  wait_for '^sl>'
}
# wait_prompt [SECONDS]: until the screen ends with a bare `sl>` prompt: the REPL finished what it
# was given and Readline reads again. Only then is C-d an end of input: sent while a chunk runs
# (the terminal in cooked mode), it is lost.
wait_prompt() {
  local tries=$(( ${1:-60} * 20 ))
  for _ in $(seq 1 "$tries"); do
    [[ $(screen | sed 's/ *$//' | grep -v '^$' | tail -n 1) == "sl>" ]] && return 0
    sleep 0.05
  done
  fail "timed out waiting for an idle sl> prompt"
}
stop() {
  wait_prompt
  T send-keys -t repl C-d
  wait_for '^SESSION-ENDED' 90  # exiting frees the trainer's arenas: slow under a parallel ctest
  T kill-session -t repl
}
