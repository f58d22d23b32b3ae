#!/usr/bin/env bash
# The demo: data-parallel Fashion-MNIST training on 2 ranks.
#
#   1. a short 1-rank, 1-thread run measures the reference throughput;
#   2. `braid train mlp --dp 2` (1 thread per rank) trains 3 epochs with the
#      progress bar, then reports test accuracy, throughput and the speed-up
#      over one rank (scaling factor = T_2 / (2 T_1)).
# A minute or so on 2 cores.
set -euo pipefail
BUILD=${1:-build}
BRAID="$BUILD/braid"
TMP=$(mktemp -d /tmp/braid_demo_XXXXXX)
trap 'rm -rf "$TMP"' EXIT

echo "== 1 rank x 1 thread: reference throughput (1 epoch) =="
"$BRAID" train mlp --dp 1 --threads 1 --epochs 1 --quiet --json-log "$TMP/one.jsonl"
REF=$(tail -n 1 "$TMP/one.jsonl" | sed -n 's/.*"samples_per_s":\([0-9.e+-]*\).*/\1/p')

echo
echo "== 2 ranks x 1 thread: data parallel, gradients all-reduced in buckets during backward =="
"$BRAID" train mlp --dp 2 --threads 1 --epochs 3 --ref-throughput "$REF" \
  --json-log "$TMP/dp2.jsonl"
