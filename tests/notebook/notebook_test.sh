#!/usr/bin/env bash
# tests/notebook/notebook_test.sh: notebook mode through the real binary: cells, Out[n], capture of
# engine output, parameters, errors in place, SVG plots (parsed) and the HTML report's DOM.
# Usage: notebook_test.sh path/to/shardlab path/to/source-dir
set -euo pipefail
bin=$(realpath "$1")
src=$(realpath "$2")
here=$(dirname "$(realpath "$0")")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
export NO_COLOR=1
fail() { echo "FAIL: $*"; exit 1; }
has() { grep -qF -- "$2" "$1" || fail "$1 lacks: $2"; }
lacks() { ! grep -qF -- "$2" "$1" || fail "$1 should not contain: $2"; }
check() { python3 "$here/check_report.py" "$@" || exit 1; }
# cell_block REPORT N: the report from "**In [N]:" up to the next cell heading.
cell_block() { awk -v h="**In [$2]:" 'index($0, h) == 1 {on = 1; print; next} on && /^\*\*In \[/ {exit} on' "$1"; }
# in_cell REPORT N GREP-ARGS...: grep (quietly) inside one cell's block (no pipes: pipefail + grep -q).
in_cell() { local block; block=$(cell_block "$1" "$2"); grep -q "${@:3}" <<< "$block"; }
# count REPORT TEXT: lines containing TEXT.
count() { grep -cF -- "$2" "$1" || true; }

# ---- The example notebook: every cell's output, a valid SVG, the HTML report. -------------
"$bin" --db ex.db --notebook "$src/examples/notebooks/compare_meshes.lua" -o ex/report.md --html > ex.out 2> ex.err ||
  { cat ex.out ex.err; fail "the example notebook failed"; }
r=ex/report.md
has $r "# Data parallel or FSDP? One model, two meshes"   # markdown cell as prose
has $r "**In [1]: Parameters**"
has $r "Mesh('diloco': 1, 'data': 2"                      # In [2] printed meshes
has $r "Compiled(train_step: "                            # In [3]
has $r "| mesh | alias_KiB | argument_KiB |"              # Out[4]: rows as a table
has $r "| data=2 | "
has $r "| mesh | GFLOP | data_KiB | fsdp_KiB |"           # Out[5]: collectives
has $r "== fsdp=2"                                        # In [6] shardings (or the mesh)
has $r "completed step: 19, seconds: "                    # In [7]: the engine's step lines
has $r "final loss"
has $r "min "                                             # In [8]: sparklines
has $r "![plot-1.svg](report_files/plot-1.svg)"           # Out[9]: the plot, linked
grep -qE '^\*\*In \[9\]: Loss curves from the store\*\* `\[[0-9]+\.[0-9]{4}s\]`$' $r || fail "cell timing format"
lacks $r "Error"
in_cell $r 7 -F "completed step: 0," || fail "step lines not in the training cell"
in_cell $r 8 -F "completed step" && fail "step lines leaked into the next cell"
check svg ex/report_files/plot-1.svg 2
check html ex/report.html 1
has ex/report.html "<table>"

# Header: date, git revision (when the notebook's directory is a repository), meshes, the runs
# this notebook started; footer: their v_compile_summary and v_step_time_pct rows.
grep -qE '^Date: [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} UTC' $r || fail "report date"
if rev=$(git -C "$src/examples/notebooks" rev-parse --short HEAD 2>/dev/null); then
  grep -qF "git: \`$rev\`" $r || fail "git revision $rev missing"
