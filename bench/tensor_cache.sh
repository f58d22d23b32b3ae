#!/usr/bin/env bash
# What keeping freed tensor buffers (braid/tensor.h, BRAID_TENSOR_CACHE)
# saves the layouts that free and allocate the same tensors every step:
# full recomputation (each block's buffers after its backward) and ZeRO-3
# (each unit's gathered weights), beside one that does not (1 rank).
# Each case runs with the cache off and on, alternating, ROUNDS times;
# prints the step time (the batch's tokens / the done record's tokens/s)
# and the ranks' system CPU seconds a step (the page faults), medians with
# the spread. Needs a quiet machine.
#   bench/tensor_cache.sh [BUILD]      ROUNDS=3 STEPS=30
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
braid=$build/braid
source bench/braid_env.sh
rounds=${ROUNDS:-3} steps=${STEPS:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# name | ranks | braid train flags (default GPT, batch 16, one thread a rank)
cases=(
  "1 rank|1|"
  "1 rank, recompute|1|--recompute"
  "dp 2, ZeRO-3|2|--dp 2 --zero 3"
  "dp 4, ZeRO-3|4|--dp 4 --zero 3"
)
for r in $(seq "$rounds"); do
  for entry in "${cases[@]}"; do
    IFS='|' read -r name ranks flags <<<"$entry"
    for cache in 0 1; do
      log=$tmp/log.jsonl
      rm -f "$log"
      run=("$braid" train gpt --steps "$steps" --batch 16 --threads 1 -q --json-log "$log")
      [ "$ranks" = 1 ] || run=("$braid" run -n "$ranks" "${run[@]}")
      # shellcheck disable=SC2086
      /usr/bin/time -f "%S" -o "$tmp/sys" "${clean_env[@]}" BRAID_TENSOR_CACHE=$cache "${run[@]}" $flags >/dev/null
      echo "$name|$cache|$(done_field "$log" tokens_per_s)|$(cat "$tmp/sys")" >>"$tmp/rows"
    done
  done
done
python3 - "$tmp/rows" "$steps" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[1])]
steps = float(sys.argv[2])
print("| layout | step, cache off | step, cache on | on / off | system CPU a step, off | on |")
print("|---|---|---|---|---|---|")
names = list(dict.fromkeys(r[0] for r in rows))
for n in names:
    t = {c: [2048 / float(r[2]) for r in rows if r[0] == n and r[1] == c] for c in "01"}
    s = {c: [float(r[3]) / steps for r in rows if r[0] == n and r[1] == c] for c in "01"}
    m = {c: statistics.median(t[c]) for c in "01"}
    print("| %s | %.3f s (%.3f-%.3f) | %.3f s (%.3f-%.3f) | %.2f | %.1f ms | %.1f ms |" % (
        n, m["0"], min(t["0"]), max(t["0"]), m["1"], min(t["1"]), max(t["1"]), m["1"] / m["0"],
        1e3 * statistics.median(s["0"]), 1e3 * statistics.median(s["1"])))
PY
