#!/usr/bin/env bash
# braid vs PyTorch, side by side in one run: the same model, batch, initial
# weights (braid writes them, PyTorch loads them), data order, optimizer and
# thread count. Prints one line per run and the ratios (median of REPS runs;
# odd reps run braid first, even ones PyTorch first, so that drift favours
# neither side).
#
# braid runs as a user runs it: `braid train ... --threads T`, with nothing
# added to its environment. PyTorch runs at its best (/work/shared/RIVALS.md):
# with the OpenMP build of OpenBLAS on LD_LIBRARY_PATH (Debian's default BLAS
# is the reference one) and OMP_NUM_THREADS=T, set for its commands alone.
#
# Usage: bench/compare_torch.sh [BUILD_DIR]   (env: REPS=3 THREADS="1 2"
#        MLP_STEPS=300 GPT_STEPS=30 ACC=1 to also run the 2-epoch accuracy recipe
#        BLAS=both|machine|native LOSS_RTOL=1e-4)
#
# BLAS kernels (bench/blas_kernels.sh): each setting gets its own table;
# each row names the kernel set each side reported (braid's done record and
# torch_train.py's, both from openblas_get_corename).
#
# Both sides must compute the same numbers: the first 3 losses of every run
# are compared (bench/same_losses.py, relative tolerance LOSS_RTOL). The
# script exits 1 when any pair differs, after printing every table.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build-nn}
braid=$build/braid
reps=${REPS:-3}
threads=${THREADS:-"1 2"}
mlp_steps=${MLP_STEPS:-300}
gpt_steps=${GPT_STEPS:-30}
py=/usr/bin/python3

if ! $py -c "import torch" 2>/dev/null || [[ ! -d /usr/lib/x86_64-linux-gnu/openblas-openmp ]]; then
  apt-get install -y python3-torch libopenblas0-openmp >/dev/null
fi
# PyTorch's environment (RIVALS.md); braid's commands get none of it.
torch_blas=LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
loss_rtol=${LOSS_RTOL:-1e-4}
differ=()
[[ -x $braid ]] || { echo "build braid first: cmake --build $build --target braid_tool" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { $py -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])" "$1" "$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

run_pair() {  # model threads steps extra-args...
  local model=$1 t=$2 steps=$3; shift 3
  local init=$tmp/init_$model.ckpt
  "${clean_env[@]}" $braid train $model --steps 1 --save-init "$init" -q "$@" >/dev/null
  local bt=() tt=() br=() tr=() key losses
  key=$([[ $model == mlp ]] && echo samples_per_s || echo tokens_per_s)
  local run_braid=("${benv[@]}" $braid train $model --steps "$steps" --threads "$t" --init-from "$init"
                   --json-log "$tmp/b.jsonl" -q "$@")
  local run_torch=("${benv[@]}" "$torch_blas" OMP_NUM_THREADS="$t" $py "$here/bench/torch_train.py" $model
                   --steps "$steps" --threads "$t" --init-from "$init" --json-log "$tmp/t.jsonl" "$@")
  for ((r = 0; r < reps; r++)); do
    if ((r % 2 == 0)); then
      "${run_braid[@]}" >/dev/null; "${run_torch[@]}" >/dev/null
    else
      "${run_torch[@]}" >/dev/null; "${run_braid[@]}" >/dev/null
    fi
    bt+=("$(field "$tmp/b.jsonl" $key)"); tt+=("$(field "$tmp/t.jsonl" $key)")
    br+=("$(field "$tmp/b.jsonl" peak_rss_bytes)"); tr+=("$(field "$tmp/t.jsonl" peak_rss_bytes)")
    # First losses from the same initial weights and data order, every rep.
    losses=$($py "$here/bench/same_losses.py" "$tmp/b.jsonl" "$tmp/t.jsonl" --rtol "$loss_rtol" \
               --what "$model, $t thread(s), rep $((r + 1))") || differ+=("$model, $t thread(s), rep $((r + 1)): $losses")
  done
  local b t2 rb rt
  b=$(median "${bt[@]}"); t2=$(median "${tt[@]}"); rb=$(median "${br[@]}"); rt=$(median "${tr[@]}")
  printf '| %s | %s | %.0f | %.0f | **%.2f×** | %.0f | %.0f | %.2f | %s | %s / %s |\n' "$model" "$t" "$b" "$t2" \
    "$($py -c "print($b/$t2)")" "$($py -c "print($rb/2**20)")" "$($py -c "print($rt/2**20)")" \
    "$($py -c "print($rb/$rt)")" "$losses" "$(field "$tmp/b.jsonl" blas_core)" "$(field "$tmp/t.jsonl" blas_core)"
}

