#!/usr/bin/env bash
# Runs every benchmark behind a table of docs/PERFORMANCE.md, one after
# another, against one build: `bench/run_all.sh [BUILD_DIR]` (`make bench`
# calls it). TIER=full (the default) runs each as PERFORMANCE.md's tables
# were taken; TIER=quick runs each once, small (a smoke pass that every
# script still works end to end, not figures to report). ONLY="ps.sh ..."
# runs some. bench/README.md says what each measures. Each script prints its
# own tables; this one adds a summary line per script and exits non-zero
# when any of them did.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$(cd "$here/.." && pwd)/build}
tier=${TIER:-full}
# script, then its quick-tier environment (the full tier uses its defaults).
plan=(
  "compare_mpi.sh|QUICK=1"
  "compare_torch.sh|REPS=1 THREADS=1 BLAS=machine"
  "compare_ddp.sh|REPS=1 MLP_STEPS=60 GPT_STEPS=10 BF16_STEPS=40 BLAS=machine"
  "torch_backend.sh|REPS=1 DDP_STEPS=60 ENVS=user"
  "thread_scaling.sh|ROUNDS=1 GPT_STEPS=10"
  "model_parallel.sh|ROUNDS=1"
  "moe.sh|ROUNDS=1 STEPS=6 SPEED_STEPS=3"
  "mixed_precision.sh|REPS=1 STEPS=4 D_MODEL=256 CONTEXT=64"
  "ps.sh|REPS=1 HOT_STEPS=40"
  "ps_failover.sh|REPS=1"
  "dlrm_hybrid.sh|REPS=1 STEPS=20 ROWS=20000 BIG=0"
  "across_hosts.sh|ROUNDS=1 CONFIGS=2x2"
)
case $tier in quick | full) ;; *) echo "run_all.sh: TIER is quick or full, not '$tier'" >&2; exit 2 ;; esac
summary=()
status=0
for entry in "${plan[@]}"; do
  name=${entry%%|*}
  [[ -n ${ONLY:-} && " $ONLY " != *" $name "* ]] && continue
  quick_env=()
  [[ $tier == quick ]] && read -ra quick_env <<<"${entry#*|}"
  echo "=== $name ($tier) $build" >&2
  start=$SECONDS
  env "${quick_env[@]}" bash "$here/$name" "$build"
  rc=$?
  ((rc != 0)) && status=1
  summary+=("$name: exit $rc, $((SECONDS - start)) s")
done
echo "=== summary" >&2
printf '  %s\n' "${summary[@]}" >&2
exit $status
