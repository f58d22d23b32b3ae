#!/usr/bin/env bash
# Installs what braid needs to build and test, on Debian 12, as root.
# Idempotent: packages already present are skipped, so a second run costs
# one dpkg query. Usage: scripts/deps.sh [--list] [build|bench|fuzz]
# (--list: print the packages of that tier, one a line, and install nothing;
# scripts/fresh_path.sh reads it.)
set -euo pipefail
list=0
if [[ ${1:-} == --list ]]; then list=1; shift; fi

# python3-torch, libtorch-dev, pybind11-dev, python3-dev: the braid_torch
# extension (python/) and its tests; without them BRAID_TORCH turns off.
# libopenblas-openmp-dev: braid links the OpenMP build of OpenBLAS whatever
# the system's default BLAS is (cmake/braidOpenBLAS.cmake says why).
# libdnnl-dev: oneDNN, braid's bf16 GEMMs (src/tensor/bf16_gemm.cc).
# python3-pip: installs expecttest from PyPI (below), which PyTorch's own
# distributed test suite imports (tests/torch/test_torch_suite.py) and
# Debian does not package.
# openmpi-bin: the tests that launch braid's ranks and servers with mpirun.
# slurmctld, slurmd, slurm-client: the tests that start a Slurm cluster on
# namespaced test hosts and run srun and sbatch on it.
# iproute2 (ip), util-linux (unshare, nsenter, taskset): the test hosts
# (tests/support/test_hosts.h); both are in Debian's base system, named
# here because the tests need them. No test runs `tc`: the kernel has no
# netem, and tests/support/emulated_wire.h emulates delay and loss.
# Every program a test runs must come from this list or the base system: CI
# runs `make test` with scripts/fresh_path.sh's PATH, which holds nothing else.
want=(build-essential cmake pkg-config libssl-dev zlib1g-dev libopenblas-openmp-dev
      libopenblas0-pthread libdnnl-dev
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
      nlohmann-json3-dev dataset-fashion-mnist python3
      python3-torch libtorch-dev pybind11-dev python3-dev python3-pip
      openmpi-bin slurmctld slurmd slurm-client iproute2 util-linux)
if [[ "${1:-build}" == bench ]]; then
  want+=(libopenmpi-dev libopenblas0-openmp)
fi
# fuzz (`make fuzz`): clang and its runtimes (libFuzzer, ASan, UBSan), and
# clang's OpenMP (libomp: the build finds OpenMP for clang there). The build
# tier needs none of them: `make test` replays the fuzz inputs through the
# targets built by the ordinary compiler (tests/fuzz/replay_test.cc), and
# -fsanitize=fuzzer is used only by BRAID_FUZZ=ON builds.
if [[ "${1:-build}" == fuzz ]]; then
  want+=(clang libclang-rt-14-dev libomp-14-dev)
fi
if ((list)); then
  printf '%s\n' "${want[@]}"
  exit 0
fi

# PyPI's expecttest for Debian's python3 (the one python3-torch serves).
want_expecttest() {
  /usr/bin/python3 -c "import expecttest" 2>/dev/null && return 0
  echo "deps.sh: installing expecttest (PyPI) for /usr/bin/python3" >&2
  /usr/bin/python3 -m pip install -q --break-system-packages expecttest >/dev/null
}

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  want_expecttest
  exit 0
fi
echo "deps.sh: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
want_expecttest
