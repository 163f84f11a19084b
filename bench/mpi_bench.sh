#!/usr/bin/env bash
# bench/mpi_bench.sh [shardlab] [steps]: real processes against simulated devices on one
# machine: llama-tiny, data=2, global batch 16 x 256 (bench/mpi_bench.lua), once as
# 1 process x 2 threads (two simulated devices) and once as `mpirun -np 2` x 1 thread (one
# device per process, collectives over MPI). Prints both medians and the ratio of tokens/s
# (README: the issue's target is >= 90%). One run each; run it on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
shardlab=${1:-build/shell/shardlab}
steps=${2:-30}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
SHARDLAB_NUM_THREADS=2 "$shardlab" --db "$work/sim.db" bench/mpi_bench.lua "$steps" | tee "$work/sim.txt"
SHARDLAB_NUM_THREADS=1 mpirun -np 2 --bind-to none "$shardlab" --db "$work/mpi.db" \
  bench/mpi_bench.lua "$steps" | tee "$work/mpi.txt"
rate() { sed -n 's/.* \([0-9.]*\) tokens\/s$/\1/p' "$1"; }
awk -v a="$(rate "$work/sim.txt")" -v b="$(rate "$work/mpi.txt")" \
  'BEGIN { printf "mpirun -np 2 x 1 thread / 1 process x 2 threads: %.1f%% of the tokens/s\n", 100 * b / a }'
