#!/usr/bin/env bash
# Builds braid_torch against the torch installed in a Python virtual
# environment (a PyPI wheel, e.g. torch 2.x) instead of Debian's torch 1.13,
# and with --test runs tests/torch under that environment's python (its
# torchrun included).
#
# Usage: scripts/build_torch_venv.sh VENV [BUILD_DIR] [--test]
#   VENV       a venv whose python imports torch (pip install torch pybind11 numpy)
#   BUILD_DIR  default build-torch-venv (ignored by git); configured with
#              BRAID_TORCH_FROM_PYTHON=ON, so torch's headers and libraries
#              come from the venv's torch package (python/CMakeLists.txt)
#
# Afterwards: PYTHONPATH=BUILD_DIR/python VENV/bin/python -c "import braid_torch"
set -euo pipefail
cd "$(dirname "$0")/.."

test=0
args=()
for a in "$@"; do
  if [[ $a == --test ]]; then test=1; else args+=("$a"); fi
done
if [[ ${#args[@]} -lt 1 || ${#args[@]} -gt 2 ]]; then
  echo "usage: $0 VENV [BUILD_DIR] [--test]" >&2
  exit 2
fi
venv=$(cd "${args[0]}" && pwd)
build=${args[1]:-build-torch-venv}
py=$venv/bin/python
if ! "$py" -c "import torch, pybind11" 2>/dev/null; then
  echo "$0: $py cannot import torch and pybind11 (pip install torch pybind11 numpy)" >&2
  exit 1
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBRAID_REQUIRE_TORCH=ON \
      -DBRAID_TORCH_PYTHON="$py" -DBRAID_TORCH_FROM_PYTHON=ON
cmake --build "$build" -j"${JOBS:-2}" --target braid_torch_C

if [[ $test == 1 ]]; then
  # The tests start their ranks with the interpreter that runs them
  # (tests/torch/harness.py), and test_failures.py launches torchrun with it.
  PATH=$venv/bin:$PATH ctest --test-dir "$build" -R '^torch_' --output-on-failure
fi