fi
has $r "- \`Mesh('diloco': 1, 'data': 2, "
has $r "- \`Mesh('diloco': 1, 'data': 1, 'stage': 1, 'fsdp': 2, "
has $r "Runs started (2):"
has $r "| run_id | name | status | mesh | steps |"
grep -qE '^\| [0-9a-f]{32} \| .* \| data=2 \| 20 \|$' $r || fail "the data=2 run row"
grep -qE '^\| [0-9a-f]{32} \| .* \| fsdp=2 \| 20 \|$' $r || fail "the fsdp=2 run row"
has $r "**Compilation per run and function (v_compile_summary):**"
has $r "| run_id | fn_name | events | hits | misses | compile_s | reasons |"
has $r "**Step time per run, seconds (v_step_time_pct):**"
has $r "| run_id | n_steps | p50_s | p90_s | p99_s | mean_s | min_s | max_s |"
[[ $(grep -cE '^\| [0-9a-f]{32} \| train_step \| ' $r) == 2 ]] || fail "one compile row per run"
[[ $(grep -cE '^\| [0-9a-f]{32} \| 20 \| ' $r) == 2 ]] || fail "one step-time row per run (20 steps)"
# The footer follows the last cell; the header precedes the first.
[[ $(grep -n 'v_step_time_pct' $r | cut -d: -f1) -gt $(grep -n '^\*\*In \[9\]' $r | cut -d: -f1) ]] || fail "footer after the cells"
[[ $(grep -n '^Runs started' $r | cut -d: -f1) -lt $(grep -n '^\*\*In \[1\]' $r | cut -d: -f1) ]] || fail "header before the cells"
has ex/report.html "v_compile_summary"
has ex/report.html "Runs started (2):"
# The run ids come from the store: the header's ids are the runs table's, the footer uses them.
ids=$("$bin" --db ex.db -e 'for _, r in ipairs(sl.sql("SELECT run_id FROM runs ORDER BY start_ms")) do print(r.run_id) end')
for id in $ids; do [[ $(count $r "| $id |") == 3 ]] || fail "run $id should be in the header and both footer tables"; done
# Each cell that ran is an `events` row (kind 'cell') with its source hash and duration.
cells=$("$bin" --db ex.db -e 'for _, r in ipairs(sl.sql("SELECT message, payload FROM events WHERE kind = ? ORDER BY event_id", "cell")) do print(r.message .. " " .. r.payload) end')
[[ $(grep -c . <<< "$cells") == 9 ]] || fail "9 cell events expected, got: $cells"
grep -qE 'compare_meshes\.lua: In \[3\] \(line [0-9]+\) Configure.*"source_hash": "[0-9a-f]{16}", "seconds": [0-9.]+, "ok": true' <<< "$cells" ||
  fail "cell 3's event: $cells"
# A second run into the same store reports only its own runs; unchanged cells hash the same.
"$bin" --db ex.db --notebook "$src/examples/notebooks/compare_meshes.lua" -o ex2.md > /dev/null 2>&1 || fail "second run"
has ex2.md "Runs started (2):"
for id in $ids; do lacks ex2.md "$id"; done
hashes=$("$bin" --db ex.db -e 'for _, r in ipairs(sl.sql("SELECT count(DISTINCT json_extract(payload, \"$.source_hash\")) AS n, count(*) AS c FROM events WHERE kind = \"cell\"")) do print(r.n, r.c) end')
[[ $hashes == $'9\t18' ]] || fail "cell hashes should repeat across runs: $hashes"

# ---- Cells, metadata, values, capture, parameters. ------------------------------------------
cat > nb.lua <<'LUA'
-- %% [markdown]
-- # A *small* notebook
-- %% Setup tags=["parameters"]
steps = 5
label = "default"
-- %% Values
local hidden = 1          -- locals do not survive the cell
shown = steps * 2
print("steps=" .. steps, "label=" .. label)
io.write("written\n")
io.stderr:write("to stderr\n")
shown + 1
-- %% Locals
print(hidden == nil and "no local" or "local leaked")
-- %% A trailing semicolon hides the value
shown;
-- %% Multi-line value
{
  a = shown,
}
-- %% Engine output goes to the cell that caused it
t = sl.trainer(sl.config{model = "llama-tiny", steps = 2, base_num_decoder_layers = 1,
               max_target_length = 16, per_device_batch_size = 1}, nil, {store = false})
