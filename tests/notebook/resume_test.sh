#!/usr/bin/env bash
# tests/notebook/resume_test.sh: `--notebook --resume`: cells tagged `cache` in the unchanged,
# successful prefix of the previous run are not run and show that run's output; everything else
# runs; a changed or failed cell ends the prefix.
# Usage: resume_test.sh path/to/shardlab
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
export NO_COLOR=1
fail() { echo "FAIL: $*"; exit 1; }
has() { grep -qF -- "$2" "$1" || fail "$1 lacks: $2"; }
lacks() { ! grep -qF -- "$2" "$1" || fail "$1 should not contain: $2"; }
count() { grep -cF -- "$2" "$1" || true; }
runs_of() { [[ -f ran.log ]] && grep -c "^$1$" ran.log || echo 0; }

write_nb() {  # write_nb BASE LAST_WORD
  cat > nb.lua <<LUA
-- %% Setup
base = $1
-- %% Slow tags=["cache"]
io.open("ran.log", "a"):write("slow\n"):close()
if os.getenv("FAIL_SLOW") then error("slow failed") end
slow_global = base
print("computed " .. base)
{ {name = "a", v = base}, {name = "b", v = 2} }
-- %% Plot tag="cache"
io.open("ran.log", "a"):write("plot\n"):close()
plot.show(plot.line{x = {1, 2, 3}})
print("after plot")
"value-" .. base
-- %% Last
io.open("ran.log", "a"):write("last\n"):close()
print("$2", tostring(slow_global))
LUA
}
nb() { "$bin" --db res.db --notebook nb.lua "$@"; }

# First run with --resume: nothing to reuse, every cell runs (and the cache cells keep output).
write_nb 10 last
nb -o r1.md --resume > r1.out 2> r1.err || { cat r1.out r1.err; fail "first run"; }
[[ $(runs_of slow) == 1 && $(runs_of plot) == 1 && $(runs_of last) == 1 ]] || fail "first run: $(cat ran.log)"
lacks r1.md "cached"
lacks r1.out "reused"

# Second run: the two cache cells are reused (not run), the others run.
nb -o r2.md --resume > r2.out 2> r2.err || { cat r2.out r2.err; fail "resume"; }
[[ $(runs_of slow) == 1 && $(runs_of plot) == 1 && $(runs_of last) == 2 ]] || fail "resume ran: $(cat ran.log)"
has r2.out "2 code cells ran (2 cached cells reused)"
grep -qE '^\*\*In \[2\]: Slow \(cached: not run; output from the run of [0-9-]+ [0-9:]+ UTC\)\*\*$' r2.md ||
  fail "cached heading: $(grep 'In \[2\]' r2.md)"
has r2.md "**In [3]: Plot (cached: not run; output from the run of"
has r2.md "computed 10"                       # the reused output, value table and plot
has r2.md "| a | 10 |"
has r2.md "**Out[2]:**"
has r2.md "after plot"
has r2.md "value-10"
has r2.md "![plot-1.svg](r2_files/plot-1.svg)"
python3 - r1_files/plot-1.svg r2_files/plot-1.svg <<'PY' || fail "the reused plot differs"
import sys
a, b = (open(p, encoding="utf-8").read() for p in sys.argv[1:])
sys.exit(a != b)
PY
has r2.md "last	nil"                          # documented: a cached cell's globals are not restored
has r1.md "last	10"
# The same with --html: the reused cells are in the page too.
nb -o r2h.html --resume > /dev/null 2>&1 || fail "resume to html"
has r2h.html "computed 10"
has r2h.html "<svg"
[[ $(runs_of slow) == 1 ]] || fail "html resume ran the cache cell"

# Reuse chains: the run that reused the output keeps it for the next --resume.
nb -o r3.md --resume > /dev/null 2>&1 || fail "third run"
[[ $(runs_of slow) == 1 ]] || fail "chained resume ran the cache cell"
has r3.md "computed 10"

# Without --resume every cell runs.
nb -o r4.md > r4.out 2>&1 || fail "plain run"
[[ $(runs_of slow) == 2 && $(runs_of plot) == 2 ]] || fail "a plain run must run cache cells"
lacks r4.md "cached"

# A change after the cache cells keeps them reused.
write_nb 10 final
nb -o r5.md --resume > /dev/null 2>&1 || fail "resume after a later change"
[[ $(runs_of slow) == 2 && $(runs_of plot) == 2 ]] || fail "a later change must not rerun the cache cells"
has r5.md "final	nil"

# A change before them ends the prefix: everything from there on runs.
write_nb 11 final
nb -o r6.md --resume > /dev/null 2>&1 || fail "resume after an earlier change"
[[ $(runs_of slow) == 3 && $(runs_of plot) == 3 ]] || fail "an earlier change must rerun the cache cells"
has r6.md "computed 11"
lacks r6.md "cached"

# A failing cache cell (allowed) is not reused: the next --resume runs it again.
FAIL_SLOW=1 nb -o r7.md --allow-errors > /dev/null 2>&1 || fail "allowed failure"
[[ $(runs_of slow) == 4 ]] || fail "the failing run"
nb -o r8.md --resume > r8.out 2>&1 || fail "resume after a failure"
[[ $(runs_of slow) == 5 && $(runs_of plot) == 5 ]] || fail "a failed cell must end the prefix: $(sort ran.log | uniq -c)"
lacks r8.md "cached"

# Cell positions count: inserting a cell before the cache cells renumbers them, so they run.
nb -o r9.md --resume > /dev/null 2>&1 || fail "resume"
[[ $(runs_of slow) == 5 ]] || fail "expected reuse"
{ printf -- '-- %%%% New\nx = 1\n'; cat nb.lua; } > nb2.lua && mv nb2.lua nb.lua
nb -o r10.md --resume > /dev/null 2>&1 || fail "resume after an insertion"
[[ $(runs_of slow) == 6 ]] || fail "an inserted cell must end the prefix"

# Another notebook path has its own history.
cp nb.lua other.lua
"$bin" --db res.db --notebook other.lua -o o.md --resume > /dev/null 2>&1 || fail "other notebook"
[[ $(runs_of slow) == 7 ]] || fail "another notebook must not reuse nb.lua's cells"

# The events: reused cells are logged with "reused": true and keep from_ms.
ev=$("$bin" --db res.db -e 'for _, r in ipairs(sl.sql("SELECT message, payload FROM events WHERE kind = ? ORDER BY event_id", "cell")) do print(r.message .. " " .. r.payload) end')
grep -qE 'nb\.lua: In \[2\] \(line 4\) Slow \(cached\) .*"reused": true, "outputs": ' <<< "$ev" || fail "reused event: $ev"
echo "resume_test: ok"
