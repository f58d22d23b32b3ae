#!/usr/bin/env bash
# Thread scaling of `braid train` as a user runs it: no LD_LIBRARY_PATH and
# no thread environment (OMP_*, OPENBLAS_NUM_THREADS, GOMP_* are removed;
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are the machine's and stay).
# --threads 1 and --threads 2 alternate, ROUNDS rounds each, so that drift
# in the machine's load falls on both sides alike.
#
#   bench/thread_scaling.sh [BUILD_DIR]    ROUNDS=3 MODELS="mlp gpt" GPT_STEPS=30
#
# Prints each run's throughput, then per model the median of each side and
# the ratio of medians. Goals (issue 19): MLP >= 1.6x, GPT >= 1.5x on an idle
# 2-core machine.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
braid=$build/braid
rounds=${ROUNDS:-3}
models=${MODELS:-"mlp gpt"}
gpt_steps=${GPT_STEPS:-30}
tmp=$(mktemp -d /tmp/braid_threads_XXXXXX)
trap 'rm -rf "$tmp"' EXIT

source "$here/bench/braid_env.sh"  # clean_env: braid as a user runs it

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "# $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
for model in $models; do
  if [[ $model == mlp ]]; then args=(--epochs 1); key=samples_per_s
  else args=(--steps "$gpt_steps"); key=tokens_per_s; fi
  : >"$tmp/1" ; : >"$tmp/2"
  for ((r = 1; r <= rounds; ++r)); do
    for t in 1 2; do
      "${clean_env[@]}" "$braid" train "$model" "${args[@]}" --threads "$t" -q \
        --json-log "$tmp/log.jsonl" >/dev/null
      v=$(python3 -c "import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    if d.get('event')=='done': print(d[sys.argv[2]])" "$tmp/log.jsonl" "$key")
      echo "$v" >>"$tmp/$t"
      printf '%s round %d threads %d: %.0f %s\n' "$model" "$r" "$t" "$v" "${key%_per_s}/s"
    done
  done
  m1=$(median <"$tmp/1") m2=$(median <"$tmp/2")
  printf '%s: median %.0f (1 thread) %.0f (2 threads), ratio %.2fx; spread 1: %s  2: %s\n' \
    "$model" "$m1" "$m2" "$(echo "$m2 / $m1" | bc -l)" \
    "$(sort -g "$tmp/1" | awk '{printf "%.0f ", $1}')" "$(sort -g "$tmp/2" | awk '{printf "%.0f ", $1}')"
done
