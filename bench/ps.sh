#!/usr/bin/env bash
# Parameter-server benchmark (issue 23).
#
#   bench/ps.sh [BUILD_DIR]      env: ITERS, KEYS, STEPS, SAMPLES, BATCH, EPS, OUT, COLOCATED, REPS
#
# (a) push_pull throughput, 2 servers x 2 workers (braid ps bench):
#     dense 4 MiB keys in GB/s per worker, over shared memory (the
#     default on one host) and over TCP (--ps-shm-bytes 0), beside braid
#     bench's 2-rank all_reduce of the same bytes (algbw); sparse 64-byte
#     rows in keys/s per server (goal >= 1M), KEYS rows per push_pull.
# (b) time to a target log loss (floor + EPS, EPS default 0.03) on the DLRM
#     workload with worker 1 slowed 2x: braid ps train dlrm under BSP, ASP,
#     SSP s=2 and s=4, k-of-n (k = n-1 = 2 of 3 workers), 3 workers and 2
#     servers, dedicated and (unless COLOCATED=0) co-located in workers 0
#     and 1 (rows MODE-colo), and all-reduce data parallel (braid train
#     dlrm --dp 3), from the JSON logs (bench/ps_time_to_target.py), with
#     worker 0's median step split into compute and exchange; the plot goes
#     to OUT/ps_time_to_target.svg (OUT default: a temporary directory, kept).
#     braid train --dp has no straggler flag: its row is without one.
#     SGD momentum 0.9 (the default): data parallel's dense table gradients
#     decay every row's momentum each step, the servers' sparse updates
#     only the touched rows' (tests/ps/ps_dlrm_test.cc compares the two
#     with momentum 0, where they are the same training).
# (c) hot keys: the DLRM workload (3 servers x 2 workers, BSP) without and
#     with --hot-keys, HOT_STEPS steps (default 200), hot sets refreshed
#     every 10 steps: each server's load in the window after the first
#     refresh (the done record's "load"), rows served as owner and from
#     replicas, requests/s and bytes/s, as a table.
# The defaults are the measured setting; STEPS=60 SAMPLES=16384 ITERS=5
# HOT_STEPS=40 REPS=1 runs the whole script in well under a minute to check it end to end.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
braid=$build/braid
iters=${ITERS:-50}
keys=${KEYS:-4096}
eps=${EPS:-0.03}
out=${OUT:-$(mktemp -d /tmp/braid_ps_XXXXXX)}
mkdir -p "$out"
source "$here/bench/braid_env.sh"  # clean_env: braid as a user runs it

echo "# $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); logs in $out"
echo
echo "## (a) push_pull, 2 servers x 2 workers"
echo
dense=$("${clean_env[@]}" "$braid" ps bench --mode dense --bytes 4194304 --iters "$iters" --json)
dense_tcp=$("${clean_env[@]}" "$braid" ps bench --mode dense --bytes 4194304 --iters "$iters" \
  --ps-shm-bytes 0 --json)
sparse=$("${clean_env[@]}" "$braid" ps bench --mode sparse --row-bytes 64 --keys "$keys" \
  --iters "$iters" --json)
ar=$("${clean_env[@]}" "$braid" bench -n 2 --op all_reduce -b 4M -e 4M --iters "$iters" --json |
  grep '"algbw' | tail -1)
python3 - "$dense" "$sparse" "$ar" "$dense_tcp" <<'PY'
import json, sys
d, s, a, dt = (json.loads(x) for x in sys.argv[1:5])
abw = next(a[k] for k in ("algbw_gbs", "algbw", "algbw_GBps") if k in a)
print("| what | bytes | time (us) | GB/s |")
print("|---|---|---|---|")
link = "shared memory" if d.get("shm_links") else "TCP"
print(f"| ps push_pull dense (per worker), {link} | {d['bytes']} | {d['time_us']:.0f} | {d['algbw_gbs']:.3f} |")
print(f"| ps push_pull dense (per worker), TCP | {dt['bytes']} | {dt['time_us']:.0f} | {dt['algbw_gbs']:.3f} |")
t = next((a[k] for k in ("time_us", "time") if k in a), float("nan"))
print(f"| braid all_reduce, 2 ranks | {d['bytes']} | {t:.0f} | {abw:.3f} |")
print()
print("| what | row bytes | keys per push_pull | keys/s per server | goal |")
print("|---|---|---|---|---|")
print(f"| ps push_pull sparse | {s['row_bytes']} | {s['keys']} | {s['keys_per_s_per_server']:.3g} | >= 1M |")
PY

