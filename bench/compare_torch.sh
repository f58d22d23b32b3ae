#!/usr/bin/env bash
# braid vs PyTorch, side by side in one run: the same model, batch, initial
# weights (braid writes them, PyTorch loads them), data order, optimizer and
# thread count. Both use the OpenMP build of OpenBLAS. Prints one line per
# run and the ratios (median of REPS alternating runs).
#
# Usage: bench/compare_torch.sh [BUILD_DIR]   (env: REPS=3 THREADS="1 2"
#        MLP_STEPS=300 GPT_STEPS=30 ACC=1 to also run the 2-epoch accuracy recipe
#        BLAS=both|machine|native)
#
# BLAS kernels (bench/blas_kernels.sh): each setting gets its own table;
# each row names the kernel set each side reported (braid's done record and
# torch_train.py's, both from openblas_get_corename), and the first losses
# show both still compute the same numbers.
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
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -x $braid ]] || { echo "build braid first: cmake --build $build --target braid_tool" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { $py -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])" "$1" "$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

run_pair() {  # model threads steps extra-args...
  local model=$1 t=$2 steps=$3; shift 3
  local init=$tmp/init_$model.ckpt
  $braid train $model --steps 1 --save-init "$init" -q "$@" >/dev/null
  local bt=() tt=() br=() tr=() key
  key=$([[ $model == mlp ]] && echo samples_per_s || echo tokens_per_s)
  for ((r = 0; r < reps; r++)); do
    OMP_NUM_THREADS=$t "${benv[@]}" $braid train $model --steps "$steps" --threads "$t" --init-from "$init" \
      --json-log "$tmp/b.jsonl" -q "$@" >/dev/null
    OMP_NUM_THREADS=$t "${benv[@]}" $py "$here/bench/torch_train.py" $model --steps "$steps" --threads "$t" \
      --init-from "$init" --json-log "$tmp/t.jsonl" "$@" >/dev/null
    bt+=("$(field "$tmp/b.jsonl" $key)"); tt+=("$(field "$tmp/t.jsonl" $key)")
    br+=("$(field "$tmp/b.jsonl" peak_rss_bytes)"); tr+=("$(field "$tmp/t.jsonl" peak_rss_bytes)")
  done
  local b t2 rb rt
  b=$(median "${bt[@]}"); t2=$(median "${tt[@]}"); rb=$(median "${br[@]}"); rt=$(median "${tr[@]}")
  # First-step losses from the same initial weights and data order.
  local l0b l0t
  l0b=$(head -3 "$tmp/b.jsonl" | $py -c "import json,sys; print(' '.join('%.5f' % json.loads(l)['loss'] for l in sys.stdin))")
  l0t=$(head -3 "$tmp/t.jsonl" | $py -c "import json,sys; print(' '.join('%.5f' % json.loads(l)['loss'] for l in sys.stdin))")
  printf '| %s | %s | %.0f | %.0f | **%.2f×** | %.0f | %.0f | %.2f | %s / %s | %s / %s |\n' "$model" "$t" "$b" "$t2" \
    "$($py -c "print($b/$t2)")" "$($py -c "print($rb/2**20)")" "$($py -c "print($rt/2**20)")" \
    "$($py -c "print($rb/$rt)")" "$l0b" "$l0t" "$(field "$tmp/b.jsonl" blas_core)" "$(field "$tmp/t.jsonl" blas_core)"
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
    $braid train mlp --steps 1 --seed "$seed" --save-init "$init" -q >/dev/null
    $braid train mlp --epochs 2 --seed "$seed" --init-from "$init" --json-log "$tmp/ba.jsonl" -q >/dev/null
    $py "$here/bench/torch_train.py" mlp --epochs 2 --seed "$seed" --init-from "$init" --json-log "$tmp/ta.jsonl" >/dev/null
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

