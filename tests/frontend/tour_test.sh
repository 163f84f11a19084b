#!/usr/bin/env bash
# tests/frontend/tour_test.sh SHARDLAB SOURCE_DIR: runs examples/notebooks/sharding_tour.lua as
# a notebook into a temporary directory (Markdown and HTML reports) and checks what it shows.
set -euo pipefail
bin=$1 src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$out"
"$bin" --db "$out/tour.db" --notebook "$src/examples/notebooks/sharding_tour.lua" -o "$out/tour.md" --html
test -s "$out/tour.html"
expect() {
  grep -qF -- "$1" "$out/tour.md" || { echo "tour.md lacks: $1"; exit 1; }
}
expect "all cells succeeded"
expect "Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))"
expect "f32[8@X,4@Y]"
expect "add got incompatible shardings for broadcasting: ('X', 'Y'), ('Y', 'X')."
expect "Please specify the output sharding via the \`out_sharding\` parameter."
expect "all_reduce[axes=(Y)]"
expect "reduce_scatter[dim=1 axes=(Y)]"
expect "bytes received per device over Y:	16.0"
expect "dW:	f32[16,4@Y]"
expect "compiled 1 time(s)"
expect "per-device blocks:	f32[2,8]{V:(X,Y)}	f32[8,4]{V:Y}"
expect "same values:	true"
expect "Array([6., 7., 0., 1., 2., 3., 4., 5.], dtype=float32)"
expect "f32[8@X,8]	->	f32[8,8@X]	same values:	true	bytes received per device over X:	48.0"
expect "add operation with inputs: f32[4@X,4], f32[4,4@X] produces an illegally sharded result: f32[4@X,4@X]"
expect "Result type:	f32[4@X,4]"
expect "z.sharding inside g:	f32[4@X,4@Y]"
expect "per-example and batched agree:	true"
expect "Array has been deleted with shape=float32[16,4]."
expect "argument bytes per device, donated vs not:	320	464"
echo "tour_test ok"
