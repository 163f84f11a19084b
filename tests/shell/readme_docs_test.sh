#!/usr/bin/env bash
# tests/shell/readme_docs_test.sh: the README's tables and citations are true of the repository
# (issue 30 item 19): every example script, notebook and doc is listed, every model preset is in
# the models table, every repository path it cites exists, and every report a documented
# `--notebook` command writes (-o PATH, or the default <stem>.report.*) is ignored by git, so a
# run from the repository root leaves nothing untracked.
# Usage: readme_docs_test.sh path/to/shardlab source-dir
set -euo pipefail
src=$(realpath "$2")
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
readme=README.md
for f in examples/*.lua examples/notebooks/*.lua docs/*.md; do
  grep -qF "\`$f" "$readme" || fail "README.md does not list $f"
done
grep -ohE '^\s*\{"[a-z0-9.-]+",' engine/model/presets.cpp engine/model/moe.cpp | tr -d ' {",' |
  while read -r model; do
  grep -q "^| \`$model\` |" "$readme" || fail "README.md's models table misses $model"
done
# Paths into the repository's top folders, as the README cites them, must exist.
grep -oE '(^|[ `(])(shared|examples|docs|scripts|tests|bench|engine|shell)/[A-Za-z0-9_./-]*[A-Za-z0-9_]' "$readme" |
  sed -E 's/^[ `(]//' | sort -u | while read -r path; do
  [[ -e $path ]] || fail "README.md cites $path, which is not in the repository"
done
# Reports of the documented notebook commands land where git ignores them.
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  grep -rhoE -- '--notebook [^ `]*\.lua( -o [^ `]*)?' "$readme" docs examples | sort -u |
    while read -r _ nb o out; do
      if [[ -n ${out:-} ]]; then
        [[ $out == /* ]] || git check-ignore -q "$out" ||
          fail "'--notebook $nb -o $out' writes $out into the tree, untracked and not ignored"
      else
        stem=$(basename "$nb" .lua)
        for f in "$stem.report.md" "$stem.report.html" "$stem.report_files/plot-1.svg"; do
          git check-ignore -q "$f" || fail "--notebook $nb writes $f, not ignored by git"
        done
      fi
    done
fi
echo "readme_docs_test ok"
