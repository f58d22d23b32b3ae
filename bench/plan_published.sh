#!/usr/bin/env bash
# braid plan against published large-scale GPT runs, from their
# configuration alone: the planner gets each run's model, the cluster preset
# (dgx-a100, dgx-h100: datasheet peaks, the generic GEMM curve), the number
# of devices, the global batch and the run's layout; no constant is fitted
# to a row. Four sources, one markdown table each (docs/PLAN.md, "Against
# published runs", cites them and discusses the results):
#   1. Korthikanti et al. 2022 (arXiv:2205.05198), Table 5: step time, A100.
#   2. Narayanan et al. 2021 (arXiv:2104.04473), Table 1: weak scaling
#      1.7B -> 1T on up to 3072 A100s, tensor x pipeline x data parallel.
#   3. Narayanan et al. 2021, Table 2: ZeRO-3 without model parallelism
#      against PTD parallelism, 175B and 530B, 384-2240 A100s.
#   4. MosaicML llm-foundry's MPT benchmarks: FSDP full sharding (ZeRO-3)
#      on 128-512 H100s and 32-64 A100s.
#   bench/plan_published.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
braid=${1:-build}/braid

# plan ARGS...: the best layout's JSON for the fixed layout in ARGS.
plan() { "$braid" plan --json --top 1 "$@" | head -1; }

# The planner's choices a row leaves open (micro-batch, schedule).
choice='def choice(l):
    s = "mbs %d" % l["mbs"]
    if l["pp"] > 1:
        s += ", " + l["schedule"] + ("x%d" % l["virtual_stages"] if l["virtual_stages"] > 1 else "")
    return s'

# Narayanan et al.'s FLOPs of a step (their eq. 3): full recomputation
# counted, 96·B·s·l·h²·(1 + s/6h + V/16lh).
eq3='def eq3(B, l, h, s=2048, V=51200):
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))'

echo '### Korthikanti et al. 2022, Table 5 (A100-80GB, dp 1)'
echo
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
    plan --model "gpt:layers=$layers,hidden=$hidden,heads=$heads,seq=2048,vocab=51200" \
      --cluster dgx-a100 --gpus $((tp * pp)) --batch "$batch" --tp "$tp" --pp "$pp" --dp 1 \
      --mbs "$mbs" "${pipe[@]}" --zero 0 "${flags[@]}" |
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

# Narayanan et al. give achieved TFLOP/s per GPU in their eq. 3's
# convention; the published step is eq. 3's FLOPs over GPUs x that rate,
# and the prediction is set beside it in the same convention.
echo
echo '### Narayanan et al. 2021, Table 1 (A100-80GB, full recomputation)'
echo
printf '| model | GPUs | tp x pp x dp | batch | planner chose | published TFLOP/s | published step | predicted step | predicted TFLOP/s | predicted / published step | memory per GPU |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
# billions heads hidden layers tp pp gpus batch tflops
while read -r bn heads hidden layers tp pp gpus batch tflops; do
  dp=$((gpus / (tp * pp)))
  plan --model "gpt:layers=$layers,hidden=$hidden,heads=$heads,seq=2048,vocab=51200" \
    --cluster dgx-a100 --gpus "$gpus" --batch "$batch" --tp "$tp" --pp "$pp" --dp "$dp" \
    --zero 0 --recompute full --no-sequence-parallel |
    python3 -c "import json,sys
$choice
$eq3
j=json.loads(sys.stdin.read()); a=sys.argv
bn, layers, hidden, tp, pp, dp, gpus, batch, x = a[1], int(a[2]), int(a[3]), a[4], a[5], a[6], int(a[7]), int(a[8]), float(a[9])
f = eq3(batch, layers, hidden); pub = f / (gpus * x * 1e12); s = j['step_s']
print('| %sB | %d | %s x %s x %s | %d | %s | %.0f | %.2f s | %.2f s | %.0f | %.2f | %.1f GiB |' % (bn, gpus, tp, pp, dp, batch, choice(j['layout']), x, pub, s, f / (gpus * s * 1e12), s / pub, j['memory_bytes_per_device'] / 2**30))" \
      "$bn" "$layers" "$hidden" "$tp" "$pp" "$dp" "$gpus" "$batch" "$tflops"
