#!/usr/bin/env bash
# scripts/test.sh: build and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh build
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
