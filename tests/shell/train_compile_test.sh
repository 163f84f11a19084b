#!/usr/bin/env bash
# tests/shell/train_compile_test.sh: `shardlab train_compile` through the real binary (issue 28):
#  1. --help lists it; the top-level --help names the command.
#  2. A user's own yml with base_config over a small base file plans; the plan is a run in the
#     store with its memory metrics; keys without effect are reported once.
#  3. A misspelled key exits 1 with a did-you-mean; a bad file exits 1 naming it.
#  4. With MaxText's configs (../shared/maxtext/configs beside the checkout, or $2): base.yml +
#     model_name=llama2-7b plans on 8 devices; mixtral plans with the dropless dispatch and with
#     the dense one; the dropless one with expert parallelism is an error naming it.
# Usage: train_compile_test.sh path/to/shardlab [maxtext-configs-dir]
set -euo pipefail
bin=$(realpath "$1")
configs=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
db="$tmp/runs.db"
cd "$tmp"

grep -q "usage: shardlab train_compile <config.yml>" <<<"$("$bin" train_compile --help)" ||
  fail "train_compile --help"
grep -q "train_compile <config.yml>" <<<"$("$bin" --help)" || fail "--help does not list train_compile"

mkdir -p base/models mine
cat > base/base.yml <<'YML'
run_name: ""
model_name: "default"
override_model_config: false
steps: 150_001
per_device_batch_size: 12.0
max_target_length: 2048
base_emb_dim: 2048
base_num_query_heads: 16
base_num_kv_heads: 16
base_mlp_dim: 7168
base_num_decoder_layers: 16
head_dim: 128
vocab_size: 32000
remat_policy: 'full'
ici_fsdp_parallelism: -1
ici_tensor_parallelism: 1
dcn_data_parallelism: -1
enable_dropout: true
compile_topology: ''
compile_topology_num_slices: -1
YML
cat > mine/small.yml <<'YML'
base_config: "../base/base.yml"
base_emb_dim: 256
base_num_query_heads: 4
base_num_kv_heads: 4
head_dim: 64
base_mlp_dim: 512
base_num_decoder_layers: 2
max_target_length: 128
per_device_batch_size: 2
enable_dropout: false
YML
out=$("$bin" train_compile mine/small.yml num_devices=4 ici_tensor_parallelism=2 --db "$db")
grep -q "mesh fsdp=2 x tensor=2" <<<"$out" || fail "mesh: $out"
grep -q "Total estimated memory size: " <<<"$out" || fail "memory line: $out"
grep -q "accepted, no effect on the plan: enable_dropout=False (mine/small.yml)" <<<"$out" ||
  fail "no-effect report: $out"
[[ $(sqlite3 "$db" "SELECT count(*) FROM metrics WHERE key = 'plan/peak_bytes' AND value > 0") == 1 ]] ||
  fail "no plan/peak_bytes metric in the store"
[[ $(sqlite3 "$db" "SELECT count(*) FROM compilations c JOIN runs r USING (run_id)") -ge 1 ]] ||
  fail "the compile is not recorded under the run"

# The same from Lua: sl.config("x.yml", overrides) -> a Config the trainer takes.
"$bin" --db "$db" -e '
local c = sl.config("mine/small.yml", {num_devices = 4, ici_tensor_parallelism = 2})
assert(c:get("base_emb_dim") == 256 and c:get("ici_fsdp_parallelism") == 2, tostring(c))
local t = sl.trainer(c, nil, {shape_only = true, store = false})
assert(t:compile().memory.peak_bytes > 0)
local ok, e = pcall(sl.config, "mine/small.yml", "per_device_batch_sise=1")
assert(not ok and e:find("did you mean .per_device_batch_size.%?"), e)
ok, e = pcall(sl.config, "mine/small.yml", {steps = {1, 2}})
assert(not ok and e:find("steps=%[1, 2%]: expected an integer, got a list"), e)' >/dev/null ||
  fail "sl.config with a yml"

