#!/usr/bin/env bash
# scripts/build.sh [build-dir]: configure (once) and build everything with CMake + Ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [[ ! -f $build/build.ninja ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SHARDLAB_CMAKE_ARGS:-}
fi
cmake --build "$build" -j "$(nproc)"
