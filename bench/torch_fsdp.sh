#!/usr/bin/env bash
# FullyShardedDataParallel on a GPT with backend "braid" beside "gloo" (torch
# 2.x: torch 1.13's FSDP needs CUDA). One script (bench/torch_backend.py
# fsdp), only the backend name differing, launched by the venv's torchrun
# with two workers on this host (one thread each: torchrun's
# OMP_NUM_THREADS=1 and the script's torch.set_num_threads(1)); FULL_SHARD,
# each transformer block its own unit, AdamW, global batch 16 sequences.
# Per GPT size, REPS runs each, alternating braid-first and gloo-first, and
# the ceiling: the same model and batch per rank without FSDP (each rank
# trains alone, both at once), which no backend's FSDP can pass.
#
# Usage: bench/torch_fsdp.sh VENV [BUILD_DIR]
#   VENV       a venv whose torch is 2.x (scripts/build_torch_venv.sh)
#   BUILD_DIR  where braid_torch was built for it (default build-torch-venv)
#   env: REPS=3, GPTS="4,256,4,128 2,256,4,32" (layers,d_model,heads,seq each),
#        FSDP_STEPS=30
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -ge 1 ]] || { echo "usage: $0 VENV [BUILD_DIR]" >&2; exit 2; }
py=$(cd "$1" && pwd)/bin/python
build=$(cd "${2:-$here/build-torch-venv}" && pwd)
reps=${REPS:-3}
gpts=${GPTS:-"4,256,4,128 2,256,4,32"}
[[ -f $build/python/braid_torch/__init__.py ]] || { echo "no braid_torch in $build/python" >&2; exit 1; }
"$py" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' ||
  { echo "$0: $py's torch is older than 2.x (FSDP on CPU needs 2.x)" >&2; exit 1; }
export PYTHONPATH=$build/python
source "$here/bench/braid_env.sh"  # clean_env: none of the caller's library or thread settings
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run2() {  # GPT MODE BACKEND FILE
  "${clean_env[@]}" FSDP_GPT="$1" "$py" -m torch.distributed.run --standalone --nproc_per_node 2 \
    --monitor_interval 0.2 "$here/bench/torch_backend.py" "$2" "$3" >"$4" 2>"$4.err" ||
    { echo "torchrun $1 $2 $3 failed:" >&2; tail -20 "$4.err" >&2; exit 1; }
}

for g in $gpts; do
  for r in $(seq 1 "$reps"); do
    order="braid gloo"; ((r % 2 == 0)) && order="gloo braid"
    for b in $order; do run2 "$g" fsdp "$b" "$out/${g}_${b}_$r.json"; done
    run2 "$g" fsdp_local gloo "$out/${g}_local_$r.json"
  done
done

"$py" - "$out" "$gpts" "$reps" "$("$py" -c 'import torch; print(torch.__version__)')" <<'PY'
import glob, json, statistics, sys
out, gpts, reps, version = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4]
def last(f):
    return json.loads(open(f).read().strip().splitlines()[-1])
def runs(g, k):
    return sorted(last(f)["tokens_per_s"] for f in glob.glob(f"{out}/{g}_{k}_*.json"))
def losses(g, k):
    return {last(f)["loss"] for f in glob.glob(f"{out}/{g}_{k}_*.json")}
def cell(r):
    return "%.0f [%.0f, %.0f]" % (statistics.median(r), r[0], r[-1])
print("## FSDP (FULL_SHARD) GPT, 2 ranks x 1 thread, torch %s, tokens/s (median of %d; [min, max])\n"
      % (version, reps))
print("| GPT (layers, d_model, heads, seq) | braid | gloo | braid/gloo | no FSDP (ceiling) | ceiling/gloo "
      "| final loss, braid = gloo |")
print("|---|---|---|---|---|---|---|")
for g in gpts:
    b, gl, lo = runs(g, "braid"), runs(g, "gloo"), runs(g, "local")
    mb, mg, ml = statistics.median(b), statistics.median(gl), statistics.median(lo)
    same = losses(g, "braid") == losses(g, "gloo") and len(losses(g, "braid")) == 1
    print("| %s | %s | %s | %.2fx | %s | %.2fx | %s |" % (g, cell(b), cell(gl), mb / mg, cell(lo), ml / mg,
                                                       "yes" if same else "NO: %s vs %s" % (
                                                           losses(g, "braid"), losses(g, "gloo"))))
PY