set +e
err=$("$bin" train_compile mine/small.yml num_devices=4 per_device_batch_sise=2 --db "$db" 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] || fail "misspelled key: exit $rc"
grep -q "did you mean 'per_device_batch_size'?" <<<"$err" || fail "did-you-mean: $err"
set +e
err=$("$bin" train_compile mine/nothere.yml --db "$db" 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] && grep -q "mine/nothere.yml: no such file" <<<"$err" || fail "missing file: $err"

if [[ -z $configs || ! -f $configs/base.yml ]]; then
  echo "SKIP: MaxText's configs not found (../shared/maxtext/configs beside the checkout)"
  exit 0
fi
out=$("$bin" train_compile "$configs/base.yml" model_name=llama2-7b num_devices=8 \
      per_device_batch_size=1 max_target_length=1024 --db "$db" --shardings)
grep -q "model llama2-7b, 8 devices, mesh fsdp=8" <<<"$out" || fail "llama2-7b: $out"
grep -q "params/decoder/layers/mlp/wi_0/kernel" <<<"$out" || fail "--shardings: $out"
# The dropless dispatch with expert parallelism plans (its ragged all-to-all over expert).
out=$("$bin" train_compile "$configs/base.yml" model_name=mixtral-8x7b num_devices=8 \
  ici_expert_parallelism=2 per_device_batch_size=1 max_target_length=256 --db "$db" 2>&1) ||
  fail "mixtral with ici_expert_parallelism=2: $out"
grep -q "expert" <<<"$out" || fail "mixtral with ici_expert_parallelism=2: $out"
# The default dropless dispatch plans on fsdp.
"$bin" train_compile "$configs/base.yml" model_name=mixtral-8x7b num_devices=8 \
  per_device_batch_size=1 max_target_length=256 --db "$db" >/dev/null 2>&1 ||
  fail "mixtral with the dropless dispatch did not plan"
# Its model file (decoder_block "mixtral") plans with the dense dispatch.
"$bin" train_compile "$configs/base.yml" model_name=mixtral-8x7b num_devices=8 sparse_matmul=false \
  capacity_factor=1.25 per_device_batch_size=1 max_target_length=256 --db "$db" >/dev/null 2>&1 ||
  fail "mixtral with the dense dispatch did not plan"
# With compile_topology: the mesh laid on the hardware, the predicted step, the HBM check.
out=$("$bin" train_compile "$configs/base.yml" model_name=llama2-7b compile_topology=v5p-8 \
      compile_topology_num_slices=1 per_device_batch_size=1 max_target_length=1024 --db "$db")
grep -q "model llama2-7b, 4 devices (v5p-8 x 1 slice), mesh fsdp=4" <<<"$out" || fail "v5p-8: $out"
grep -q "Predicted step on v5p-8" <<<"$out" || fail "no predicted step: $out"
grep -q "Fits: the peak per device is" <<<"$out" || fail "no HBM check: $out"
set +e
err=$("$bin" train_compile "$configs/base.yml" model_name=llama2-7b compile_topology=v5p-8 --db "$db" 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] && grep -q "compile_topology_num_slices >= 1" <<<"$err" || fail "slices -1: $err"

# llama2-70b at 4 x 8192 per device on v5e-8 (16 GB HBM per chip): does not fit, by how much.
set +e
err=$("$bin" train_compile "$configs/base.yml" model_name=llama2-70b compile_topology=v5e-8 \
      compile_topology_num_slices=1 per_device_batch_size=4 max_target_length=8192 --db "$db" 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] || fail "llama2-70b on v5e-8: exit $rc: $err"
grep -q "does not fit: the peak per device is .* GB but a v5e device (v5e-8) has 16.00 GB of HBM: over by" <<<"$err" ||
  fail "llama2-70b on v5e-8: $err"
[[ $(sqlite3 "$db" "SELECT value FROM metrics WHERE key = 'plan/fits' ORDER BY wall_ms DESC LIMIT 1") == 0.0 ]] ||
  fail "plan/fits not recorded as 0"
echo PASS
