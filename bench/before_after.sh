#!/usr/bin/env bash
# Two builds of braid side by side (a refactoring that must not change
# speed): all_reduce 8 B-16 MiB (x8 steps) at 2 and 4 ranks, `train mlp --dp 2` one
# epoch and `train gpt --dp 2` 30 steps; model parallel: `train gpt` (d_model
# 512, model_parallel.sh's GPT at batch 32) 6 steps at --tp 2 and at --pp 2 (1F1B, 8
# micro-batches); the parameter server: `ps bench` dense push_pull (4 MiB)
# and sparse (64-byte rows), 2 servers x 2 workers; alternating, three rounds.
#   bench/before_after.sh BEFORE_BRAID AFTER_BRAID   [OUT=DIR]
# then `python3 bench/before_after_table.py OUT` prints the tables. Without
# OUT the results go to a new directory, named on the last line.
set -uo pipefail
before=${1:?usage: before_after.sh BEFORE_BRAID AFTER_BRAID} after=${2:?usage: before_after.sh BEFORE_BRAID AFTER_BRAID}
out=${OUT:-$(mktemp -d /tmp/braid-before-after.XXXXXX)}; mkdir -p "$out"
# Both builds as a user runs them: none of the caller's library path or
# OpenMP settings (braid_env.sh).
source "$(dirname "$0")/braid_env.sh"
for round in 1 2 3; do
  for who in before after; do
    if [ $who = before ]; then B="${clean_env[*]} $before"; else B="${clean_env[*]} $after"; fi
    $B bench -n 2 --op all_reduce -b 8 -e 64M -f 8 --json > $out/$who.ar2.$round.json 2>/dev/null
    $B bench -n 4 --op all_reduce -b 8 -e 64M -f 8 --json > $out/$who.ar4.$round.json 2>/dev/null
    $B train mlp --dp 2 --epochs 1 --json-log $out/$who.mlp.$round.jsonl > /dev/null 2>&1
    $B train gpt --dp 2 --steps 30 --json-log $out/$who.gpt.$round.jsonl > /dev/null 2>&1
    for mp in "tp|--tp 2" "pp|--pp 2 --micro-batches 8"; do
      $B train gpt --d-model 512 --heads 8 --layers 4 --context 128 --batch 32 --steps 6 \
        --threads 1 ${mp#*|} --json-log $out/$who.${mp%%|*}.$round.jsonl > /dev/null 2>&1
    done
    $B ps bench --mode dense --bytes 4194304 --iters 20 --json > $out/$who.psdense.$round.json 2>/dev/null
    $B ps bench --mode sparse --row-bytes 64 --keys 4096 --iters 20 --json > $out/$who.pssparse.$round.json 2>/dev/null
  done
done
echo "done: $out"