done <<'ROWS'
1.7 24 2304 24 1 1 32 512 137
3.6 32 3072 30 2 1 64 512 138
7.5 32 4096 36 4 1 128 512 142
18.4 48 6144 40 8 1 256 1024 135
39.1 64 8192 48 8 2 512 1536 138
76.1 80 10240 60 8 4 1024 1792 140
145.6 96 12288 80 8 8 1536 2304 148
310.1 128 16384 96 8 16 1920 2160 155
529.6 128 20480 105 8 35 2520 2520 163
1008 160 25600 128 8 64 3072 3072 163
ROWS

# Table 2: ZeRO-3 runs one micro-batch of batch / GPUs per GPU (no
# accumulation); PTD-P runs tp 8 with pp 12 (175B) or 35 (530B), mbs 1.
# "serial" adds back the data-parallel communication the planner hides
# behind compute: the step if none of it overlapped.
echo
echo '### Narayanan et al. 2021, Table 2 (A100-80GB, full recomputation)'
echo
printf '| scheme | model | GPUs | tp x pp x dp | batch | planner chose | published TFLOP/s | published step | predicted step | predicted / published step | serial | serial / published | memory per GPU |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
# scheme billions heads hidden layers tp pp gpus batch tflops
while read -r scheme bn heads hidden layers tp pp gpus batch tflops; do
  dp=$((gpus / (tp * pp)))
  if [ "$scheme" = ZeRO-3 ]; then
    fixed=(--mbs $((batch / gpus)) --zero 3)
  else
    fixed=(--mbs 1 --zero 0)
  fi
  plan --model "gpt:layers=$layers,hidden=$hidden,heads=$heads,seq=2048,vocab=51200" \
    --cluster dgx-a100 --gpus "$gpus" --batch "$batch" --tp "$tp" --pp "$pp" --dp "$dp" \
    "${fixed[@]}" --recompute full --no-sequence-parallel |
    python3 -c "import json,sys
$choice
$eq3
j=json.loads(sys.stdin.read()); a=sys.argv
scheme, bn, layers, hidden, tp, pp, dp, gpus, batch, x = a[1], a[2], int(a[3]), int(a[4]), a[5], a[6], a[7], int(a[8]), int(a[9]), float(a[10])
f = eq3(batch, layers, hidden); pub = f / (gpus * x * 1e12); s = j['step_s']
serial = s + j['dp_comm_s'] - j['dp_exposed_s']
print('| %s | %sB | %d | %s x %s x %s | %d | %s | %.0f | %.1f s | %.1f s | %.2f | %.1f s | %.2f | %.1f GiB |' % (scheme, bn, gpus, tp, pp, dp, batch, choice(j['layout']), x, pub, s, s / pub, serial, serial / pub, j['memory_bytes_per_device'] / 2**30))" \
      "$scheme" "$bn" "$layers" "$hidden" "$tp" "$pp" "$dp" "$gpus" "$batch" "$tflops"
done <<'ROWS'
ZeRO-3 174.6 96 12288 96 1 1 384 1536 144
ZeRO-3 174.6 96 12288 96 1 1 768 1536 88
ZeRO-3 174.6 96 12288 96 1 1 1536 1536 44
ZeRO-3 529.6 128 20480 105 1 1 640 2560 138
ZeRO-3 529.6 128 20480 105 1 1 1120 2240 98
ZeRO-3 529.6 128 20480 105 1 1 2240 2240 48
PTD-P 174.6 96 12288 96 8 12 384 1536 153
PTD-P 174.6 96 12288 96 8 12 768 1536 149
PTD-P 174.6 96 12288 96 8 12 1536 1536 141
PTD-P 529.6 128 20480 105 8 35 560 2240 171
PTD-P 529.6 128 20480 105 8 35 1120 2240 167
PTD-P 529.6 128 20480 105 8 35 2240 2240 159
ROWS

