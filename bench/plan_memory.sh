#!/usr/bin/env bash
# The planner's peak memory per rank against braid's own, layout by layout:
# rank 0's peak tensor storage (`peak_tensor_bytes` of `braid train`'s done
# record) beside `braid plan`'s memory_bytes_per_device for the same model,
# batch and layout on `this-machine`. Memory does not depend on load, so a
# busy machine gives the same figures.
#   bench/plan_memory.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
braid=$build/braid
source bench/braid_env.sh
model="gpt:layers=4,hidden=256,heads=4,seq=128,vocab=256"
batch=16
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# name | ranks | braid train flags | braid plan flags
layouts=(
  "1 rank|1||--tp 1 --pp 1 --dp 1 --mbs 16 --zero 0 --recompute none"
  "1 rank, recompute|1|--recompute|--tp 1 --pp 1 --dp 1 --mbs 16 --zero 0 --recompute full"
  "dp 2|2|--dp 2|--tp 1 --pp 1 --dp 2 --mbs 8 --zero 0 --recompute none"
  "dp 2, ZeRO-1|2|--dp 2 --zero 1|--tp 1 --pp 1 --dp 2 --mbs 8 --zero 1 --recompute none"
  "dp 2, ZeRO-2|2|--dp 2 --zero 2|--tp 1 --pp 1 --dp 2 --mbs 8 --zero 2 --recompute none"
  "dp 2, ZeRO-3|2|--dp 2 --zero 3|--tp 1 --pp 1 --dp 2 --mbs 8 --zero 3 --recompute none"
  "tp 2|2|--tp 2|--tp 2 --pp 1 --dp 1 --mbs 16 --zero 0 --recompute none --no-sequence-parallel"
  "tp 2, recompute|2|--tp 2 --recompute|--tp 2 --pp 1 --dp 1 --mbs 16 --zero 0 --recompute full --no-sequence-parallel"
  "tp 2, sp|2|--tp 2 --sequence-parallel|--tp 2 --pp 1 --dp 1 --mbs 16 --zero 0 --recompute none --sequence-parallel"
  "pp 2, 1f1b, 4 micro-batches|2|--pp 2 --micro-batches 4|--tp 1 --pp 2 --dp 1 --mbs 4 --schedule 1f1b --zero 0 --recompute none"
  "pp 2, gpipe, 4 micro-batches|2|--pp 2 --micro-batches 4 --schedule gpipe|--tp 1 --pp 2 --dp 1 --mbs 4 --schedule gpipe --zero 0 --recompute none"
)
printf '| layout | measured | predicted | predicted / measured |\n|---|---|---|---|\n'
for entry in "${layouts[@]}"; do
  IFS='|' read -r name ranks train plan <<<"$entry"
  log=$tmp/log.jsonl
  rm -f "$log"
  # shellcheck disable=SC2086
  if [ "$ranks" = 1 ]; then
    "${clean_env[@]}" "$braid" train gpt --steps 2 --batch $batch --threads 1 -q --json-log "$log" $train >/dev/null
  else
    "${clean_env[@]}" "$braid" run -n "$ranks" "$braid" train gpt --steps 2 --batch $batch --threads 1 -q \
      --json-log "$log" $train >/dev/null
  fi
  measured=$(done_field "$log" peak_tensor_bytes)
  # shellcheck disable=SC2086
  predicted=$("$braid" plan --model "$model" --cluster this-machine --gpus "$ranks" --batch $batch \
    $plan --json --top 1 | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['memory_bytes_per_device'])")
  python3 -c "import sys; m,p=float(sys.argv[2]),float(sys.argv[3]); print('| %s | %.1f MB | %.1f MB | %.2f |'%(sys.argv[1],m/1e6,p/1e6,p/m))" \
    "$name" "$measured" "$predicted"
done
