#!/usr/bin/env bash
# Small all_reduce with more ranks than cores: braid builds and Open MPI,
# alternating, one line each, µs per call at 64 B, 256 B, 1 KiB, 4 KiB,
# 16 KiB and 64 KiB.
#
#   bench/oversub_small.sh N BRAID [BRAID ...]     e.g. 8 build/braid /tmp/braid_old
#
# Open MPI's side is build/bench-mpi/mpi_bench (compare_mpi.sh builds it),
# run as `mpirun -n N --oversubscribe --bind-to none`; MPI_BENCH overrides
# the path. Run it twice or more: the rows move 10-30 % between rounds.
set -uo pipefail
n=${1:?usage: oversub_small.sh N BRAID [BRAID ...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
mpi=${MPI_BENCH:-$root/build/bench-mpi/mpi_bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source "$root/bench/braid_env.sh"  # clean_env: braid as a user runs it
for b in "$@"; do
  printf 'n=%s %s: ' "$n" "$b"
  "${clean_env[@]}" "$b" bench -n "$n" --op all_reduce -b 64 -e 64K -f 4 --iters 2000 -w 2000 |
    awk '!/^#/ && NR > 2 {printf "%s/%s ", $4, $8} END {print ""}'
done
if [ -x "$mpi" ]; then
  printf 'n=%s Open MPI: ' "$n"
  mpirun -n "$n" --oversubscribe --bind-to none "$mpi" --op all_reduce --min-bytes 64 \
    --max-bytes 65536 --iters 2000 --warmup 2000 2>/dev/null |
    python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
want = (64, 256, 1024, 4096, 16384, 65536)
print(" ".join("%.2f" % r["time_us"] for r in rows if r["bytes"] in want))'
else
  echo "no $mpi (run bench/compare_mpi.sh once, or set MPI_BENCH)"
fi
