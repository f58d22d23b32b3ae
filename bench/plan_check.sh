#!/usr/bin/env bash
# The planner against braid itself on this machine, layout by layout:
# `braid plan`'s step_s and memory_bytes_per_device on `this-machine`
# beside what `braid train` measures for the same model, batch and layout
# (step = the batch's tokens / the done record's tokens/s; memory = rank
# 0's peak tensor storage, the done record's peak_tensor_bytes). One
# thread a rank, as this-machine counts a device (one core). Memory does
# not depend on load; step times need a quiet machine. First `braid bench
# -n 2 --probe` into a tuning file of the run's own (the user's cache is
# left alone), which the runs and the planner then share: the planner
# prices this moment's machine (its GEMM curve and element-wise rates; the
# machine's speed moves 10-20% over a day).
#   bench/plan_check.sh [BUILD]
#   STEPS=25 ROUNDS=2  LAYERS=4 D_MODEL=256 HEADS=4 CONTEXT=128 BATCH=16
#   WORLDS="1 2 4 8" (the world sizes whose layouts run)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
braid=$build/braid
source bench/braid_env.sh
steps=${STEPS:-25}
L=${LAYERS:-4} H=${D_MODEL:-256} A=${HEADS:-4} T=${CONTEXT:-128} batch=${BATCH:-16}
model="gpt:layers=$L,hidden=$H,heads=$A,seq=$T,vocab=256"
shape=(--layers "$L" --d-model "$H" --heads "$A" --context "$T")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${clean_env[@]}" "$braid" bench -n 2 --probe --probe-out "$tmp/tuning.json" | grep -E '^(gemm|element-wise)' >&2
export BRAID_TUNING=$tmp/tuning.json
half=$((batch / 2)) quarter=$((batch / 4)) eighth=$((batch / 8))
# name | ranks | braid train flags | braid plan flags
layouts=(
  "1 rank|1||--tp 1 --pp 1 --dp 1 --mbs $batch --zero 0 --recompute none"
  "1 rank, recompute|1|--recompute|--tp 1 --pp 1 --dp 1 --mbs $batch --zero 0 --recompute full"
  "dp 2|2|--dp 2|--tp 1 --pp 1 --dp 2 --mbs $half --zero 0 --recompute none"
  "dp 2, ZeRO-1|2|--dp 2 --zero 1|--tp 1 --pp 1 --dp 2 --mbs $half --zero 1 --recompute none"
  "dp 2, ZeRO-2|2|--dp 2 --zero 2|--tp 1 --pp 1 --dp 2 --mbs $half --zero 2 --recompute none"
  "dp 2, ZeRO-3|2|--dp 2 --zero 3|--tp 1 --pp 1 --dp 2 --mbs $half --zero 3 --recompute none"
  "tp 2|2|--tp 2|--tp 2 --pp 1 --dp 1 --mbs $batch --zero 0 --recompute none --no-sequence-parallel"
  "tp 2, recompute|2|--tp 2 --recompute|--tp 2 --pp 1 --dp 1 --mbs $batch --zero 0 --recompute full --no-sequence-parallel"
  "tp 2, sp|2|--tp 2 --sequence-parallel|--tp 2 --pp 1 --dp 1 --mbs $batch --zero 0 --recompute none --sequence-parallel"
  "pp 2, 1f1b, 4 micro-batches|2|--pp 2 --micro-batches 4|--tp 1 --pp 2 --dp 1 --mbs $quarter --schedule 1f1b --zero 0 --recompute none"
  "pp 2, gpipe, 4 micro-batches|2|--pp 2 --micro-batches 4 --schedule gpipe|--tp 1 --pp 2 --dp 1 --mbs $quarter --schedule gpipe --zero 0 --recompute none"
  # More ranks than the cores: they take turns (this-machine counts it).
  "dp 4|4|--dp 4|--tp 1 --pp 1 --dp 4 --mbs $quarter --zero 0 --recompute none"
  "dp 4, ZeRO-3|4|--dp 4 --zero 3|--tp 1 --pp 1 --dp 4 --mbs $quarter --zero 3 --recompute none"
  "tp 2 x dp 2|4|--tp 2 --dp 2|--tp 2 --pp 1 --dp 2 --mbs $half --zero 0 --recompute none --no-sequence-parallel"
  "pp 2 x dp 2, 2 micro-batches|4|--pp 2 --dp 2 --micro-batches 2|--tp 1 --pp 2 --dp 2 --mbs $quarter --schedule 1f1b --zero 0 --recompute none"
  "tp 4|4|--tp 4|--tp 4 --pp 1 --dp 1 --mbs $batch --zero 0 --recompute none --no-sequence-parallel"
  "pp 4, 1f1b, 8 micro-batches|4|--pp 4 --micro-batches 8|--tp 1 --pp 4 --dp 1 --mbs $eighth --schedule 1f1b --zero 0 --recompute none"
  "dp 8|8|--dp 8|--tp 1 --pp 1 --dp 8 --mbs $eighth --zero 0 --recompute none"
  "dp 8, ZeRO-1|8|--dp 8 --zero 1|--tp 1 --pp 1 --dp 8 --mbs $eighth --zero 1 --recompute none"
  "tp 2 x dp 4|8|--tp 2 --dp 4|--tp 2 --pp 1 --dp 4 --mbs $quarter --zero 0 --recompute none --no-sequence-parallel"
  "pp 2 x tp 2 x dp 2|8|--pp 2 --tp 2 --dp 2 --micro-batches 2|--tp 2 --pp 2 --dp 2 --mbs $quarter --schedule 1f1b --zero 0 --recompute none --no-sequence-parallel"
)
rounds=${ROUNDS:-2}
echo "# $model, batch $batch, $steps steps, best of $rounds rounds; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# Every layout once a round, so that a disturbance of the machine falls on
# one run of a layout, not all of them; each step time is the fastest of
# its runs (as the probe keeps the fastest of its), the slowest beside it.
for r in $(seq "$rounds"); do
  for i in "${!layouts[@]}"; do
    IFS='|' read -r name ranks train plan <<<"${layouts[$i]}"
    [[ " ${WORLDS:-1 2 4 8} " == *" $ranks "* ]] || continue
    log=$tmp/log.jsonl
    rm -f "$log"
    run=("$braid" train gpt --steps "$steps" --batch "$batch" --threads 1 -q "${shape[@]}" --json-log "$log")
    # shellcheck disable=SC2086
    if [ "$ranks" = 1 ]; then
      "${clean_env[@]}" "${run[@]}" $train >/dev/null
    else
      "${clean_env[@]}" "$braid" run -n "$ranks" "${run[@]}" $train >/dev/null
    fi
    grep '"event":"done"' "$log" | tail -1 >>"$tmp/done.$i"
    if [ "$r" = 1 ]; then
      # shellcheck disable=SC2086
      "$braid" plan --model "$model" --cluster this-machine --gpus "$ranks" --batch "$batch" $plan \
        --json --top 1 | head -1 >"$tmp/plan.$i"
    fi
  done
done
printf '| layout | step measured (slowest) | predicted | / measured | peak memory measured | predicted | / measured |\n'
printf '|---|---|---|---|---|---|---|\n'
for i in "${!layouts[@]}"; do
  [ -f "$tmp/done.$i" ] || continue
  python3 - "${layouts[$i]%%|*}" "$tmp/done.$i" "$tmp/plan.$i" "$((batch * T))" <<'PY'
import json, sys
name, runs, plan, tokens = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
done = [json.loads(l) for l in open(runs)]
p = json.load(open(plan))
steps = [tokens / d["tokens_per_s"] for d in done]
step = min(steps)
mem = float(done[0]["peak_tensor_bytes"])
print("| %s | %.3f s (%.3f) | %.3f s | %.2f | %.1f MB | %.1f MB | %.2f |" % (
    name, step, max(steps), p["step_s"], p["step_s"] / step, mem / 1e6,
    p["memory_bytes_per_device"] / 1e6, p["memory_bytes_per_device"] / mem))
PY
done
