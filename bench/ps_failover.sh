#!/usr/bin/env bash
# Parameter-server fail-over time (issue 23; goal <= 2 s).
#
#   bench/ps_failover.sh [BUILD_DIR]      env: REPS (5), MODEL (dlrm), STEPS (40), OUT
#
# braid ps train MODEL with 2 workers and 3 dedicated servers under BSP,
# every shard on a chain of 2 (--replicas 2). --kill-server SIGKILLs server
# 0 (the head of shard 0's chain) or server 1 (its tail) just before worker
# 0 pushes step STEPS/2; the job goes on. Per case, REPS runs, from each
# run's done record (tools/braid/ps_faults.h):
#   failover_s     the server's death (its own CLOCK_REALTIME stamp) to
#                  worker 0's first push acknowledged after it: applied on
#                  every live member of every chain, so re-routed;
#   push_s         that push alone, from its start (worker 0 polls for the
#                  death stamp every 0.2 ms) to its ack; it includes the
#                  push's own transfer, which the no-failure row shows;
#   max_reroute_s  ps::WorkerStats: from worker 0's lost connection to the
#                  re-routed request's reply.
# The row "head+spare" kills server 0 with --spare-servers 1: a spare joins
# shards 0 and 2 by state transfer (tools/braid/ps_spare.h); its done record
# adds
#   rejoin_s       the death's stamp to the spare's last join committed:
#                  every chain back to 2 members;
#   pause_s        per joined shard, how long its tail held the shard's
#                  writes (forwarding lock taken to released: the state
#                  copy and the commit); the table gives the median and the
#                  largest over all joined shards.
# Detection waits on no timeout: the kernel closes the dead process's
# sockets, so the next send or read on them fails at once. A host that
# vanishes without closing them would be detected only at --ps-timeout.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
braid=$build/braid
reps=${REPS:-5}
model=${MODEL:-dlrm}
steps=${STEPS:-40}
out=${OUT:-$(mktemp -d /tmp/braid_ps_failover_XXXXXX)}
mkdir -p "$out"
source "$here/bench/braid_env.sh"  # clean_env: braid as a user runs it
job=("$model" --steps "$steps" --batch 256 --threads 1 --quiet --workers 2 --servers 3
  --replicas 2 --consistency bsp)
at=$((steps / 2))

echo "# $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $model, $steps steps, kill at step $at; logs in $out"
echo
logs=()
for r in $(seq 1 "$reps"); do
  for c in none:"" head:0 tail:1 head+spare:0; do
    name=${c%%:*}
    server=${c#*:}
    kill=()
    [ -n "$server" ] && kill=(--kill-server "$server:$at")
    [ "$name" = head+spare ] && kill+=(--spare-servers 1)
    "${clean_env[@]}" "$braid" ps train "${job[@]}" "${kill[@]}" \
      --json-log "$out/$name.$r.jsonl" >/dev/null 2>"$out/$name.$r.err"
    logs+=("$name=$out/$name.$r.jsonl")
  done
done
python3 - "$at" "${logs[@]}" <<'PY'
import json, statistics, sys
at = int(sys.argv[1])
rows = {}
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    lines = [json.loads(l) for l in open(path) if l.strip()]
    done = lines[-1]
    step = next(l for l in lines if l.get("step") == at)
    r = rows.setdefault(name, {"failover_s": [], "push_s": [], "max_reroute_s": [], "step_s": [],
                               "rejoin_s": [], "pause_s": []})
    # Wall time of the kill step beside its neighbours' (the step records'
    # `time` is cumulative).
    t = {l["step"]: l["time"] for l in lines if "step" in l and "time" in l}
    if at - 1 in t:
        r["step_s"].append(t[at] - t[at - 1])
    for f in done.get("failovers", []):
        r["failover_s"].append(f["failover_s"])
        r["push_s"].append(f["push_s"])
    if done.get("failovers"):
        r["max_reroute_s"].append(done["max_reroute_s"])
    for j in done.get("joins", []):
        if "rejoin_s" in j:
            r["rejoin_s"].append(j["rejoin_s"])
        r["pause_s"] += [s["pause_s"] for s in j.get("shards", [])]
def med(v):
    return f"{1e3 * statistics.median(v):.1f}" if v else "-"
def span(v):
    return f"{1e3 * min(v):.1f}-{1e3 * max(v):.1f}" if v else "-"
def top(v):
    return f"{1e3 * max(v):.1f}" if v else "-"
print("| killed | runs | failover_s median (min-max), ms | push_s median, ms | max_reroute_s median, ms | kill step's wall time median, ms | rejoin_s median (min-max), ms | write pause per joined shard median (max), ms | goal <= 2000 ms |")
print("|---|---|---|---|---|---|---|---|---|")
for name in ("none", "head", "tail", "head+spare"):
    r = rows.get(name)
    if not r:
        continue
    n = len(r["step_s"])
    if name == "none":
        print(f"| {name} | {n} | - | - | - | {med(r['step_s'])} | - | - | - |")
        continue
    goal = "met" if r["failover_s"] and max(r["failover_s"]) <= 2.0 else "NOT met"
    rejoin = f"{med(r['rejoin_s'])} ({span(r['rejoin_s'])})" if r["rejoin_s"] else "-"
    pause = f"{med(r['pause_s'])} ({top(r['pause_s'])})" if r["pause_s"] else "-"
    print(f"| {name} | {n} | {med(r['failover_s'])} ({span(r['failover_s'])}) | {med(r['push_s'])} | "
          f"{med(r['max_reroute_s'])} | {med(r['step_s'])} | {rejoin} | {pause} | {goal} |")
PY
