#!/usr/bin/env bash
# tests/shell/search_test.sh: `shardlab search` and sl.search through the real binary (issue 28
# part 3) on a small model and v6e-8 (a 2x4 torus):
#  1. --help lists it; the top-level --help names the command.
#  2. fsdp x tensor over 8 devices x two batch sizes: 4 meshes (all lay out), 8 candidates; the
#     4-head model cannot take tensor=8 (2 fail); the run holds an event per candidate and a
#     prediction per planned one; exit 0.
#  3. sl.search from Lua: the same counts, r.best is rank 1 and the fastest per device.
#  4. Bad input exits 1 (or raises in Lua) naming the value; nothing crashes.
# Usage: search_test.sh path/to/shardlab
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
db="$tmp/runs.db"
cd "$tmp"

grep -q "usage: shardlab search <config.yml>" <<<"$("$bin" search --help)" || fail "search --help"
grep -q "search <config.yml>" <<<"$("$bin" --help)" || fail "--help does not list search"

cat > small.yml <<'YML'
run_name: ""
model_name: "default"
steps: 150_001
per_device_batch_size: 2.0
max_target_length: 128
base_emb_dim: 256
base_num_query_heads: 4
base_num_kv_heads: 4
base_mlp_dim: 512
base_num_decoder_layers: 2
head_dim: 64
vocab_size: 1024
remat_policy: 'full'
ici_fsdp_parallelism: -1
ici_tensor_parallelism: 1
dcn_data_parallelism: -1
compile_topology: ''
compile_topology_num_slices: 1
YML

out=$("$bin" search small.yml compile_topology=v6e-8 \
  --vary mesh=fsdp,tensor --vary per_device_batch_size=1,2 --top 3 --svg front.svg --db "$db") ||
  fail "search exited $?: $out"
grep -q "8 candidates (4 meshes of 4 splits), 6 planned, 6 fit, 2 failed, 0 skipped" <<<"$out" ||
  fail "counts: $out"
grep -qE "^ +1  fsdp=" <<<"$out" || fail "no rank 1: $out"
grep -q "2 failed, e.g. fsdp=1 tensor=8" <<<"$out" || fail "failure example: $out"
grep -q "<polyline" front.svg && [[ $(grep -c "<circle" front.svg) == 6 ]] ||
  fail "--svg: $(head -c 300 front.svg)"
run=$(echo "$out" | sed -n 's/^run \([0-9a-f]*\) in .*/\1/p')
[[ -n $run ]] || fail "no run line: $out"
[[ $(sqlite3 "$db" "SELECT count(*) FROM events WHERE run_id = '$run' AND kind = 'search'") == 8 ]] ||
  fail "events"
[[ $(sqlite3 "$db" "SELECT count(*) FROM predictions p JOIN compilations c USING (compile_id) WHERE c.run_id = '$run'") == 6 ]] ||
  fail "predictions"
[[ $(sqlite3 "$db" "SELECT value FROM tags WHERE run_id = '$run' AND key = 'search.vary'") == \
   "mesh=fsdp,tensor per_device_batch_size=1,2" ]] || fail "search.vary tag"

lua_out=$("$bin" --db "$db" -e '
local c = sl.config("small.yml", {compile_topology = "v6e-8", compile_topology_num_slices = 1})
local r = sl.search(c, {vary = {mesh = {"fsdp", "tensor"}, per_device_batch_size = {1, 2}}})
assert(#r.candidates == 8 and r.planned == 6 and r.fitting == 6 and r.failed == 2, tostring(r))
assert(r.best.rank == 1 and r.ranked[1] == r.best, tostring(r))
for _, x in ipairs(r.ranked) do
  assert(x.fits and x.tokens_per_s_per_device <= r.best.tokens_per_s_per_device, x.label)
end
assert(tostring(r):find("what limits it"), tostring(r))
assert(r.candidates[1].error:find("not divisible by 8"), r.candidates[1].error)
local function err(opts)
  local ok, e = pcall(sl.search, c, opts)
  assert(not ok, "expected an error")
  return e
end
assert(err({vary = {mesh = {"tensr"}}}):find("did you mean .tensor."))
assert(err({vary = {remat_polcy = {"full"}}}):find("did you mean .remat_policy."))
assert(err({vary = {remat_policy = {{}}}}):find("vary.remat_policy%[1%]"))
assert(err({vary = {per_device_batch_size = {}}}):find("empty list"))
assert(err({vary = {mesh = "fsdp"}}):find("vary.mesh expected a list"))
assert(err({vary = {}, rank = "speed"}):find("speed"))
assert(err({vry = {}}):find("did you mean .vary."))
assert(err({}):find("options.vary"))
local ok, e = pcall(sl.search, "cfg", {vary = {}})
assert(not ok and e:find("Config"), e)
print("lua ok")
' 2>&1) || true
grep -q "lua ok" <<<"$lua_out" || fail "sl.search: $lua_out"

expect_fail() {  # expected message, then the arguments
  local want=$1; shift
  if out=$("$bin" search "$@" --db "$db" 2>&1); then fail "exit 0 for $*: $out"; fi
  grep -q -- "$want" <<<"$out" || fail "'$want' not in: $out"
}
expect_fail "did you mean 'tensor'" small.yml compile_topology=v6e-8 --vary mesh=tensr
expect_fail "an empty value" small.yml compile_topology=v6e-8 --vary remat_policy=full,
expect_fail "is not KEY=V1,V2" small.yml compile_topology=v6e-8 --vary remat_policy
expect_fail "needs compile_topology" small.yml --vary mesh=fsdp
expect_fail "--top 'x'" small.yml compile_topology=v6e-8 --top x
expect_fail "expects a number" small.yml compile_topology=v6e-8 --vary per_device_batch_size=two
expect_fail "nothing fits" small.yml compile_topology=v6e-8 --vary per_device_batch_size=1000000
echo "search_test ok"
