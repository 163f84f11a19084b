#!/usr/bin/env bash
# scripts/test.sh [--sanitize]: build with warnings as errors and run the whole test suite
# (what CI runs), then the MPI tests (mpirun, 2 and 4 ranks, as root where CI runs), then a clang 14
# build of every target (-Werror; not run; SHARDLAB_CLANG=0 skips it). --sanitize (.ci/run) then also runs the
# whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, every finding
# fatal; the only suppressions are LeakSanitizer's for Open MPI's own libraries in the MPI
# tests) and the threaded tests (thread pool, dispatcher, trainer) under ThreadSanitizer (build-tsan/).
# Each phase prints its wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=0
case "${1:-}" in
  "") ;;
  --sanitize) sanitize=1 ;;
  *) echo "usage: scripts/test.sh [--sanitize]" >&2; exit 2 ;;
esac
jobs=$(nproc)

# timed NAME command...: runs the command and prints how long it took.
timed() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test.sh: $name: $((SECONDS - start)) s"
}

timed "release build" scripts/build.sh build -DSHARDLAB_WERROR=ON -DSHARDLAB_SANITIZE=OFF
timed "release tests" ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900 -E '^mpi_'
# Every SIMD path (all of it is in engine/tensor): the kernel tests built again for other -march
# levels, only those binaries, each run as a whole. x86-64-v3 (AVX2+FMA without AVX-512: the
# packed bf16 GEMM's AVX2 kernel) only on a CPU with AVX-512, since on one without it the native
# build above already is that path; plain x86-64 (the scalar kernels and convert+sgemm) with the
# every-op test as well, so every op runs on the scalar kernels. A level above this CPU is skipped.
march_variant() {
  local level=$1 dir=build-$1 targets=(tensor_test tensor_alloc_test blas_info_tool)
  if ! c++ -march="$level" -E -x c++ - </dev/null >/dev/null 2>&1; then return; fi
  case $level in
    x86-64-v3)
      grep -qw avx2 /proc/cpuinfo || { echo "test.sh: no AVX2: $level skipped"; return; }
      grep -qw avx512f /proc/cpuinfo || { echo "test.sh: no AVX-512: $level is the native build"; return; } ;;
    x86-64) targets+=(every_op_test) ;;
  esac
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SHARDLAB_CMAKE_ARGS:-} \
    -DSHARDLAB_WERROR=ON -DSHARDLAB_SANITIZE=OFF -DSHARDLAB_MARCH="$level" >/dev/null
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
  SHARDLAB_SOURCE_DIR=$PWD "$dir/tests/tensor/tensor_test" --gtest_brief=1
  SHARDLAB_SOURCE_DIR=$PWD SHARDLAB_DISABLE_AVX512_BF16=1 "$dir/tests/tensor/tensor_test" \
    --gtest_brief=1 --gtest_filter='Bf16*'
  SHARDLAB_SOURCE_DIR=$PWD "$dir/tests/tensor/tensor_alloc_test" --gtest_brief=1
  if [[ -x $dir/tests/ops/every_op_test ]]; then
    SHARDLAB_SOURCE_DIR=$PWD "$dir/tests/ops/every_op_test" --gtest_brief=1
  fi
}
for level in x86-64-v3 x86-64; do timed "tests built for -march=$level" march_variant "$level"; done
# Real processes (tests/mpi, docs/distributed.md): mpirun with 2 and 4 ranks, run on their own
# so the ranks do not compete with other tests for the cores. Registered only in an MPI build.
timed "mpi tests" ctest --test-dir build --output-on-failure --timeout 900 -R '^mpi_' --no-tests=ignore
# clang 14 as well as GCC: every target, warnings as errors (a separate build-clang/). Built
# without optimisation (CMAKE_BUILD_TYPE=None: no -O, no -g): clang's warnings come from its
# front end, so -O2 would add time and no checks. Nothing is run from it. Skipped (saying so)
# where clang++-14 is not installed (scripts/setup.sh installs it).
if [[ ${SHARDLAB_CLANG:-1} == 1 ]] && ! command -v clang++-14 >/dev/null; then
  echo "test.sh: clang++-14 not installed: the clang build is skipped"
elif [[ ${SHARDLAB_CLANG:-1} == 1 ]]; then
  timed "clang build" scripts/build.sh build-clang -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DSHARDLAB_WERROR=ON \
    -DSHARDLAB_SANITIZE=OFF
fi
((sanitize)) || exit 0

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
timed "asan+ubsan build" scripts/build.sh build-asan -DSHARDLAB_SANITIZE=ON
timed "asan+ubsan tests" ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 1800 \
  -E '^mpi_'
# The MPI tests under ASan+UBSan, on their own as in Release; LeakSanitizer skips only
# allocations made inside Open MPI's libraries (tests/mpi/lsan_openmpi.supp, set by CTest).
timed "asan+ubsan mpi tests" ctest --test-dir build-asan --output-on-failure --timeout 1800 \
  -R '^mpi_' --no-tests=ignore

# TSan: only the binaries with threads of their own, and in train_test only the trainer's
# threaded parts (the dispatcher, asynchronous steps, timing).
tsan_build() {
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release ${SHARDLAB_CMAKE_ARGS:-} \
    -DSHARDLAB_SANITIZE=thread >/dev/null
  cmake --build build-tsan -j "$jobs" --target base_test train_test
}
tsan_tests() {
  build-tsan/tests/base/base_test
  build-tsan/tests/train/train_test \
    --gtest_filter='AsyncTest.*:DispatcherTest.*:TrainerTest.*:TimingTest.*'
}
timed "tsan build" tsan_build
timed "tsan tests" tsan_tests
