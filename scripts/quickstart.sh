#!/usr/bin/env bash
# scripts/quickstart.sh: build the shell binary only (not the tests), then train llama-tiny on the
# fortunes corpus (examples/quickstart.lua), recording every step in ./quickstart.db (query it
# with sqlite3 or sl.sql).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${SHARDLAB_CMAKE_ARGS:-} >/dev/null
fi
cmake --build build --target shardlab -j "$(nproc)" >/dev/null
exec build/shell/shardlab --db "${SHARDLAB_DB:-quickstart.db}" examples/quickstart.lua "$@"
