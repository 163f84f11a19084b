#!/usr/bin/env bash
# scripts/build.sh [build-dir [cmake-option...]]: configure and build everything with CMake +
# Ninja. Options given (e.g. -DSHARDLAB_SANITIZE=ON) are applied to that build directory; it is
# configured again only when it has none yet or its cache holds another value for one of them
# (configuring again with the same values would be harmless, with other ones it rebuilds every
# object). SHARDLAB_BUILD_TARGET=name builds only that target (scripts/quickstart.sh: shardlab).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
# shellcheck disable=SC2206  # SHARDLAB_CMAKE_ARGS is a list of options, split on blanks
options=(-DCMAKE_BUILD_TYPE=Release ${SHARDLAB_CMAKE_ARGS:-} "$@")

# cached NAME VALUE: whether $build/CMakeCache.txt holds NAME (of any type) = VALUE.
cached() {
  awk -v name="$1" -v value="$2" '
    index($0, name ":") == 1 && index($0, "=") > 0 {
      found = (substr($0, index($0, "=") + 1) == value)
    }
    END { exit !found }' "$build/CMakeCache.txt"
}

# needs_configure: no build tree yet, or an option that is not -DNAME=VALUE, or a value the
# cache does not hold.
needs_configure() {
  [[ -f $build/build.ninja && -f $build/CMakeCache.txt ]] || return 0
  local opt name
  for opt in "${options[@]}"; do
    [[ $opt == -D*=* ]] || return 0
    name=${opt#-D}
    name=${name%%=*}
    cached "${name%%:*}" "${opt#*=}" || return 0
  done
  return 1
}

if needs_configure; then
  cmake -S . -B "$build" -G Ninja "${options[@]}" >/dev/null
fi
cmake --build "$build" ${SHARDLAB_BUILD_TARGET:+--target "$SHARDLAB_BUILD_TARGET"} -j "$(nproc)"
