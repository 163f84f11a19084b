#!/usr/bin/env bash
# tests/shell/readme_tmux_test.sh: the README's first session typed into the REPL under tmux, each
# output checked (readme_tmux_test.py). Usage: readme_tmux_test.sh path/to/shardlab
exec python3 "$(dirname "$0")/readme_tmux_test.py" "$@"
