#!/usr/bin/env bash
# braid plan against published large-scale GPT runs, from their
# configuration alone: Korthikanti et al., "Reducing Activation
# Recomputation in Large Transformer Models" (arXiv:2205.05198), Table 5:
# iteration time of four GPT models on A100-80GB (Selene) with full
# recomputation ("full") and with sequence parallelism + selective
# recomputation ("seqsel"), one model replica each (dp 1), sequence 2048,
# vocabulary 51200. The planner gets the model, the cluster preset
# (dgx-a100), the batch and the layout; no constant is fitted to a row.
#   bench/plan_published.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
braid=${1:-build}/braid
printf '| model | tp x pp, batch, mbs, chunks | recompute | published step | predicted | predicted / published | memory per GPU |\n'
printf '|---|---|---|---|---|---|---|\n'
# name layers hidden heads tp pp batch mbs chunks full_s seqsel_s
while read -r name layers hidden heads tp pp batch mbs vs full seqsel; do
  sched=1f1b
  [ "$vs" -gt 1 ] && sched=interleaved
  pipe=()
  [ "$pp" -gt 1 ] && pipe=(--schedule "$sched" --virtual-stages "$vs")
  for mode in full seqsel; do
    if [ "$mode" = full ]; then
      flags=(--recompute full --no-sequence-parallel)
      pub=$full
    else
      flags=(--recompute selective --sequence-parallel)
      pub=$seqsel
    fi
    "$braid" plan --model "gpt:layers=$layers,hidden=$hidden,heads=$heads,seq=2048,vocab=51200" \
      --cluster dgx-a100 --gpus $((tp * pp)) --batch "$batch" --tp "$tp" --pp "$pp" --dp 1 \
      --mbs "$mbs" "${pipe[@]}" --zero 0 "${flags[@]}" --json --top 1 | head -1 |
      python3 -c "import json,sys
j=json.loads(sys.stdin.read()); a=sys.argv
print('| %s | %s x %s, %s, %s, %s | %s | %s s | %.2f s | %.2f | %.1f GiB |' % (a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], j['step_s'], j['step_s'] / float(a[8]), j['memory_bytes_per_device'] / 2**30))" \
        "$name" "$tp" "$pp" "$batch" "$mbs" "$vs" "$mode" "$pub"
  done
done <<'ROWS'
22B 48 6144 64 8 1 4 4 1 1.42 1.10
175B 96 12288 96 8 8 64 1 3 18.13 13.75
530B 105 20480 128 8 35 280 1 3 49.05 37.83
1T 128 25600 160 8 64 512 1 1 94.42 71.49
ROWS
