#!/usr/bin/env bash
# scripts/quickstart.sh: build, then train llama-tiny on the fortunes corpus (examples/quickstart.lua),
# recording every step in ./quickstart.db (query it with sqlite3 or sl.sql).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh build >/dev/null
exec build/shell/shardlab --db "${SHARDLAB_DB:-quickstart.db}" examples/quickstart.lua "$@"
