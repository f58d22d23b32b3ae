#!/usr/bin/env bash
# Mixed precision (issue 39): GPT tokens/s in bf16 against fp32, braid's own
# and against PyTorch's (torch.autocast("cpu", dtype=torch.bfloat16)), and
# the peak memory bf16/fp32. Same model shape, batch, initial weights
# (braid writes them, PyTorch loads them), data order and threads on both
# sides. Alternating runs (odd reps braid first, even ones PyTorch first);
# medians of REPS.
#
# braid runs as a user runs it (bench/braid_env.sh: nothing added to its
# environment). PyTorch at its best (/work/shared/RIVALS.md): the OpenMP
# OpenBLAS on LD_LIBRARY_PATH and OMP_NUM_THREADS=T for its commands alone;
# its bf16 matmuls are oneDNN's, as braid's.
#
# Goals (issue 39): braid bf16 ≥ 1.6× braid fp32; braid bf16 ≥ 1.2× PyTorch
# bf16; braid's peak tensor bytes in bf16 ≤ 0.65× fp32's. Memory: braid's
# `peak_tensor_bytes` (the tensor storage counter, braid/tensor.h) and both
# sides' peak RSS.
#
# OpenBLAS kernels (bench/blas_kernels.sh): one table per setting. The
# fp32 baseline is only fair under "native" when the machine pins OpenBLAS
# to older kernels (OPENBLAS_CORETYPE=Haswell here: AVX2 on an AVX-512 CPU).
#
# Usage: bench/mixed_precision.sh [BUILD_DIR]
#   env: REPS=3 THREADS=2 STEPS=30 D_MODEL=512 LAYERS=4 HEADS=8 CONTEXT=256 BATCH=16
#        BLAS=both|machine|native
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
braid=$build/braid
reps=${REPS:-3}
t=${THREADS:-2}
steps=${STEPS:-30}
shape=(--d-model "${D_MODEL:-512}" --layers "${LAYERS:-4}" --heads "${HEADS:-8}"
       --context "${CONTEXT:-256}" --batch "${BATCH:-16}")
py=/usr/bin/python3
. "$here/bench/braid_env.sh"
[[ -x $braid ]] || { echo "build braid first: cmake --build $build --target braid_tool" >&2; exit 2; }
$py -c "import torch" 2>/dev/null || { echo "needs python3-torch (scripts/deps.sh)" >&2; exit 2; }
torch_blas=LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { $py -c "print(f'{$1/$2:.2f}')"; }

. "$here/bench/blas_kernels.sh"
init=$tmp/init.ckpt
"${clean_env[@]}" "$braid" train gpt --steps 1 "${shape[@]}" --save-init "$init" -q >/dev/null

measure() {
  declare -A tok mem rss
  for p in fp32 bf16; do tok[b$p]=""; tok[t$p]=""; mem[$p]=""; rss[b$p]=""; rss[t$p]=""; done
  for ((r = 0; r < reps; r++)); do
    for p in fp32 bf16; do
      run_b=("${benv[@]}" "$braid" train gpt --steps "$steps" "${shape[@]}" --threads "$t"
             --precision "$p" --init-from "$init" --json-log "$tmp/b.jsonl" -q)
      run_t=("${benv[@]}" "$torch_blas" OMP_NUM_THREADS="$t" $py "$here/bench/torch_train.py" gpt
             --steps "$steps" "${shape[@]}" --threads "$t" --precision "$p" --init-from "$init"
             --json-log "$tmp/t.jsonl")
      if ((r % 2 == 0)); then "${run_b[@]}" >/dev/null; "${run_t[@]}" >/dev/null
      else "${run_t[@]}" >/dev/null; "${run_b[@]}" >/dev/null; fi
      tok[b$p]+=" $(done_field "$tmp/b.jsonl" tokens_per_s)"
      tok[t$p]+=" $(done_field "$tmp/t.jsonl" tokens_per_s)"
      mem[$p]+=" $(done_field "$tmp/b.jsonl" peak_tensor_bytes)"
      rss[b$p]+=" $(done_field "$tmp/b.jsonl" peak_rss_bytes)"
      rss[t$p]+=" $(done_field "$tmp/t.jsonl" peak_rss_bytes)"
    done
  done
  m() { median ${1}; }
  bf=$(m "${tok[bfp32]}"); bb=$(m "${tok[bbf16]}"); tf=$(m "${tok[tfp32]}"); tb=$(m "${tok[tbf16]}")
  mf=$(m "${mem[fp32]}"); mb=$(m "${mem[bf16]}")
  echo; echo "OpenBLAS kernels: $setting"; echo "GPT ${shape[*]}, $t thread(s), $steps steps, median of $reps; torch $($py -c 'import torch; print(torch.__version__)')"
  echo "(indicative unless the machine was quiet)"
  echo "| side | fp32 tok/s | bf16 tok/s | bf16/fp32 | peak RSS fp32 MiB | bf16 MiB |"
  echo "|---|---|---|---|---|---|"
  printf '| braid | %.0f | %.0f | **%s×** | %.0f | %.0f |\n' "$bf" "$bb" "$(ratio "$bb" "$bf")" \
    "$($py -c "print($(m "${rss[bfp32]}")/2**20)")" "$($py -c "print($(m "${rss[bbf16]}")/2**20)")"
  printf '| PyTorch | %.0f | %.0f | %s× | %.0f | %.0f |\n' "$tf" "$tb" "$(ratio "$tb" "$tf")" \
    "$($py -c "print($(m "${rss[tfp32]}")/2**20)")" "$($py -c "print($(m "${rss[tbf16]}")/2**20)")"
  echo "braid bf16 / PyTorch bf16: **$(ratio "$bb" "$tb")×** (goal ≥ 1.2)   braid bf16 / braid fp32: $(ratio "$bb" "$bf")× (goal ≥ 1.6)"
  echo "braid peak tensor bytes: fp32 $(($mf / 1048576)) MiB, bf16 $(($mb / 1048576)) MiB: bf16/fp32 $(ratio "$mb" "$mf") (goal ≤ 0.65)"
}
for setting in $blas_settings; do
  blas_env "$setting"
  measure
done
