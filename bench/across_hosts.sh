#!/usr/bin/env bash
# all_reduce across namespaced test hosts, braid (auto and each algorithm
# forced) beside Open MPI over the same wire, and one TCP stream for the
# wire's own figure: `bench/across_hosts.sh [BUILD_DIR]`. Builds the
# across_hosts target (bench/across_hosts.cc says what it runs) and runs
# ROUNDS (default 3) rounds of CONFIGS (default "2x1 2x2 3x2", hosts x
# ranks). Needs root and mpicc (scripts/deps.sh bench). Measure on a quiet
# machine: the hosts share its cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$(cd "$here/.." && pwd)/build}
cmake --build "$build" --target across_hosts braid_tool -j "$(nproc)" >/dev/null
read -ra configs <<<"${CONFIGS:-2x1 2x2 3x2}"
# braid (and everything the bench starts) runs as a user runs it: none of the
# caller's library path or OpenMP settings (braid_env.sh).
source "$here/braid_env.sh"
exec "${clean_env[@]}" "$build/across_hosts" "${ROUNDS:-3}" "${configs[@]}"
