#!/usr/bin/env bash
# DLRM with sharded tables (issue 36): braid train dlrm --embeddings sharded
# (tables model parallel, MLPs data parallel) beside the parameter server's
# best placement and replicated-table data parallelism, all at 2 ranks.
#
#   bench/dlrm_hybrid.sh [BUILD_DIR]   env: STEPS, ROWS, DIM, FEATURES, BATCH, REPS, BIG, OUT,
#                                           PY, TORCHREC_PIPELINES, TORCHREC_SHARDS
#
# (a) samples/s on a model both fit (FEATURES tables of ROWS x DIM, default
#     8 x 100000 x 32 = 98 MiB, global batch BATCH = 2048, STEPS = 100):
#       hybrid      braid train dlrm --dp 2 --embeddings sharded --shard auto
#                   --table-optimizer sgd (row-wise SGD on touched rows)
#       replicated  braid train dlrm --dp 2 (every table on both ranks,
#                   dense table gradients all-reduced)
#       ps          braid ps train dlrm --workers 2 with 1 or 2 servers,
#                   dedicated or co-located in the workers, BSP: the best
#     All with SGD at momentum 0 and no weight decay, where the three are
#     the same training (dense SGD leaves an untouched row as it is, as the
#     row-wise one does): the first three losses of every run must agree
#     with the hybrid's (bench/same_losses.py, relative 1e-4), else the
#     script fails.
#       torchrec    TorchRec's DistributedModelParallel on CPU over gloo at
#                   2 ranks, one thread each (bench/torchrec_dlrm.py), when
#                   PY (default /usr/bin/python3) imports torchrec and
#                   fbgemm_gpu (scripts/torchrec_venv.sh VENV makes such a
#                   Python; then PY=VENV/bin/python); else a line says why
#                   not. The same model, initial weights (braid train dlrm
#                   --save-init), samples and batches (braid data click, the
#                   same data flags), sharding (the kinds the hybrid's plan
#                   chose, placed by its rule) and SGD; its first losses
#                   must agree with the hybrid's like the others'. TorchRec
#                   at its best: FBGEMM's fused kernel with SGD in backward
#                   (its dense kernel and a separate optimizer step were 4-5x
#                   slower here); each pipeline of TORCHREC_PIPELINES
#                   (default "none sparse-dist": plain steps, and
#                   TrainPipelineSparseDist, which overlaps the next batch's
#                   input exchange) is run and the faster median counts.
#                   TORCHREC_SHARDS (default auto; any of auto table row
#                   column) adds, for each other than auto, braid's hybrid
#                   with --shard SHARD and TorchRec with the same sharding.
#     medians over REPS rounds (default 3), and the ratios hybrid / ps
#     (goal >= 1.3), hybrid / replicated (goal >= 1) and hybrid / torchrec
#     (goal >= 1.5, beside both test log losses). Beside them, each
#     run's CPU seconds (user + system of all its processes, setup and
#     data generation included, /usr/bin/time): on a busy machine a run of
#     more processes gets more of the cores, which samples/s rewards and
#     CPU seconds do not.
# (b) BIG=1 (default; BIG=0 skips): 8 tables x 2M rows x 64 (3.8 GiB,
#     more than half this machine's memory per rank if replicated on 2
#     ranks beside the rest) trained sharded over 2 ranks for a few steps:
#     each rank's table bytes against an even share, and its peak RSS.
# The machine's load is printed first: a busy machine's figures are noisy.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
braid=$build/braid
out=${OUT:-$(mktemp -d /tmp/braid_dlrm_hybrid_XXXXXX)}
mkdir -p "$out"
# shellcheck source=bench/braid_env.sh
. "$here/bench/braid_env.sh"
timed() {  # NAME ARGS...: runs ARGS with its CPU seconds written to $out/NAME.time
  local name=$1
  shift
  /usr/bin/time -f "%U %S" -o "$out/$name.time" "$@"
}
steps=${STEPS:-100}
data=(--features "${FEATURES:-8}" --rows "${ROWS:-100000}" --samples 262144 --test-samples 4096)
model=(dlrm "${data[@]}" --dim "${DIM:-32}" --batch "${BATCH:-2048}" --steps "$steps" --threads 1
  --momentum 0 --quiet)

