#!/usr/bin/env bash
# The simulator and the closed form against braid's own all_reduce here:
# `braid plan --simulate-collective all_reduce --cluster this-machine`
# (one host; ranks beyond the cores take turns; copies and reductions at
# the rates of the memory probe, plan::HostMemory) beside `braid bench
# --op all_reduce --algo A` for the same ranks, algorithm and size. First
# `braid bench -n 2 --probe` into a file of the run's own (the user's
# tuning cache is left alone), so that the simulator prices this moment's
# machine. ROUNDS rounds, each timing every case once; the median is
# printed with the spread. Each size first warms up for WARMUP_S seconds:
# the simulator has the steady state, and a job's first tenths of a second
# here run small calls many times slower (a 2-rank 8-byte all_reduce 4-8
# µs against 0.13-0.4 once warm). Needs a quiet machine.
#   bench/plan_sim_measured.sh [BUILD]
#   ROUNDS=3 RANKS="2 4 8" ALGOS="ring hd" SIZES="1M 4M 16M" ITERS=10 WARMUP_S=0.5
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
braid=$build/braid
source bench/braid_env.sh
rounds=${ROUNDS:-3} iters=${ITERS:-10} warmup_s=${WARMUP_S:-0.5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${clean_env[@]}" "$braid" bench -n 2 --probe --probe-out "$tmp/tuning.json" | grep -E '^(probe|model|memory) shm|^memory'
for r in $(seq "$rounds"); do
  for n in ${RANKS:-2 4 8}; do
    for a in ${ALGOS:-ring hd}; do
      "${clean_env[@]}" "$braid" bench -n "$n" --op all_reduce --algo "$a" -b 1M -e 16M -f 4 \
        --iters "$iters" --warmup-s "$warmup_s" --json --no-check 2>/dev/null | sed "s/^/$n $a /" >>"$tmp/measured"
    done
  done
done
BRAID_TUNING=$tmp/tuning.json python3 - "$braid" "$tmp/measured" "${SIZES:-1M 4M 16M}" <<'PY'
import json, statistics, subprocess, sys
braid, path, sizes = sys.argv[1], sys.argv[2], sys.argv[3].split()
unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
want = {int(s[:-1]) * unit[s[-1]] for s in sizes}
runs = {}
for line in open(path):
    n, a, j = line.split(" ", 2)
    r = json.loads(j)
    if r["bytes"] in want:
        runs.setdefault((int(n), a, r["bytes"]), []).append(r["time_us"] / 1e6)
print("| ranks | algorithm | bytes | measured (median, spread) | simulated | closed form | sim / measured | closed / measured |")
print("|---|---|---|---|---|---|---|---|")
for (n, a, b), ts in sorted(runs.items()):
    s = json.loads(subprocess.check_output([braid, "plan", "--simulate-collective", "all_reduce", "--algo", a,
                                            "--ranks", str(n), "--bytes", str(b), "--cluster", "this-machine",
                                            "--json"]))
    m = statistics.median(ts)
    print(f"| {n} | {a} | {b >> 20} MiB | {m * 1e3:.3f} ms ({min(ts) * 1e3:.3f}-{max(ts) * 1e3:.3f}) | "
          f"{s['simulated_s'] * 1e3:.3f} ms | {s['closed_form_s'] * 1e3:.3f} ms | "
          f"{s['simulated_s'] / m:.2f} | {s['closed_form_s'] / m:.2f} |")
PY
