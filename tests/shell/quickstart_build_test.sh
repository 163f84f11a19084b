#!/usr/bin/env bash
# tests/shell/quickstart_build_test.sh: scripts/quickstart.sh builds only the shell binary, not
# every target (issue 15 item 7). Runs a copy of the script against a `cmake` that records its
# arguments and a stand-in shardlab. Usage: quickstart_build_test.sh path/to/shardlab source-dir
set -euo pipefail
src=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$tmp/repo/scripts" "$tmp/bin"
cp "$src/scripts/quickstart.sh" "$tmp/repo/scripts/"
cat > "$tmp/bin/cmake" <<'SH'
#!/usr/bin/env bash
echo "cmake $*" >> "$CMAKE_LOG"
if [[ $1 == -S ]]; then mkdir -p build/shell && touch build/build.ninja; fi
if [[ $* == *"--build"* ]]; then printf '#!/bin/sh\necho "shardlab $*"\n' > build/shell/shardlab; chmod +x build/shell/shardlab; fi
SH
chmod +x "$tmp/bin/cmake"
out=$(cd "$tmp/repo" && CMAKE_LOG="$tmp/log" PATH="$tmp/bin:$PATH" bash scripts/quickstart.sh 3)
grep -q -- "--build build --target shardlab " "$tmp/log" || { cat "$tmp/log"; fail "quickstart.sh must build only the shardlab target"; }
[[ $(grep -c -- "--build" "$tmp/log") == 1 ]] || { cat "$tmp/log"; fail "one build command"; }
[[ $out == "shardlab --db quickstart.db examples/quickstart.lua 3" ]] || fail "ran: $out"
# A second run reuses the configured tree: no new configure.
(cd "$tmp/repo" && CMAKE_LOG="$tmp/log2" PATH="$tmp/bin:$PATH" bash scripts/quickstart.sh > /dev/null)
! grep -q -- "-S " "$tmp/log2" || fail "reconfigured an existing build tree"
echo "quickstart_build_test ok"