t:train{steps = 2};
-- %% Next
print("after training")
-- %% skip=true
error("skipped cells never run")
-- %% allow_error=true
error("allowed failure")
-- %% Plots
plot.show(plot.line{loss = {{0, 3}, {1, 2}, {2, 1.5}}})
print("between plots")
plot.line{a = {1, 2, 3}, b = {3, 2, 1}, title = "two"}
LUA
"$bin" --notebook nb.lua -o out/nb.md -p steps=3 -p label=cli > nb.out 2> nb.err || { cat nb.out nb.err; fail "nb.lua failed"; }
r=out/nb.md
# The trainer here has store=false: the header says no runs started, there is no footer, and no git line outside a repository.
has $r "No training runs were started."
lacks $r "v_compile_summary"
git -C "$tmp" rev-parse --short HEAD > /dev/null 2>&1 || lacks $r "git: "
has $r "# A *small* notebook"
has $r "**In [2]: injected-parameters**"
has $r 'label = "cli"'
has $r "steps=3	label=cli"                 # -p overrides the parameters cell
has $r "written"
has $r "to stderr"
in_cell $r 3 -xF "7" || fail "Out[3] (shown + 1)"
in_cell $r 4 -xF "no local" || fail "a local survived its cell"
in_cell $r 4 -F "**Out[4]:**" && fail "a cell ending in print() must have no Out"
in_cell $r 5 -F "**Out[5]:**" && fail "a trailing ';' must hide the value"
in_cell $r 6 -xF "{a = 6}" || fail "multi-line trailing expression"
in_cell $r 7 -F "completed step: 1," || fail "engine step lines not captured in their cell"
in_cell $r 8 -F "completed step" && fail "engine output leaked into the next cell"
has $r "(skipped: skip=true)"
[[ $(count $r "skipped cells never run") == 1 ]] || fail "a skip=true cell ran"
has $r "**Error (allowed):**"
has $r "nb.lua:30: allowed failure"
has $r "between plots"
[[ -f out/nb_files/plot-1.svg && -f out/nb_files/plot-2.svg ]] || fail "plot files"
grep -n "plot-1.svg\|between plots\|plot-2.svg" $r | cut -d: -f1 | sort -n -c || fail "plot.show order"
check svg out/nb_files/plot-1.svg 1
check svg out/nb_files/plot-2.svg 2

# papermill's `-p name value` form and an .html output.
"$bin" --notebook nb.lua -o only.html -p steps 4 > /dev/null 2>&1 || fail "-p name value"
[[ -f only.html && ! -f only.md ]] || fail "-o x.html writes HTML only"
has only.html "steps=4"
check html only.html 2

# ---- A failing cell: error in place, later cells not run, non-zero exit. ---------------------
cat > bad.lua <<'LUA'
-- %% ok
x = 1
-- %% boom
local function inner() error("boom in cell") end
inner()
-- %% later
print("must not run")
LUA
if "$bin" --notebook bad.lua -o bad.md --html > bad.out 2> bad.err; then fail "a failing cell must exit non-zero"; fi
has bad.md "**Error:**"
has bad.md "bad.lua:4: boom in cell"
has bad.md "stack traceback:"
has bad.md "(not run: an earlier cell failed)"
[[ $(count bad.md "must not run") == 1 ]] || fail "a cell after the failure ran"
has bad.md "stopped at In [2]"
has bad.err "bad.lua:4: boom in cell"
has bad.html "boom in cell"
# --allow-errors keeps going and exits 0.
"$bin" --notebook bad.lua -o bad2.md --allow-errors > /dev/null 2>&1 || fail "--allow-errors must exit 0"
[[ $(count bad2.md "must not run") == 2 ]] || fail "--allow-errors must run the later cells"

# ---- Bad usage. ---------------------------------------------------------------------------
printf -- '-- %%%% [python]\nx = 1\n' > hdr.lua
if "$bin" --notebook hdr.lua -o h.md 2> hdr.err; then fail "unknown cell type accepted"; fi
has hdr.err "line 1: unknown cell type '[python]'"
if "$bin" --notebook nb.lua -p 1x=2 -o h.md 2> p.err; then fail "bad parameter name accepted"; fi
has p.err "'1x' is not a Lua name"

# ---- Optional: headless Chromium renders the HTML report (skipped when it is not installed). --
chrome=$(command -v chromium || command -v chromium-browser || true)
if [[ -n $chrome ]]; then
  timeout 60 "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,2400 \
    --screenshot="$tmp/shot.png" "file://$tmp/ex/report.html" > /dev/null 2>&1 || fail "chromium could not render"
  [[ $(stat -c %s shot.png) -gt 20000 ]] || fail "screenshot suspiciously small"
  echo "chromium screenshot ok"
else
  echo "chromium not installed: screenshot check skipped"
fi
echo "notebook_test: ok"