echo "# $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); logs in $out"
echo
echo "## (a) samples/s at 2 ranks: ${model[*]}"
echo
logs=()
for rep in $(seq "${REPS:-3}"); do
  timed "hybrid.$rep" "${clean_env[@]}" "$braid" train "${model[@]}" --dp 2 --embeddings sharded --shard auto \
    --table-optimizer sgd --json-log "$out/hybrid.$rep.jsonl" >/dev/null 2>&1
  logs+=("hybrid=$out/hybrid.$rep.jsonl")
  timed "replicated.$rep" "${clean_env[@]}" "$braid" train "${model[@]}" --dp 2 --json-log "$out/replicated.$rep.jsonl" \
    >/dev/null
  logs+=("replicated=$out/replicated.$rep.jsonl")
  for servers in 1 2; do
    for placement in dedicated colocated; do
      name=ps-$servers-$placement
      timed "$name.$rep" "${clean_env[@]}" "$braid" ps train "${model[@]}" --workers 2 --servers "$servers" \
        --placement "$placement" --consistency bsp --json-log "$out/$name.$rep.jsonl" >/dev/null
      logs+=("$name=$out/$name.$rep.jsonl")
    done
  done
done

# The same numbers: every run's first losses against the hybrid's.
for entry in "${logs[@]}"; do
  name=${entry%%=*}
  [ "$name" = hybrid ] && continue
  python3 "$here/bench/same_losses.py" "${entry#*=}" "$out/hybrid.1.jsonl" --what "$name" >/dev/null
done

# TorchRec: the same training in DistributedModelParallel, when PY has it.
py=${PY:-/usr/bin/python3}
torchrec_note=""
if "$py" -c "import torchrec, fbgemm_gpu" 2>/dev/null; then
  "$braid" data click "${data[@]}" --quiet --out "$out/click.ckpt"
  "$braid" train dlrm "${data[@]}" --dim "${DIM:-32}" --steps 1 --threads 1 --quiet \
    --save-init "$out/init.ckpt" >/dev/null
  for shard in ${TORCHREC_SHARDS:-auto}; do
    ref=hybrid  # the braid run TorchRec's copies
    if [ "$shard" != auto ]; then
      ref=hybrid-$shard
      for rep in $(seq "${REPS:-3}"); do
        timed "$ref.$rep" "${clean_env[@]}" "$braid" train "${model[@]}" --dp 2 --embeddings sharded \
          --shard "$shard" --table-optimizer sgd --json-log "$out/$ref.$rep.jsonl" >/dev/null 2>&1
        logs+=("$ref=$out/$ref.$rep.jsonl")
      done
    fi
    plan=$(done_field "$out/$ref.1.jsonl" plan | python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)))')
    for rep in $(seq "${REPS:-3}"); do
      for pipeline in ${TORCHREC_PIPELINES:-none sparse-dist}; do
        name=torchrec-$shard-$pipeline
        timed "$name.$rep" "$py" "$here/bench/torchrec_dlrm.py" --data "$out/click.ckpt" \
          --init "$out/init.ckpt" --shard auto --plan "$plan" --world 2 --batch "${BATCH:-2048}" \
          --steps "$steps" --dim "${DIM:-32}" --lr 0.1 --seed 1 --kernel fused --pipeline "$pipeline" \
          --json-log "$out/$name.$rep.jsonl" >/dev/null 2>"$out/$name.$rep.err"
        python3 "$here/bench/same_losses.py" "$out/$ref.1.jsonl" "$out/$name.$rep.jsonl" \
          --what "$name" >/dev/null
        logs+=("$name=$out/$name.$rep.jsonl")
      done
    done
  done
  torchrec_note="$("$py" -c 'import torch, torchrec; from importlib.metadata import version as v
print("torch %s, torchrec %s, fbgemm-gpu-cpu %s" % (torch.__version__, v("torchrec"), v("fbgemm-gpu-cpu")))')"
else
  why=$("$py" -c 'import torch; print("torch", torch.__version__); import torchrec, fbgemm_gpu' 2>&1 |
    tr '\n' ' ' || true)
  torchrec_note="torchrec / fbgemm-gpu-cpu do not import in $py ($why): not run"
fi

