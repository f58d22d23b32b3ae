#!/usr/bin/env bash
# braid data parallel vs PyTorch DistributedDataParallel (gloo), side by side
# in one run: same model, initial weights (braid writes them, PyTorch loads
# them), data order, global batch, optimizer and threads per rank (1 thread
# x N ranks). Each figure is the median of REPS runs; odd reps run braid's
# commands first, even ones PyTorch's, so that drift favours neither side.
#
# braid runs as a user runs it: `braid train ... --threads 1`, with nothing
# added to its environment. PyTorch runs at its best (/work/shared/RIVALS.md):
# with the OpenMP build of OpenBLAS on LD_LIBRARY_PATH and OMP_NUM_THREADS=1,
# set for its commands alone.
#
# Both sides must compute the same numbers: the first 3 losses of the global
# batch at dp=2 and dp=1 are compared in every rep (bench/same_losses.py,
# relative tolerance LOSS_RTOL, default 1e-4); the script exits 1 when any
# pair differs, after printing every table.
#
# Prints markdown tables:
#   1. throughput at dp=2 and the 1-rank references, ratios, scaling factors,
#      braid's exposed communication: its default (buckets; reduced in the
#      background when the host has a core to spare, else inline), buckets
#      forced into the background (overlapping backward), and the plain scheme;
#   2. per-rank bytes of parameters + gradients + optimizer state for ZeRO
#      0/1/2/3 at dp=2 and 4 (GPT, AdamW) against one process: one run per
#      row, since these are the trainer's own accounting of what it holds,
#      the same in every run;
#   3. bf16 gradient communication: tokens/s and exposed communication
#      (medians of REPS runs) and the mean loss of the last 20 of 200 steps.
#
# Usage: bench/compare_ddp.sh [BUILD_DIR]
#   env: REPS=3 MLP_STEPS=300 GPT_STEPS=40 BF16_STEPS=200 SECTIONS="speed memory bf16"
#        MODELS="mlp gpt" BLAS=both|machine|native
#   BLAS: the throughput table with OpenBLAS's kernels as this machine's
#   environment pins them (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE), with both
#   variables unset for both sides (native: the kernels OpenBLAS picks for
#   the CPU, PyTorch at its best), or both (default; see compare_torch.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
braid=$build/braid
reps=${REPS:-3}
mlp_steps=${MLP_STEPS:-300}
gpt_steps=${GPT_STEPS:-40}
bf16_steps=${BF16_STEPS:-200}
sections=${SECTIONS:-"speed memory bf16"}
models=${MODELS:-"mlp gpt"}
py=/usr/bin/python3

if ! $py -c "import torch" 2>/dev/null || [[ ! -d /usr/lib/x86_64-linux-gnu/openblas-openmp ]]; then
  apt-get install -y python3-torch libopenblas0-openmp >/dev/null
fi
# PyTorch's environment (RIVALS.md); braid's commands get none of it.
torch_env=(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
           OMP_NUM_THREADS=1)
