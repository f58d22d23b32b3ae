#!/usr/bin/env bash
# Runs every bench/compare_*.sh there is, one after another, against one
# build: `bench/run_all.sh [BUILD_DIR]` (`make bench` calls it). Each script
# prints its own tables; this one adds a summary line per script and exits
# non-zero when any of them did. Extra environment (QUICK=1, ROUNDS=N) is
# passed through.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$(cd "$here/.." && pwd)/build}
shopt -s nullglob
scripts=("$here"/compare_*.sh)
if ((${#scripts[@]} == 0)); then
  echo "run_all.sh: no bench/compare_*.sh" >&2
  exit 0
fi
summary=()
status=0
for s in "${scripts[@]}"; do
  name=$(basename "$s")
  echo "=== $name $build" >&2
  start=$SECONDS
  bash "$s" "$build"
  rc=$?
  ((rc != 0)) && status=1
  summary+=("$name: exit $rc, $((SECONDS - start)) s")
done
echo "=== summary" >&2
printf '  %s\n' "${summary[@]}" >&2
exit $status
