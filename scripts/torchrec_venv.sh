#!/usr/bin/env bash
# Makes a Python virtual environment with TorchRec on CPU, for the TorchRec
# side of bench/dlrm_hybrid.sh (bench/torchrec_dlrm.py). Not part of
# `make test` or scripts/deps.sh: it downloads about 5 GB from PyPI (the
# PyPI torch wheel is the CUDA build and pulls NVIDIA's libraries, which
# load on a machine without a GPU).
#
# Usage: scripts/torchrec_venv.sh VENV      (then PY=VENV/bin/python bench/dlrm_hybrid.sh)
#
# The versions go together: fbgemm-gpu-cpu 1.9 is built against torch 2.14
# (fbgemm_gpu/__init__.py's compatibility table), and torchrec 1.9.2 is the
# release for fbgemm 1.9. torchrec's metadata asks for fbgemm-gpu (the CUDA
# build, which would replace the CPU one's files), so torchrec goes in
# without dependencies and its other requirements are named here; pip then
# prints that "torchrec 1.9.2 requires fbgemm-gpu, which is not installed",
# which is expected (fbgemm-gpu-cpu provides the same fbgemm_gpu module).
# Idempotent: a venv that already imports the pinned versions is left as it
# is; either way the versions present are printed.
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 VENV" >&2
  exit 2
fi
venv=$1
torch_v=2.14.1 fbgemm_v=1.9.0 torchrec_v=1.9.2
python=${PYTHON:-/usr/bin/python3}

[[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
py=$venv/bin/python
have() {  # the pinned versions import together
  "$py" - "$torch_v" "$fbgemm_v" "$torchrec_v" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
import torch, fbgemm_gpu, torchrec  # noqa: F401
want = dict(zip(["torch", "fbgemm-gpu-cpu", "torchrec"], sys.argv[1:]))
sys.exit(any(not version(p).startswith(v) for p, v in want.items()))
PY
}
if have; then
  echo "$venv: torch, fbgemm-gpu-cpu and torchrec already import; nothing installed"
else
  pip=("$py" -m pip install --disable-pip-version-check)
  "${pip[@]}" "torch==$torch_v" "fbgemm-gpu-cpu==$fbgemm_v"
  "${pip[@]}" --no-deps "torchrec==$torchrec_v"
  # torchrec's own requirements less fbgemm-gpu; torch stays as pinned.
  "${pip[@]}" "torch==$torch_v" tensordict "torchmetrics==1.0.3" tqdm pyre-extensions
  have || { echo "$0: torch, fbgemm_gpu and torchrec still do not import in $py" >&2; exit 1; }
fi
"$py" - <<'PY'
from importlib.metadata import version
for p in ["torch", "fbgemm-gpu-cpu", "torchrec", "tensordict", "torchmetrics", "numpy"]:
    print("%s %s" % (p, version(p)))
PY