# MPT (GPT-2 blocks with biases and a learned position embedding,
# vocabulary 50368, sequence 2048) under FSDP FULL_SHARD = ZeRO-3, tp = pp
# = 1, bf16. The published step is the global batch's tokens over the
# published tokens per second; MFU in the source's convention (6·N·tokens
# plus 12·l·h·s² per sequence, no recomputation), which is the planner's.
echo
echo '### MosaicML MPT benchmarks (FSDP full sharding = ZeRO-3, bf16)'
echo
printf '| model | cluster | GPUs | mbs x accumulation | batch | recompute | published step | published MFU | predicted step | predicted MFU | predicted / published step | serial / published | memory per GPU |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
# name layers hidden heads cluster gpus mbs accum batch recompute tokens_per_s mfu_percent
while read -r name layers hidden heads cluster gpus mbs accum batch recompute tps mfu; do
  # The planner holds the attention's scores; MPT's flash attention does
  # not, and a row that then does not fit is shown with the planner's word.
  { plan --model "gpt:layers=$layers,hidden=$hidden,heads=$heads,seq=2048,vocab=50368" \
      --cluster "$cluster" --gpus "$gpus" --batch "$batch" --tp 1 --pp 1 --dp "$gpus" --mbs "$mbs" \
      --zero 3 --recompute "$recompute" || true; } 2>&1 |
    python3 -c "import json,sys
out=sys.stdin.read(); a=sys.argv
name, cluster, gpus, mbs, accum, batch, rec, tps, mfu = a[1], a[2], a[3], a[4], a[5], int(a[6]), a[7], float(a[8]), a[9]
pub = batch * 2048 / tps
if not out.startswith('{'):
    print('| %s | %s | %s | %s x %s | %d | %s | %.2f s | %s%% | %s | | | | |' % (name, cluster, gpus, mbs, accum, batch, rec, pub, mfu, out.strip().split(': ', 2)[-1]))
    sys.exit()
j=json.loads(out); s = j['step_s']
serial = s + j['dp_comm_s'] - j['dp_exposed_s']
print('| %s | %s | %s | %s x %s | %d | %s | %.2f s | %s%% | %.2f s | %.1f%% | %.2f | %.2f | %.1f GiB |' % (name, cluster, gpus, mbs, accum, batch, rec, pub, mfu, s, 100 * j['mfu'], s / pub, serial / pub, j['memory_bytes_per_device'] / 2**30))" \
      "$name" "$cluster" "$gpus" "$mbs" "$accum" "$batch" "$recompute" "$tps" "$mfu"
done <<'ROWS'
MPT-70B 80 8192 64 dgx-h100 512 8 1 4096 full 515636 41.25
MPT-70B 80 8192 64 dgx-h100 256 8 1 2048 full 265149 42.42
MPT-70B 80 8192 64 dgx-h100 128 8 1 1024 full 135490 43.36
MPT-30B 48 7168 56 dgx-h100 512 8 1 4096 full 1083366 40.27
MPT-30B 48 7168 56 dgx-h100 256 8 1 2048 full 550022 40.89
MPT-30B 48 7168 56 dgx-h100 128 8 1 1024 full 281491 41.85
MPT-13B 40 5120 40 dgx-h100 512 16 1 8192 full 2535811 41.12
MPT-13B 40 5120 40 dgx-h100 256 16 1 4096 full 1277214 41.42
MPT-13B 40 5120 40 dgx-h100 128 16 1 2048 full 650264 42.18
MPT-7B 32 4096 32 dgx-h100 512 6 1 3072 none 4951479 42.2
MPT-7B 32 4096 32 dgx-h100 256 6 1 1536 none 2590548 44.15
MPT-7B 32 4096 32 dgx-h100 128 6 1 768 none 1340830 45.71
MPT-70B 80 8192 64 dgx-a100 64 8 4 2048 full 26274 53.33
MPT-70B 80 8192 64 dgx-a100 32 2 16 1024 full 11962 48.56
ROWS
