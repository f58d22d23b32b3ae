#!/usr/bin/env bash
# Installs braid_torch with pip into a Python virtual environment, as a
# PyTorch user would, and checks it from outside the source tree: the wheel
# is built against that environment's torch (python/pyproject.toml), then a
# two-rank torchrun job of that environment runs dist.all_reduce with
# backend "braid", with no PYTHONPATH and from a directory that is not the
# repository.
#
# Usage: scripts/check_pip_install.sh VENV
#   VENV  created when missing: `python3 -m venv --system-site-packages VENV`
#         (Debian's torch 1.13 then comes from the system); an existing venv
#         keeps its own torch (e.g. torch 2.x from PyPI).
# scikit-build-core and pybind11 come from PyPI (pip install) into VENV.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 1 ]] || { echo "usage: $0 VENV" >&2; exit 2; }
venv=$1
[[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv --system-site-packages "$venv"
py=$(cd "$venv" && pwd)/bin/python
"$py" -c "import torch" || { echo "$0: $py cannot import torch" >&2; exit 1; }
"$py" -m pip install --quiet "scikit-build-core>=0.10" pybind11
"$py" -m pip install --no-build-isolation ./python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/check.py" <<'PY'
import os, torch, torch.distributed as dist
import braid_torch
dist.init_process_group("braid")
t = torch.full((1 << 20,), float(dist.get_rank() + 1))
dist.all_reduce(t)
assert dist.get_backend() == "braid" and t[123].item() == 3.0, t[123]
if dist.get_rank() == 0:
    print("braid_torch from %s, torch %s: all_reduce ok" % (os.path.dirname(braid_torch.__file__), torch.__version__))
dist.destroy_process_group()
PY
cd "$work"
env -u PYTHONPATH "$py" -m torch.distributed.run --standalone --nproc_per_node 2 \
  --redirects 9:0 --tee 9:0 check.py
