#!/usr/bin/env bash
# scripts/setup.sh: install every build, test and benchmark dependency from Debian's packages.
# Idempotent and quick when everything is already there. Run as root (or with sudo).
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config
  clang-14                # the second compiler CI builds with (scripts/test.sh)
  libopenblas-dev liblua5.4-dev libreadline-dev libfmt-dev libsqlite3-dev sqlite3
  libgtest-dev libgmock-dev libbenchmark-dev
  libyaml-cpp-dev         # MaxText's YAML configs (shardlab train_compile, sl.config("x.yml"))
  fortunes fortunes-min   # a real English corpus for the quickstart (/usr/share/games/fortunes)
  tmux                    # the interactive REPL test drives the shell in a pseudo-terminal
  libdnnl-dev             # oneDNN: bf16 matmuls (AVX-512 BF16 where the CPU has it)
  openmpi-bin libopenmpi-dev  # real processes: mpirun and the MPI collectives backend
)
if [[ "${SHARDLAB_WITH_TORCH:-0}" == 1 ]]; then
  packages+=(python3-torch)  # only for bench/compare_torch.py
  packages+=(libtcmalloc-minimal4)  # PyTorch's best allocator for llama-small there (bench/README)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
