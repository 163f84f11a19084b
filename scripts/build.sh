#!/usr/bin/env bash
# scripts/build.sh [build-dir [cmake-option...]]: configure and build everything with CMake +
# Ninja. Options given (e.g. -DSHARDLAB_SANITIZE=ON) are applied to that build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
if [[ ! -f $build/build.ninja || $# -gt 0 ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SHARDLAB_CMAKE_ARGS:-} "$@" >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