loss_rtol=${LOSS_RTOL:-1e-4}
differ=()
[[ -x $braid ]] || { echo "build braid first: cmake --build $build --target braid_tool" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# field FILE KEY: KEY of FILE's last (done) record, the largest where it is
# per rank. A missing key stops the whole script: printed as 0 it would read
# as a flattering figure (no exposed communication, no optimizer state).
field() {
  $py -c "import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); v=d[sys.argv[2]] if sys.argv[2] in d else sys.exit('no %s in the last record of %s' % (sys.argv[2], sys.argv[1])); print(max(v) if isinstance(v, list) else v)" "$1" "$2" ||
    { echo "compare_ddp.sh: stopped, a figure is missing" >&2; kill -TERM $$; exit 1; }
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
calc() { $py -c "print($1)"; }
load() { cut -d' ' -f1 /proc/loadavg; }

. "$here/bench/blas_kernels.sh"

gpt_args=(--layers 4 --d-model 256 --heads 4 --context 128 --batch 16)
"${clean_env[@]}" $braid train mlp --steps 1 --save-init "$tmp/mlp.ckpt" -q >/dev/null
"${clean_env[@]}" $braid train gpt --steps 1 --save-init "$tmp/gpt.ckpt" -q "${gpt_args[@]}" >/dev/null

echo "braid: $braid   torch: $($py -c 'import torch; print(torch.__version__)')   reps: $reps (median)   $(nproc --all) cores   load at start: $(load)"

if [[ " $sections " == *" speed "* ]]; then
  for setting in $blas_settings; do
    blas_env "$setting"
    declare -A res kern losses
    for model in $models; do
      if [[ $model == mlp ]]; then steps=$mlp_steps; extra=(); key=samples_per_s; else steps=$gpt_steps; extra=("${gpt_args[@]}"); key=tokens_per_s; fi
      init=$tmp/$model.ckpt
      declare -a b2=() b2p=() b2o=() b1=() t2=() t1=() e2=() e2p=() e2o=()
      btrain=("${benv[@]}" $braid train $model --threads 1 --steps "$steps" --init-from "$init" -q)
      ttrain=("${benv[@]}" "${torch_env[@]}" $py "$here/bench/torch_ddp.py" $model --threads 1 --steps "$steps" --init-from "$init")
      for ((r = 0; r < reps; r++)); do
        braid_runs() {
          "${btrain[@]}" --dp 2 --json-log "$tmp/b2.jsonl" "${extra[@]}" >/dev/null
          "${btrain[@]}" --dp 2 --no-overlap --json-log "$tmp/b2p.jsonl" "${extra[@]}" >/dev/null
          "${btrain[@]}" --dp 2 --bucket-reduce background --json-log "$tmp/b2o.jsonl" "${extra[@]}" >/dev/null
          "${btrain[@]}" --dp 1 --json-log "$tmp/b1.jsonl" "${extra[@]}" >/dev/null
        }
        torch_runs() {
          "${ttrain[@]}" --dp 2 --json-log "$tmp/t2.jsonl" "${extra[@]}" >/dev/null
          "${ttrain[@]}" --dp 1 --json-log "$tmp/t1.jsonl" "${extra[@]}" >/dev/null
        }
        if ((r % 2 == 0)); then braid_runs; torch_runs; else torch_runs; braid_runs; fi
        for d in 2 1; do
          what="$model dp=$d, BLAS $setting, rep $((r + 1))"
          out=$($py "$here/bench/same_losses.py" "$tmp/b$d.jsonl" "$tmp/t$d.jsonl" --rtol "$loss_rtol" --what "$what") ||
            differ+=("$what: $out")
          [[ $d == 2 ]] && losses[$model]=$out
        done
        b2+=("$(field "$tmp/b2.jsonl" $key)"); t2+=("$(field "$tmp/t2.jsonl" $key)")
        b2p+=("$(field "$tmp/b2p.jsonl" $key)"); b1+=("$(field "$tmp/b1.jsonl" $key)")
        t1+=("$(field "$tmp/t1.jsonl" $key)")
        e2+=("$(field "$tmp/b2.jsonl" exposed_comm_fraction)"); e2p+=("$(field "$tmp/b2p.jsonl" exposed_comm_fraction)")
        b2o+=("$(field "$tmp/b2o.jsonl" $key)"); e2o+=("$(field "$tmp/b2o.jsonl" exposed_comm_fraction)")
      done
      mode=$([[ $(field "$tmp/b2.jsonl" overlap) == True ]] && echo background || echo inline)
      kern[$model]="$(field "$tmp/b2.jsonl" blas_core) / $(field "$tmp/t2.jsonl" blas_core)"
      res[$model]="$(median "${b2[@]}") $(median "${t2[@]}") $(median "${b2p[@]}") $(median "${b1[@]}") $(median "${t1[@]}") $(median "${e2[@]}") $(median "${e2p[@]}") $(median "${b2o[@]}") $(median "${e2o[@]}") $mode"
      unset b2 b2p b2o b1 t2 t1 e2 e2p e2o
    done
    echo
    echo "### Throughput, 2 ranks x 1 thread, $(blas_label "$setting") (load at end: $(load))"
    echo
    echo "| model | unit | braid dp=2 | PyTorch DDP dp=2 | braid / DDP | braid dp=1 | PyTorch dp=1 | braid scaling T2/(2·T1) | DDP scaling | braid exposed comm (buckets, default reduce) | braid buckets in background dp=2 | background exposed comm | braid plain scheme dp=2 | plain exposed comm | BLAS kernels braid / PyTorch | first 3 losses dp=2 braid / PyTorch |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for model in $models; do
      read -r b2 t2 b2p b1 t1 e2 e2p b2o e2o mode <<<"${res[$model]}"
      unit=$([[ $model == mlp ]] && echo samples/s || echo tokens/s)
      printf '| %s | %s | %.0f | %.0f | **%.2f×** | %.0f | %.0f | **%.2f** | %.2f | %.1f%% (%s) | %.0f | %.1f%% | %.0f | %.1f%% | %s | %s |\n' \
        "$model" "$unit" "$b2" "$t2" "$(calc "$b2/$t2")" "$b1" "$t1" "$(calc "$b2/(2*$b1)")" \
        "$(calc "$t2/(2*$t1)")" "$(calc "100*$e2")" "$mode" "$b2o" "$(calc "100*$e2o")" "$b2p" "$(calc "100*$e2p")" "${kern[$model]}" "${losses[$model]}"
    done
  done
fi

if [[ " $sections " == *" memory "* ]]; then
  echo
  echo "### Per-rank training state (GPT 4x256, AdamW): parameters + gradients + optimizer state"
  echo
  echo "One run per row: the figures are the trainer's accounting of the buffers it holds (peak transient: the largest set of temporary buffers alive at once), the same in every run."
  echo
  echo "| dp | ZeRO | params MiB | grads MiB | optimizer MiB | total MiB | single process MiB | total / (single/dp) | peak transient MiB |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for dp in 2 4; do
    for z in 0 1 2 3; do
      "${benv[@]}" $braid train gpt --dp $dp --zero $z --threads 1 --steps 2 --init-from "$tmp/gpt.ckpt" -q --json-log "$tmp/m.jsonl" "${gpt_args[@]}" >/dev/null
      p=$(field "$tmp/m.jsonl" param_bytes); g=$(field "$tmp/m.jsonl" grad_bytes); o=$(field "$tmp/m.jsonl" optim_bytes)
      s=$(field "$tmp/m.jsonl" single_process_state_bytes); tr=$(field "$tmp/m.jsonl" peak_transient_bytes)
      printf '| %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f | %.2f |\n' $dp $z \
        "$(calc "$p/2**20")" "$(calc "$g/2**20")" "$(calc "$o/2**20")" "$(calc "($p+$g+$o)/2**20")" \
        "$(calc "$s/2**20")" "$(calc "($p+$g+$o)/($s/$dp)")" "$(calc "$tr/2**20")"
    done
  done
fi

if [[ " $sections " == *" bf16 "* ]]; then
  echo
  echo "### bf16 gradient communication, GPT dp=2, $bf16_steps steps (load: $(load))"
  echo
  echo "tokens/s and exposed comm: medians of $reps runs; the loss is the same in every run (same weights, data and arithmetic)."
  echo
  echo "| gradients on the wire | ZeRO | gradient payload per step | tokens/s | exposed comm | mean loss of steps $((bf16_steps-19))–$bf16_steps |"
  echo "|---|---|---|---|---|---|"
  for z in 0 2; do
    for mode in f32 bf16; do
      flag=(); [[ $mode == bf16 ]] && flag=(--bf16-grads)
      toks=() exs=()
      for ((r = 0; r < reps; r++)); do
        "${benv[@]}" $braid train gpt --dp 2 --zero $z --threads 1 --steps "$bf16_steps" --init-from "$tmp/gpt.ckpt" -q --json-log "$tmp/bf.jsonl" "${gpt_args[@]}" "${flag[@]}" >/dev/null
        toks+=("$(field "$tmp/bf.jsonl" tokens_per_s)"); exs+=("$(field "$tmp/bf.jsonl" exposed_comm_fraction)")
      done
      g=$(field "$tmp/bf.jsonl" single_process_state_bytes)
      tok=$(median "${toks[@]}"); ex=$(median "${exs[@]}")
      # mean loss of the last 20 steps (one batch's loss is noisy)
      l=$($py -c "import json,sys; L=[json.loads(x) for x in open(sys.argv[1])]; L=[d['loss'] for d in L if 'loss' in d][-20:]; print(sum(L)/len(L))" "$tmp/bf.jsonl")
      # gradient payload: one parameter-sized buffer, 4 or 2 bytes per element
      pb=$(calc "$g/4/4*$([[ $mode == bf16 ]] && echo 2 || echo 4)/2**20")
      printf '| %s | %d | %.2f MiB | %.0f | %.1f%% | %.4f |\n' $mode $z "$pb" "$tok" "$(calc "100*$ex")" "$l"
    done
  done
fi

if ((${#differ[@]})); then
  echo >&2
  echo "compare_ddp.sh: braid and PyTorch computed different first losses (relative tolerance $loss_rtol):" >&2
  printf '  %s\n' "${differ[@]}" >&2
  exit 1
fi