echo
echo "## (b) DLRM time to target, worker 1 slowed 2x"
echo
# BATCH (default 256) is the global batch: a larger one gives each step
# more compute beside the same number of exchanges (see PERFORMANCE.md §7).
data=(dlrm --batch "${BATCH:-256}" --threads 1 --quiet)
[ -n "${STEPS:-}" ] && data+=(--steps "$STEPS")
[ -n "${SAMPLES:-}" ] && data+=(--samples "$SAMPLES")
ps=("${data[@]}" --servers 2 --workers 3 --slow-worker 1:2)
logs=()
run_ps() {  # NAME ARGS...: one braid ps train dlrm run (repetition $rep)
  local name=$1
  shift
  "${clean_env[@]}" "$braid" ps train "${ps[@]}" "$@" --json-log "$out/$name.$rep.jsonl" >/dev/null
  logs+=("$name=$out/$name.$rep.jsonl")
}
modes() {  # SUFFIX ARGS...: every consistency mode, each row named MODE+SUFFIX
  local sfx=$1
  shift
  run_ps "bsp$sfx" --consistency bsp "$@"
  run_ps "asp$sfx" --consistency asp "$@"
  run_ps "ssp2$sfx" --consistency ssp --staleness 2 "$@"
  run_ps "ssp4$sfx" --consistency ssp --staleness 4 "$@"
  run_ps "kofn$sfx" --consistency kofn --round-k 2 "$@"
}
# REPS rounds (default 3), every mode once per round, so that the machine's
# drift spreads over all of them; the table gives medians.
for rep in $(seq "${REPS:-3}"); do
  modes ""
  # Co-located: servers 0 and 1 run inside workers 0 and 1 (3 processes, not
  # 5, on this machine's cores); rows named MODE-colo, compared with bsp-colo.
  [ "${COLOCATED:-1}" = 1 ] && modes -colo --placement colocated
  "${clean_env[@]}" "$braid" train "${data[@]}" --dp 3 --json-log "$out/dp.$rep.jsonl" >/dev/null
  logs+=("dp=$out/dp.$rep.jsonl")
done
python3 "$here/bench/ps_time_to_target.py" "$eps" "$out/ps_time_to_target.svg" "${logs[@]}"

echo
echo "## (c) hot keys: per-server load after the first refresh, without and with --hot-keys"
echo
hot=(dlrm --batch 256 --threads 1 --quiet --servers 3 --workers 2 --consistency bsp
  --steps "${HOT_STEPS:-200}" --hot-every 10)
[ -n "${SAMPLES:-}" ] && hot+=(--samples "$SAMPLES")
"${clean_env[@]}" "$braid" ps train "${hot[@]}" --json-log "$out/hot_off.jsonl" >/dev/null
"${clean_env[@]}" "$braid" ps train "${hot[@]}" --hot-keys --json-log "$out/hot_on.jsonl" >/dev/null
python3 - "$out/hot_off.jsonl" "$out/hot_on.jsonl" <<'PY'
import json, sys
done = [json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3]]
print(f"window: steps {done[0]['load']['split_step']}..{done[0]['steps'] - 1}; "
      f"hot rows per server {done[1]['server_hot_rows']}")
print()
print("| server | hot keys | rows served as owner | rows served from replicas | requests/s | MB/s |")
print("|---|---|---|---|---|---|")
for s in range(len(done[0]["server_requests"])):
    for name, d in zip(("off", "on"), done):
        w = d["load"]["after"]
        print(f"| {s} | {name} | {w['pulls_owner'][s]} | {w['pulls_replica'][s]} | "
              f"{w['requests_per_s'][s]:.0f} | {w['bytes_per_s'][s] / 1e6:.1f} |")
PY