python3 - "$torchrec_note" "${logs[@]}" <<'PY'
import json, statistics, sys
note, runs = sys.argv[1], {}
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    done = json.loads(open(path).read().splitlines()[-1])
    runs.setdefault(name, []).append(done)
med = {k: statistics.median(d["samples_per_s"] for d in v) for k, v in runs.items()}
cpu = {}
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    u, s = open(path[: -len(".jsonl")] + ".time").read().split()[-2:]
    cpu.setdefault(name, []).append(float(u) + float(s))
cpu = {k: statistics.median(v) for k, v in cpu.items()}
ps = {k: v for k, v in med.items() if k.startswith("ps-")}
best_ps = max(ps, key=ps.get)
print("| run | samples/s (median) | CPU s (median) | test log loss | table bytes on the largest rank |")
print("|---|---|---|---|---|")
# TorchRec's runs by sharding ("torchrec-SHARD-PIPELINE"), each beside the
# hybrid it copies ("hybrid" for auto, else "hybrid-SHARD"); the best
# pipeline of each counts.
tr = {}
for k in med:
    if k.startswith("torchrec-"):
        tr.setdefault(k.split("-")[1], []).append(k)
best_tr = {shard: max(ks, key=med.get) for shard, ks in tr.items()}
other_hybrids = sorted(k for k in med if k.startswith("hybrid-"))
for k in ["hybrid", "replicated"] + sorted(ps) + other_hybrids + sorted(sum(tr.values(), [])):
    d = runs[k][0]
    per = d.get("table_bytes_per_rank")
    tb = f"{max(per) / 2**20:.1f} MiB of {d['table_bytes_total'] / 2**20:.1f}" if per else "all"
    if k.startswith("torchrec-"):
        tb = "as braid's " + ("hybrid" if k.split("-")[1] == "auto" else "hybrid-" + k.split("-")[1])
    best = " (best ps)" if k == best_ps else " (best)" if k in best_tr.values() and len(tr[k.split("-")[1]]) > 1 else ""
    print(f"| {k}{best} | {med[k]:.0f} | {cpu[k]:.2f} | {d.get('test_log_loss', float('nan')):.4f} | {tb} |")
print()
print(f"hybrid / best ps ({best_ps}): {med['hybrid'] / med[best_ps]:.2f}x (goal >= 1.3)")
print(f"hybrid / replicated dp:      {med['hybrid'] / med['replicated']:.2f}x (goal >= 1)")
print(f"CPU seconds, best ps / hybrid: {cpu[best_ps] / cpu['hybrid']:.2f}x; replicated / hybrid: {cpu['replicated'] / cpu['hybrid']:.2f}x")
loss = lambda k: statistics.median(d["test_log_loss"] for d in runs[k])
for shard, t in best_tr.items():
    ref = "hybrid" if shard == "auto" else "hybrid-" + shard
    print(f"{ref} / torchrec ({t}): {med[ref] / med[t]:.2f}x (goal >= 1.5); test log loss "
          f"{loss(ref):.5f} braid, {loss(t):.5f} torchrec; CPU seconds torchrec / braid "
          f"{cpu[t] / cpu[ref]:.2f}x")
print(f"torchrec: {note}")
PY

if [ "${BIG:-1}" = 1 ]; then
  echo
  echo "## (b) 8 tables x 2M rows x 64 sharded over 2 ranks"
  echo
  "${clean_env[@]}" "$braid" train dlrm --features 8 --rows 2000000 --dim 64 --batch 512 \
    --steps "${BIG_STEPS:-10}" --samples 65536 --test-samples 2048 --threads 1 --quiet --dp 2 \
    --embeddings sharded --shard auto --table-optimizer adagrad --json-log "$out/big.jsonl"
  python3 - "$out/big.jsonl" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
tot, per = d["table_bytes_total"], d["table_bytes_per_rank"]
print(f"tables and row state {tot / 2**30:.2f} GiB; per rank "
      + ", ".join(f"{b / 2**30:.2f} GiB" for b in per)
      + f"; largest / even share {max(per) * len(per) / tot:.3f} (goal <= 1.05)")
print(f"peak RSS of rank 0: {d['peak_rss_bytes'] / 2**30:.2f} GiB; {d['samples_per_s']:.0f} samples/s; final loss {d['final_loss']:.4f}")
PY
fi
