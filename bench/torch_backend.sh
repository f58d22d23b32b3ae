#!/usr/bin/env bash
# PyTorch with backend "braid" beside "gloo", only the backend name changed:
#   1. DDP on the Fashion-MNIST MLP at dp=2 x 1 thread: samples/s, median of
#      REPS runs, the two backends alternating (odd reps braid first, even
#      gloo first) so that drift favours neither; ratio braid/gloo;
#   2. dist.all_reduce of float32 from Python, 8 B to 64 MiB: latency and
#      busbw per backend, their ratio, and braid's binding overhead over
#      `braid bench` at the same size (same ranks, same machine), each the
#      median of REPS runs, the Python run and `braid bench` alternating.
# Every PyTorch run is launched as a user launches one: torchrun
# (python3 -m torch.distributed.run), two workers on this host. torchrun
# gives each worker OMP_NUM_THREADS=1 when it is unset (torch 1.13's
# run.py), which is what makes Debian's default BLAS (the pthreads OpenBLAS,
# which torch.set_num_threads does not govern) run one thread per rank.
# gloo at its best (/work/shared/RIVALS.md): the OpenMP OpenBLAS on
# LD_LIBRARY_PATH and OMP_NUM_THREADS=1 for its runs alone. braid as a user
# runs it: neither variable from this script, for its PyTorch runs and for
# `braid bench` (which uses ordinary, non-shared buffers by default, as a
# torch tensor is; it runs out of place, the tensor in place).
# Both use /usr/bin/python3, and the script sets torch.set_num_threads(1)
# (the workload is one thread per rank).
# Usage: bench/torch_backend.sh [BUILD_DIR]   env: REPS=3 DDP_STEPS=300
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
reps=${REPS:-3}
py=/usr/bin/python3
[[ -f $build/python/braid_torch/__init__.py ]] || { echo "no braid_torch in $build/python (BRAID_TORCH off?)" >&2; exit 1; }
export PYTHONPATH=$build/python
# tuned BACKEND: the environment a backend's runs get.
clean=(env -u LD_LIBRARY_PATH -u OMP_NUM_THREADS -u OMP_WAIT_POLICY -u OPENBLAS_NUM_THREADS)
tuned() {
  if [[ $1 == gloo ]]; then
    local t=(OMP_NUM_THREADS=1)
    [[ -d /usr/lib/x86_64-linux-gnu/openblas-openmp ]] &&
      t+=(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp)
    echo "${t[@]}"
  fi
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run2 MODE BACKEND FILE: torchrun with two workers; rank 0's lines to FILE.
# torchrun 1.13's agent crashes on Python 3.11 unless --redirects/--tee name
# a rank (9) that does not exist; --monitor_interval only shortens its exit.
run2() {
  "${clean[@]}" $(tuned "$2") $py -m torch.distributed.run --standalone --nproc_per_node 2 \
    --redirects 9:0 --tee 9:0 --monitor_interval 0.2 \
    "$here/bench/torch_backend.py" "$1" "$2" >"$3" 2>"$3.err" ||
    { echo "torchrun $1 $2 failed:" >&2; tail -20 "$3.err" >&2; exit 1; }
}

for r in $(seq 1 "$reps"); do
  order="braid gloo"; ((r % 2 == 0)) && order="gloo braid"
  for b in $order; do run2 ddp "$b" "$out/ddp_${b}_$r.json"; done
done
BRAID_BIN=$build/braid
for r in $(seq 1 "$reps"); do
  for b in braid gloo; do run2 allreduce "$b" "$out/ar_${b}_$r.json"; done
  "${clean[@]}" "$BRAID_BIN" bench -n 2 --op all_reduce --dtype f32 -b 8 -e 64M -f 2 >"$out/braid_bench_$r.txt"
done

$py - "$out" "$reps" <<'PY'
import glob, json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def med(b):
    return statistics.median(json.load(open(f))["samples_per_s"] for f in glob.glob(f"{out}/ddp_{b}_*.json"))
b, g = med("braid"), med("gloo")
print("## DDP Fashion-MNIST MLP, dp=2 x 1 thread (median of %d)\n" % reps)
print("| backend | samples/s |\n|---|---|\n| braid | %.0f |\n| gloo | %.0f |\n| braid/gloo | %.2fx |\n" % (b, g, b / g))
def lines(b):  # {bytes: median us over the runs}
    runs = [{d["bytes"]: d["us"] for d in map(json.loads, open(f))} for f in glob.glob(f"{out}/ar_{b}_*.json")]
    return {n: statistics.median(r[n] for r in runs if n in r) for n in runs[0]}
ab, ag = lines("braid"), lines("gloo")
bench = []
for f in glob.glob(f"{out}/braid_bench_*.txt"):
    rows = {}
    for line in open(f):
        p = line.split()
        if len(p) >= 4 and p[0].isdigit():
            rows[int(p[0])] = float(p[3])  # bytes count type time_us ...
    bench.append(rows)
native = {n: statistics.median(r[n] for r in bench if n in r) for n in bench[0]}
print("## dist.all_reduce, 2 ranks, float32 (median of %d)\n" % reps)
print("| bytes | braid us | gloo us | gloo/braid | braid busbw GB/s | braid bench us | binding overhead |")
print("|---|---|---|---|---|---|---|")
for n in sorted(ab):
    bus = n / (ab[n] * 1e-6) / 1e9  # 2(n-1)/n = 1 at 2 ranks
    nat = native.get(n)
    over = "%+.0f%%" % ((ab[n] / nat - 1) * 100) if nat else "-"
    print("| %d | %.1f | %.1f | %.2fx | %.2f | %s | %s |" % (n, ab[n], ag.get(n, float("nan")),
          ag.get(n, float("nan")) / ab[n], bus, "%.1f" % nat if nat else "-", over))
PY
