#!/usr/bin/env bash
# Mixture of experts with expert parallelism (issue 36): `braid train gpt
# --moe-experts` as a user runs it.
#
#   bench/moe.sh [BUILD_DIR]    ROUNDS=2 STEPS=30 SPEED_STEPS=8
#
# 1. Balance: the MoE GPT (8 experts, top-1, every 2nd block) at dp=2 ep=2
#    for STEPS steps with the load-balancing loss off (--moe-aux 0) and on
#    (0.01, 0.1): imbalance = max/mean tokens per expert, averaged over the
#    last half of the steps, and the dropped share (capacity 1.25).
# 2. Exposed all_to_all: the share of each step a rank spends in the
#    expert-parallel all_to_alls (the log's moe.a2a_fraction, the largest
#    over ranks; the exchanges are blocking, so all of it is exposed, and
#    it includes waiting for the slower rank of the ep group).
# 3. Speed: the MoE GPT at dp=2 ep=2 (4 experts, top-1, every block,
#    capacity 4 = E/k, so that no token drops and the experts do the
#    dense MLP's work: a dropped token would skip it) against the dense GPT with the same active parameters per token
#    (the same width; one 4·d MLP per token) at dp=2, both through the same
#    path (parallelize; --micro-batches 1 sends the dense run there too),
#    ROUNDS alternating rounds; medians of tokens/s, the ratio (goal >= 0.8)
#    and the MoE run's dropped share. The MoE runs twice: as a user gets it
#    (shadow experts on: a busy rank lends an expert for the step) and with
#    --moe-shadow 0 (every row goes to its expert's rank), to show what
#    lending buys; the goal is on the first.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
braid=$build/braid
rounds=${ROUNDS:-2}
steps=${STEPS:-30}
speed_steps=${SPEED_STEPS:-8}
tmp=$(mktemp -d /tmp/braid_moe_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/braid_env.sh
. "$here/bench/braid_env.sh"
moe_mean() {  # FILE KEY: the mean of moe.KEY over the last half of the steps
  python3 -c "import json,sys
v=[json.loads(l) for l in open(sys.argv[1])]
v=[r['moe'] for r in v if 'moe' in r]
h=v[len(v)//2:]
k=sys.argv[2]
if k=='drop_share': print(sum(r['dropped'] for r in h)/max(1,sum(r['routed'] for r in h)))
else: print(sum(r[k] for r in h)/max(1,len(h)))" "$1" "$2"
}
calc() { python3 -c "print($1)"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "# $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
small=(gpt --d-model 64 --heads 4 --layers 4 --context 64 --batch 16 --threads 1)
echo "## 1. balance: 8 experts, top-1, dp=2 ep=2, $steps steps (last half averaged)"
printf '%-10s %10s %10s %10s\n' aux imbalance dropped aux_loss
for aux in 0 0.01 0.1; do
  "${clean_env[@]}" "$braid" train "${small[@]}" --steps "$steps" --moe-experts 8 --moe-every 2 \
    --moe-aux "$aux" --dp 2 --ep 2 --quiet --json-log "$tmp/bal.$aux" >/dev/null 2>&1
  printf '%-10s %10.3f %10.4f %10.4f\n' "$aux" "$(moe_mean "$tmp/bal.$aux" imbalance)" \
    "$(moe_mean "$tmp/bal.$aux" drop_share)" "$(moe_mean "$tmp/bal.$aux" aux_loss)"
done

echo "## 2. exposed all_to_all: share of the step (largest over ranks), dp=2 ep=2"
printf '%-10s %12s\n' aux a2a_share
for aux in 0 0.01; do
  printf '%-10s %12.4f\n' "$aux" "$(moe_mean "$tmp/bal.$aux" a2a_fraction)"
done

model=(gpt --d-model 256 --heads 4 --layers 4 --context 128 --batch 16 --threads 1
  --steps "$speed_steps")
echo "## 3. speed: MoE (4 experts, top-1, every block) dp=2 ep=2 vs dense dp=2, $rounds rounds"
for r in $(seq "$rounds"); do
  "${clean_env[@]}" "$braid" train "${model[@]}" --dp 2 --micro-batches 1 --quiet \
    --json-log "$tmp/dense.$r" >/dev/null 2>&1
  "${clean_env[@]}" "$braid" train "${model[@]}" --dp 2 --micro-batches 1 --ep 2 --moe-experts 4 \
    --moe-every 1 --moe-capacity 4 --quiet --json-log "$tmp/moe.$r" >/dev/null 2>&1
  "${clean_env[@]}" "$braid" train "${model[@]}" --dp 2 --micro-batches 1 --ep 2 --moe-experts 4 \
    --moe-every 1 --moe-capacity 4 --moe-shadow 0 --quiet --json-log "$tmp/lent0.$r" >/dev/null 2>&1
done
for k in dense moe lent0; do
  for r in $(seq "$rounds"); do done_field "$tmp/$k.$r" tokens_per_s; done | median > "$tmp/$k.med"
done
dense=$(cat "$tmp/dense.med")
moe=$(cat "$tmp/moe.med")
lent0=$(cat "$tmp/lent0.med")
printf '%-34s %12s\n' run tokens/s
printf '%-34s %12.0f\n' "dense GPT dp=2" "$dense" "MoE GPT dp=2 ep=2" "$moe" \
  "MoE GPT dp=2 ep=2 --moe-shadow 0" "$lent0"
echo "MoE dropped share: $(moe_mean "$tmp/moe.1" drop_share); all_to_all share of the step: $(moe_mean "$tmp/moe.1" a2a_fraction) (--moe-shadow 0: $(moe_mean "$tmp/lent0.1" a2a_fraction)); shadows per step: $(moe_mean "$tmp/moe.1" shadows)"
echo "ratio MoE/dense: $(calc "round($moe / $dense, 3)") (goal >= 0.8); --moe-shadow 0: $(calc "round($lent0 / $dense, 3)")"
