#!/usr/bin/env bash
# PyTorch with backend "braid" beside "gloo", only the backend name changed:
#   1. DDP on the Fashion-MNIST MLP at dp=2 x 1 thread: samples/s, median of
#      REPS runs, the two backends alternating (odd reps braid first, even
#      gloo first) so that drift favours neither; ratio braid/gloo; batches
#      sliced from the training set (in each of ENVS), and fed by a
#      DataLoader over a DistributedSampler, as a user writes it (`user`);
#   2. dist.all_reduce of float32 from Python, 8 B to 64 MiB: latency and
#      busbw per backend, their ratio, and braid's binding overhead over
#      `braid bench` at the same size (same ranks, same machine), each the
#      median of REPS runs, the Python run and `braid bench` alternating.
# Every PyTorch run is launched as a user launches one: torchrun
# (python3 -m torch.distributed.run), two workers on this host. torchrun
# gives each worker OMP_NUM_THREADS=1 when it is unset (torch 1.13's
# run.py), which is what makes Debian's default BLAS (the pthreads OpenBLAS,
# which torch.set_num_threads does not govern) run one thread per rank.
# braid's runs are taken as a user runs them, with none of the caller's
# library or thread settings (bench/braid_env.sh's clean_env). gloo's DDP
# runs are taken in each of ENVS:
#   user    the same: what a user of Debian's PyTorch gets (the pthreads
#           OpenBLAS, one thread per rank from torchrun);
#   openmp  PyTorch at its best (/work/shared/RIVALS.md): the OpenMP build of
#           OpenBLAS on LD_LIBRARY_PATH and OMP_NUM_THREADS=1.
# Each row sets braid's `user` runs beside gloo's runs in that row's ENV.
# The all_reduce runs and `braid bench` (ordinary, non-shared buffers by
# default, as a torch tensor is; out of place, the tensor in place) are taken
# in `user` (no BLAS runs there).
# Both use /usr/bin/python3, and the script sets torch.set_num_threads(1)
# (the workload is one thread per rank).
# Usage: bench/torch_backend.sh [BUILD_DIR]   env: REPS=3 DDP_STEPS=300
#   PY=VENV/bin/python  another python with torch (default /usr/bin/python3,
#                       Debian's torch 1.13); BUILD_DIR then holds braid_torch
#                       built for it (scripts/build_torch_venv.sh)
#   PARTS="ddp allreduce"  which parts run
#   BRAID_BIN           the braid tool for `braid bench` (default BUILD_DIR/braid,
#                       else build/braid)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
reps=${REPS:-3}
py=${PY:-/usr/bin/python3}
parts=${PARTS:-"ddp allreduce"}
[[ -f $build/python/braid_torch/__init__.py ]] || { echo "no braid_torch in $build/python (BRAID_TORCH off?)" >&2; exit 1; }
export PYTHONPATH=$build/python
envs=${ENVS:-"user openmp"}
# Every run starts from clean_env: none of the caller's thread or library settings.
source "$here/bench/braid_env.sh"
# settings ENV: the variables gloo's runs in ENV get.
settings() {
  if [[ $1 == openmp ]]; then
    local t=(OMP_NUM_THREADS=1)
    [[ -d /usr/lib/x86_64-linux-gnu/openblas-openmp ]] &&
      t+=(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp)
    echo "${t[@]}"
  fi
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run2 ENV MODE BACKEND FILE: torchrun with two workers; rank 0's lines to
# FILE. torchrun 1.13's agent crashes on Python 3.11 unless --redirects/--tee
# name a rank (9) that does not exist; --monitor_interval only shortens its exit.
run2() {
  [[ $3 == braid && $1 != user ]] && { echo "run2: braid runs as a user runs it (ENV user)" >&2; exit 2; }
  "${clean_env[@]}" $(settings "$1") $py -m torch.distributed.run --standalone --nproc_per_node 2 \
    --redirects 9:0 --tee 9:0 --monitor_interval 0.2 \
    "$here/bench/torch_backend.py" "$2" "$3" >"$4" 2>"$4.err" ||
    { echo "torchrun $1 $2 $3 failed:" >&2; tail -20 "$4.err" >&2; exit 1; }
}

# The DDP cases: ENV:MODE (ddp: batches sliced from the training set;
# ddp_loader: a DataLoader over a DistributedSampler, as users write it).
cases=""
if [[ " $parts " == *" ddp "* ]]; then
  for e in $envs; do cases+=" $e:ddp"; done
  cases+=" user:ddp_loader"
fi
for r in $(seq 1 "$reps"); do
  [[ -n $cases ]] || break
  order="braid gloo"; ((r % 2 == 0)) && order="gloo braid"
  for c in $cases; do
    for b in $order; do
      [[ $b == braid && ${c%%:*} != user ]] && continue  # braid's row figure is its `user` run
      run2 "${c%%:*}" "${c#*:}" "$b" "$out/ddp_${c%%:*}_${c#*:}_${b}_$r.json"
    done
  done
  # Ceilings: the same loop, both ranks at once, without DDP, and under DDP
  # with buckets handed back unreduced (no communication at all).
  run2 user local gloo "$out/local_$r.json"
  run2 user ddp_nocomm braid "$out/nocomm_$r.json"
done
BRAID_BIN=${BRAID_BIN:-$build/braid}
[[ -x $BRAID_BIN ]] || BRAID_BIN=$here/build/braid
for r in $(seq 1 "$reps"); do
  [[ " $parts " == *" allreduce "* ]] || break
  for b in braid gloo; do run2 user allreduce "$b" "$out/ar_${b}_$r.json"; done
  "${clean_env[@]}" "$BRAID_BIN" bench -n 2 --op all_reduce --dtype f32 -b 8 -e 64M -f 2 >"$out/braid_bench_$r.txt"
done

$py - "$out" "$reps" "$cases" <<'PY'
import glob, json, statistics, sys
out, reps, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def runs(c, b):
    e, m = c.split(":")
    if b == "braid":
        e = "user"  # braid runs as a user runs it in every row
    return sorted(json.load(open(f))["samples_per_s"] for f in glob.glob(f"{out}/ddp_{e}_{m}_{b}_*.json"))
feed = {"ddp": "sliced batches", "ddp_loader": "DataLoader + DistributedSampler"}
import torch
print("torch %s, %s\n" % (torch.__version__, sys.executable))
if cases:
    print("## DDP Fashion-MNIST MLP, dp=2 x 1 thread, samples/s (median of %d; [min, max])\n" % reps)
    print("| gloo's environment (braid's: `user`) | batches | braid | gloo | braid/gloo |\n|---|---|---|---|---|")
for c in cases:
    rb, rg = runs(c, "braid"), runs(c, "gloo")
    b, g = statistics.median(rb), statistics.median(rg)
    e, m = c.split(":")
    print("| %s | %s | %.0f [%.0f, %.0f] | %.0f [%.0f, %.0f] | %.2fx |" %
          (e, feed[m], b, rb[0], rb[-1], g, rg[0], rg[-1], b / g))
def med(pattern):
    r = sorted(json.load(open(f))["samples_per_s"] for f in glob.glob(f"{out}/{pattern}_*.json"))
    return statistics.median(r), r[0], r[-1]
if "user:ddp" in cases:
    rb, rg = statistics.median(runs("user:ddp", "braid")), statistics.median(runs("user:ddp", "gloo"))
    print("\nCeilings (`user`, sliced batches, both ranks at once), samples/s, median [min, max]:\n")
    print("| run | samples/s | braid's DDP / it | gloo's DDP / it | it / gloo's DDP |\n|---|---|---|---|---|")
    for name, pat in (("no DDP: each rank trains alone", "local"),
                      ("DDP, buckets handed back unreduced (no communication)", "nocomm")):
        m, lo, hi = med(pat)
        print("| %s | %.0f [%.0f, %.0f] | %.2f | %.2f | %.2fx |" % (name, m, lo, hi, rb / m, rg / m, m / rg))
print()
if not glob.glob(f"{out}/ar_braid_*.json"):
    sys.exit(0)
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
