#!/usr/bin/env bash
# Model parallelism as a user runs it (issue 22): `braid train gpt` with
# --tp / --pp beside the one-rank run that keeps both cores busy.
#
#   bench/model_parallel.sh [BUILD_DIR]    ROUNDS=2
#
# 1. Speed: a GPT whose GEMMs dominate (d_model 512, 8 heads, 4 layers,
#    context 128, global batch 64), 1 rank x 2 threads against tp=2 x 1
#    thread and pp=2 x 1 thread (1F1B, 8 micro-batches), alternating, ROUNDS
#    rounds; medians and the ratios (goals: tp >= 0.85, pp >= 0.80).
# 2. Memory: rank 0's parameter and optimizer bytes at tp=2 against the same
#    model at dp=tp=pp=1 (goal: <= 1/2 + 5%).
# 3. Pipeline: measured bubble fraction and peak activation bytes per stage
#    for GPipe and 1F1B at p = 2 and 4, m = 4, 8, 16, and interleaved (v = 2)
#    at p = 2, beside (p-1)/(m+p-1). p = 4 runs 4 ranks on however many
#    cores there are: on fewer than 4 its bubble is not the schedule's.
#    The bubble is the done record's bubble_fraction with bubble_method
#    "span": per pipeline, each rank's waits in communication actions plus
#    its time before its first action and after its last while another
#    rank still runs, over ranks x the span from the first action to the
#    last (check_schedule's definition, measured). Interleaved chunks are
#    cut by the modules' estimated multiply-adds (two blocks each here).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
braid=$build/braid
rounds=${ROUNDS:-2}
tmp=$(mktemp -d /tmp/braid_mp_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/braid_env.sh
. "$here/bench/braid_env.sh"
calc() { python3 -c "print($1)"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "# $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
model=(gpt --d-model 512 --heads 8 --layers 4 --context 128 --batch 64)
big=("${model[@]}" --steps 6)
for r in $(seq "$rounds"); do
  "${clean_env[@]}" "$braid" train "${big[@]}" --threads 2 --json-log "$tmp/serial.$r" >/dev/null 2>&1
  "${clean_env[@]}" "$braid" train "${big[@]}" --tp 2 --threads 1 --json-log "$tmp/tp.$r" >/dev/null 2>&1
  "${clean_env[@]}" "$braid" train "${big[@]}" --pp 2 --micro-batches 8 --schedule 1f1b \
    --threads 1 --json-log "$tmp/pp.$r" >/dev/null 2>&1
done
for k in serial tp pp; do
  for r in $(seq "$rounds"); do done_field "$tmp/$k.$r" tokens_per_s; done | median > "$tmp/$k.med"
done
s=$(cat "$tmp/serial.med")
echo "| run | tokens/s (median of $rounds) | / 1 rank x 2 threads |"
echo "|---|---|---|"
printf '| 1 rank x 2 threads | %.0f | 1.00 |\n' "$s"
for k in tp pp; do
  v=$(cat "$tmp/$k.med")
  printf '| %s | %.0f | %.2f |\n' "$([[ $k == tp ]] && echo 'tp=2 x 1 thread' || echo 'pp=2 x 1 thread, 1F1B, m=8')" "$v" "$(calc "$v / $s")"
done

"${clean_env[@]}" "$braid" train "${model[@]}" --steps 1 --micro-batches 1 --threads 2 --json-log "$tmp/one" >/dev/null 2>&1
p1=$(done_field "$tmp/one" rank0_param_bytes); o1=$(done_field "$tmp/one" rank0_optim_bytes)
p2=$(done_field "$tmp/tp.1" rank0_param_bytes); o2=$(done_field "$tmp/tp.1" rank0_optim_bytes)
echo
echo "| bytes on rank 0 | dp=tp=pp=1 | tp=2 | ratio |"
echo "|---|---|---|---|"
printf '| parameters | %s | %s | %.3f |\n' "$p1" "$p2" "$(calc "$p2 / $p1")"
printf '| optimizer state | %s | %s | %.3f |\n' "$o1" "$o2" "$(calc "$o2 / $o1")"

small=(gpt --d-model 256 --heads 4 --layers 8 --context 64 --batch 64 --steps 4 --threads 1)
echo
echo "| p | m | schedule | bubble measured | (p-1)/(m+p-1) | peak activation bytes per stage | tokens/s |"
echo "|---|---|---|---|---|---|---|"
run_pp() {  # P M SCHEDULE [extra flags]
  local p=$1 m=$2 s=$3; shift 3
  "${clean_env[@]}" "$braid" train "${small[@]}" --pp "$p" --micro-batches "$m" --schedule "$s" "$@" \
    --json-log "$tmp/bb" >/dev/null 2>&1
  [[ $(done_field "$tmp/bb" bubble_method) == '"span"' ]] || echo "# bubble by waits only (clocks differ)"
  printf '| %s | %s | %s | %.3f | %.3f | %s | %.0f |\n' "$p" "$m" "$s${1:+ v2}" \
    "$(done_field "$tmp/bb" bubble_fraction)" "$(calc "($p-1)/($m+$p-1)")" \
    "$(done_field "$tmp/bb" peak_activation_bytes)" "$(done_field "$tmp/bb" tokens_per_s)"
}
for p in 2 4; do for m in 4 8 16; do for s in gpipe 1f1b; do run_pp "$p" "$m" "$s"; done; done; done
for m in 4 8 16; do run_pp 2 "$m" interleaved --virtual-stages 2; done
