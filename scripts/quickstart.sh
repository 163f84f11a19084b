#!/usr/bin/env bash
# scripts/quickstart.sh [key=value ...]: build the shell binary only (not the tests), showing the
# build's progress, then train llama-tiny on the fortunes corpus (examples/quickstart.lua),
# recording every step in ./quickstart.db (query it with sqlite3 or sl.sql). Arguments are
# MaxText-style overrides of the script's config (steps=50). build/ is configured as
# scripts/test.sh configures it, so running the tests afterwards rebuilds nothing of this.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "quickstart.sh: building build/shell/shardlab (the first build compiles the whole engine:" \
     "about 6 minutes on 2 idle cores, far longer on a shared machine; later runs only check it)" >&2
SHARDLAB_BUILD_TARGET=shardlab scripts/build.sh build -DSHARDLAB_WERROR=ON -DSHARDLAB_SANITIZE=OFF >&2
exec build/shell/shardlab --db "${SHARDLAB_DB:-quickstart.db}" examples/quickstart.lua "$@"
