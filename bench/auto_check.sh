#!/usr/bin/env bash
# `braid train --auto` against the layouts it chose among, measured: for
# each world, the tokens/s of the layout --auto picks beside those of the
# other layouts braid train runs for that world (dp with ZeRO 0-3, tp, pp,
# their hybrids), one thread a rank. Issue 35 asks --auto's choice to be
# within 10% of the fastest that fits. Needs a quiet machine; worlds above
# the cores time-share them (as the planner's this-machine prices it).
#   bench/auto_check.sh [BUILD]        WORLDS="2 4 8" STEPS=20 ROUNDS=2
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
braid=$build/braid
source bench/braid_env.sh
steps=${STEPS:-20}
read -ra worlds <<<"${WORLDS:-2 4 8}"
base=(train gpt --steps "$steps" --batch 16 --threads 1 -q)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tps() { done_field "$1" tokens_per_s; }
# The fastest of `rounds` runs of one command (the machine moves 10-20%
# from run to run; as plan_check.sh, each side keeps its fastest): its
# tokens/s, or nothing when a run fails (its last line in $tmp/fail).
rounds=${ROUNDS:-2}
fastest() {
  local best=0 r
  for r in $(seq "$rounds"); do
    if ! "$@" --json-log "$tmp/r.jsonl" >"$tmp/r.out" 2>&1; then
      tail -1 "$tmp/r.out" >"$tmp/fail"
      return
    fi
    best=$(python3 -c "print(max(float('$best'), float('$(tps "$tmp/r.jsonl")')))")
  done
  echo "$best"
}
for w in "${worlds[@]}"; do
  h=$((w / 2))
  layouts=("--dp $w" "--dp $w --zero 1" "--dp $w --zero 3" "--tp 2 --dp $h" "--pp 2 --dp $h --micro-batches 2"
           "--tp $w" "--pp 2 --tp $h --micro-batches 4")
  [ "$w" = 2 ] && layouts=("--dp 2" "--dp 2 --zero 1" "--dp 2 --zero 3" "--tp 2" "--pp 2 --micro-batches 4")
  auto=$(fastest "${clean_env[@]}" "$braid" "${base[@]}" --auto --world "$w")
  choice=$(grep -o 'chose [^(]*' "$tmp/r.out" | head -1)
  echo "## world $w: --auto $choice: $auto tokens/s (best of $rounds)"
  best=0 best_name=
  for l in "${layouts[@]}"; do
    # shellcheck disable=SC2086
    t=$(fastest "${clean_env[@]}" "$braid" run -n "$w" "$braid" "${base[@]}" $l)
    if [ -n "$t" ]; then
      echo "  $l: $t tokens/s"
      if python3 -c "import sys; sys.exit(0 if float('$t') > float('$best') else 1)"; then
        best=$t best_name=$l
      fi
    else
      echo "  $l: refused or failed: $(cat "$tmp/fail")"
    fi
  done
  python3 -c "print('  fastest: $best_name, $best tokens/s; --auto / fastest = %.2f' % (float('$auto') / float('$best')))"
done
