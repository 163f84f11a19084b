#!/usr/bin/env bash
# tests/shell/quickstart_build_test.sh: the build scripts against a `cmake` that records its
# arguments (and writes the cache values it was given) and a stand-in shardlab.
#  - scripts/quickstart.sh builds only the shell binary, not every target (issue 15 item 7),
#    and shows the build's progress (issue 30 item 17: it hid a multi-minute build);
#  - it configures build/ as scripts/test.sh does, and scripts/build.sh configures again only
#    when the cache holds other values: the README's quickstart then test.sh, or test.sh on a
#    tree configured by hand with the same options, rebuild nothing for a -D option (issue 30
#    item 17: -DSHARDLAB_WERROR=ON reconfigured build/ and rebuilt every object).
# Usage: quickstart_build_test.sh path/to/shardlab source-dir
set -euo pipefail
src=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$tmp/repo/scripts" "$tmp/bin"
cp "$src/scripts/quickstart.sh" "$src/scripts/build.sh" "$tmp/repo/scripts/"
cat > "$tmp/bin/cmake" <<'SH'
#!/usr/bin/env bash
echo "cmake $*" >> "$CMAKE_LOG"
if [[ $1 == -S ]]; then
  mkdir -p build/shell && touch build/build.ninja && : > build/CMakeCache.txt
  for a in "$@"; do
    if [[ $a == -D*=* ]]; then n=${a#-D}; echo "${n%%=*}:STRING=${a#*=}" >> build/CMakeCache.txt; fi
  done
fi
if [[ $* == *"--build"* ]]; then
  echo "[1/2] Building CXX object engine/base/base.cpp.o"
  printf '#!/bin/sh\necho "shardlab $*"\n' > build/shell/shardlab; chmod +x build/shell/shardlab
fi
SH
chmod +x "$tmp/bin/cmake"
run() { (cd "$tmp/repo" && CMAKE_LOG="$tmp/$1" PATH="$tmp/bin:$PATH" bash "${@:2}"); }

out=$(run log scripts/quickstart.sh steps=3 2>"$tmp/err")
grep -q -- "--build build --target shardlab " "$tmp/log" || { cat "$tmp/log"; fail "quickstart.sh must build only the shardlab target"; }
[[ $(grep -c -- "--build" "$tmp/log") == 1 ]] || { cat "$tmp/log"; fail "one build command"; }
[[ $out == "shardlab --db quickstart.db examples/quickstart.lua steps=3" ]] || fail "ran: $out"
grep -q "Building CXX object" "$tmp/err" || fail "quickstart.sh hid the build's progress: $(cat "$tmp/err")"
grep -q "building build/shell/shardlab" "$tmp/err" || fail "quickstart.sh did not say it builds"
# A second run reuses the configured tree: no new configure.
run log2 scripts/quickstart.sh > /dev/null 2>&1
! grep -q -- "-S " "$tmp/log2" || fail "reconfigured an existing build tree"
# scripts/test.sh's build (its options, read from test.sh) after the quickstart: no configure.
test_opts=$(grep -o 'scripts/build.sh build -D[^"]*' "$src/scripts/test.sh" | head -1)
[[ -n $test_opts ]] || fail "no 'scripts/build.sh build -D...' line in scripts/test.sh"
run log3 scripts/build.sh build ${test_opts#scripts/build.sh build } > /dev/null
! grep -q -- "-S " "$tmp/log3" || fail "test.sh's options reconfigured the quickstart's tree: $(cat "$tmp/log3")"
grep -q -- "--build build -j" "$tmp/log3" || fail "test.sh's build: $(cat "$tmp/log3")"
# Another value than the cached one configures again (and only then).
run log4 scripts/build.sh build -DSHARDLAB_WERROR=OFF > /dev/null
grep -q -- "-S .*-DSHARDLAB_WERROR=OFF" "$tmp/log4" || fail "a changed option did not configure: $(cat "$tmp/log4")"
run log5 scripts/build.sh build -DSHARDLAB_WERROR=OFF > /dev/null
! grep -q -- "-S " "$tmp/log5" || fail "the same option configured twice"
echo "quickstart_build_test ok"
