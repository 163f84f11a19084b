#!/usr/bin/env bash
# tests/notebook/hostile_test.sh: hostile notebooks (issue 16 item 11): os.exit in a cell still
# leaves a report and exits with its code; the HTML report inlines only sanitised SVG, links only
# to http(s), and shows run names and sql values as text; the Markdown report escapes them.
# Usage: hostile_test.sh path/to/shardlab
set -euo pipefail
bin=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
export NO_COLOR=1
fail() { echo "FAIL: $*"; exit 1; }
has() { grep -qF -- "$2" "$1" || fail "$1 lacks: $2"; }
lacks() { ! grep -qiF -- "$2" "$1" || fail "$1 should not contain: $2"; }

# ---- os.exit(3) in a cell: the report is written, later cells are marked, exit code 3. --------
cat > exit.lua <<'LUA'
-- %% First
print("before exit")
-- %% Exits
pcall(os.exit, 3)  -- a pcall cannot hide it
print("after the pcall")
-- %% Never
print("never " .. "printed")
LUA
set +e
"$bin" --notebook exit.lua -o exit.md --html > exit.out 2> exit.err
rc=$?
set -e
[[ $rc == 3 ]] || { cat exit.out exit.err; fail "os.exit(3) should end the notebook with code 3, got $rc"; }
[[ -f exit.md && -f exit.html ]] || fail "os.exit left no report"
has exit.md "before exit"
has exit.md "os.exit(3) called: the notebook stops here"
has exit.md "(not run: an earlier cell called os.exit)"
has exit.md "stopped at In [2]"
lacks exit.md "never printed"
# os.exit(0) (or true) ends the notebook successfully, still with its report.
printf -- '-- %%%% A\nprint("one")\nos.exit(true)\n-- %%%% B\nprint("t" .. "wo")\n' > exit0.lua
"$bin" --notebook exit0.lua -o exit0.md > /dev/null 2>&1 || fail "os.exit(true) should exit 0"
has exit0.md "one"
lacks exit0.md "two"

# ---- HTML: SVG sanitised, only http(s) links, run names and sql values as text. ---------------
cat > evil.lua <<'LUA'
-- %% [markdown]
-- # Links
-- [bad](javascript:alert(1)) and [data](data:text/html,x) and [good](https://example.com/a?b=1)
-- %% A plot with a script and handlers
'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" onload="alert(1)"><script>alert(2)</script><a href="javascript:alert(3)"><rect width="5" height="5"/></a><polyline points="0,0 5,5" stroke="red" onclick="alert(4)"/><foreignObject><iframe src="x"></iframe></foreignObject><text x="1" y="9">a &lt; b</text></svg>'
-- %% A run with a hostile name
t = sl.trainer(sl.config{model = "llama-tiny", steps = 1, base_num_decoder_layers = 1,
               max_target_length = 16, per_device_batch_size = 1,
               run_name = "<img src=x onerror=alert(5)>[x](javascript:alert(6))"})
t:train{steps = 1, quiet = true};
t = nil
collectgarbage()
-- %% A sql value that looks like markup
sl.sql("SELECT '<b>bold</b> [y](javascript:alert(7))' AS v")
LUA
"$bin" --db evil.db --notebook evil.lua -o evil.md --html > evil.out 2> evil.err || { cat evil.out evil.err; fail "evil notebook"; }
h=evil.html
# (the cell sources are shown escaped: only live markup is looked for)
for bad in "<script" "onload=\"" "onclick=\"" "<foreignObject" "<iframe" "<a href=\"javascript" \
           "href=\"data:" "<img" "<b>bold"; do
  lacks $h "$bad"
done
has $h '<a href="https://example.com/a?b=1">good</a>'
has $h '[bad](javascript:alert(1))'            # shown as text
has $h '<polyline points="0,0 5,5" stroke="red"/>'
has $h 'a &lt; b'
has $h '&lt;b&gt;bold&lt;/b&gt;'
has $h '&lt;img src=x onerror=alert(5)&gt;'
python3 "$here/check_report.py" html $h 1 || exit 1
# Markdown: the run name and the sql value are escaped text in their tables.
has evil.md '&lt;img src=x onerror=alert(5)&gt;\[x\](javascript:alert(6))'
has evil.md '&lt;b&gt;bold&lt;/b&gt; \[y\](javascript:alert(7))'
lacks evil.md '| <img'
# The Markdown report's SVG files are sanitised as the HTML report's inline SVG (issue 30).
svg=evil_files/plot-1.svg
[[ -f $svg ]] || fail "no $svg"
for bad in "<script" "onload=" "onclick=" "<foreignObject" "<iframe" "javascript:"; do
  lacks $svg "$bad"
done
has $svg '<polyline points="0,0 5,5" stroke="red"/>'
# ---- The runs table shows a run's final status even when its trainer is still a global. -------
cat > live.lua <<'LUA'
-- %% Train
t = sl.trainer(sl.config{model = "llama-tiny", steps = 1, base_num_decoder_layers = 1,
               max_target_length = 16, per_device_batch_size = 1, run_name = "still-global"})
t:train{steps = 1, quiet = true};
LUA
"$bin" --db live.db --notebook live.lua -o live.md > /dev/null 2>&1 || fail "live notebook"
grep -qE '^\| [0-9a-f]{32} \| still-global \| FINISHED \|' live.md || { grep -F still-global live.md; fail "the run should be FINISHED in the report"; }
echo "notebook hostile_test ok"
