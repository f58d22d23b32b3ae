# Sourced by compare_torch.sh and compare_ddp.sh: which OpenBLAS kernel sets
# to compare under. This project's machines may set OPENBLAS_CORETYPE (and
# OPENBLAS_L2_SIZE), pinning OpenBLAS to an older kernel set for the sake of
# old builds that misbehave on newer CPUs (Haswell on an AVX-512 CPU here).
#   BLAS=machine  both sides with the environment as set
#   BLAS=native   both variables unset for both sides, in the benchmark's
#                 commands alone: OpenBLAS picks the kernels for the CPU
#                 (PyTorch at its best on this hardware)
#   BLAS=both     (default) one table for each, or just "machine" when
#                 neither variable is set
# Sets $blas_settings; blas_env SETTING sets the array $benv, the prefix that
# runs a command under SETTING.
blas=${BLAS:-both}
case $blas in
  machine | native) blas_settings=$blas ;;
  both) blas_settings="machine native" ;;
  *) echo "BLAS must be both, machine or native (got $blas)" >&2; exit 2 ;;
esac
[[ -z ${OPENBLAS_CORETYPE:-}${OPENBLAS_L2_SIZE:-} && $blas == both ]] && blas_settings=machine

# Neither side inherits the library path or OpenMP tuning of the shell that
# runs the benchmark: braid runs as a user runs it, and the rival's own
# settings (its LD_LIBRARY_PATH, OMP_NUM_THREADS) are added after this prefix.
. "$(dirname "${BASH_SOURCE[0]}")/braid_env.sh"
blas_env() {
  benv=("${clean_env[@]}")
  [[ $1 == native ]] && benv+=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
  return 0
}

# A line naming the setting, for the heading of its table.
blas_label() {
  if [[ $1 == native ]]; then
    echo "native BLAS kernels (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for both sides)"
  else
    echo "BLAS kernels as the environment sets them (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
  fi
}