echo "braid: $braid   torch: $($py -c 'import torch; print(torch.__version__)')   reps: $reps (median)"
. "$here/bench/blas_kernels.sh"
for setting in $blas_settings; do
  blas_env "$setting"
  echo; echo "$(blas_label "$setting")"
  echo
  echo "| model | threads | braid units/s | PyTorch units/s | braid/PyTorch | braid RSS MiB | PyTorch RSS MiB | RSS ratio | first 3 losses braid / PyTorch | BLAS kernels braid / PyTorch |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for t in $threads; do
    run_pair mlp "$t" "$mlp_steps"
    run_pair gpt "$t" "$gpt_steps" --layers 4 --d-model 256 --heads 4 --context 128 --batch 16
  done
done

if [[ ${ACC:-0} == 1 ]]; then
  # Both sides compute the same steps, but float rounding differs in the
  # last bits and 2 epochs of SGD amplify that: one run's accuracy moves by
  # ~0.003 with the thread count or BLAS kernels alone. So the recipe runs
  # once per seed (initial weights and data order) and compares means.
  seeds=${ACC_SEEDS:-"1 2 3 4 5"}
  echo
  echo "Accuracy recipe: MLP 784-512-512-10, 2 epochs, batch 256, SGD lr 0.05 momentum 0.9, 1 thread; per seed the same initial weights and data order on both sides"
  echo
  echo "| seed | braid test accuracy | PyTorch test accuracy |"
  echo "|---|---|---|"
  ab=() at=()
  for seed in $seeds; do
    init=$tmp/init_acc.ckpt
    "${benv[@]}" $braid train mlp --steps 1 --seed "$seed" --save-init "$init" -q >/dev/null
    "${benv[@]}" $braid train mlp --epochs 2 --seed "$seed" --init-from "$init" --json-log "$tmp/ba.jsonl" -q >/dev/null
    env "$torch_blas" OMP_NUM_THREADS=1 $py "$here/bench/torch_train.py" mlp --epochs 2 --seed "$seed" --init-from "$init" --json-log "$tmp/ta.jsonl" >/dev/null
    ab+=("$(field "$tmp/ba.jsonl" test_accuracy)"); at+=("$(field "$tmp/ta.jsonl" test_accuracy)")
    echo "| $seed | ${ab[-1]} | ${at[-1]} |"
  done
  $py - "${#ab[@]}" "${ab[@]}" "${at[@]}" <<'PY'
import statistics as st, sys
n = int(sys.argv[1]); b = [float(v) for v in sys.argv[2:2 + n]]; t = [float(v) for v in sys.argv[2 + n:]]
sd = lambda v: st.stdev(v) if len(v) > 1 else 0.0
print(f"| mean ± sd | {st.mean(b):.4f} ± {sd(b):.4f} | {st.mean(t):.4f} ± {sd(t):.4f} |")
PY
fi

if ((${#differ[@]})); then
  echo >&2
  echo "compare_torch.sh: braid and PyTorch computed different first losses (relative tolerance $loss_rtol):" >&2
  printf '  %s\n' "${differ[@]}" >&2
  exit 1
fi
