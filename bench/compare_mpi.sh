#!/usr/bin/env bash
# braid vs Open MPI, side by side in one run.
#
#   bench/compare_mpi.sh [BUILD_DIR] [--md FILE]
#
# Compiles bench/mpi_bench.c with mpicc (into BUILD_DIR/bench-mpi), then for
# each configuration runs `braid bench` and `mpi_bench` under mpirun one after
# the other, ROUNDS times, and prints markdown tables of the medians with
# PASS/FAIL lines for the project's targets (bench/compare_table.py).
#
# Environment:
#   QUICK=1        one round and fewer sizes/iterations (a smoke pass, ~2 min)
#   ROUNDS=N       rounds (default 3; QUICK sets 1)
#   KEEPMEM=0      skip the third column, "MPI*" (see below)
#   BRAID=0        skip braid (Open MPI's numbers alone)
#   ONLY=REGEX     run only the configurations whose name matches (e.g.
#                  ONLY=a2a2_shm; names: ar2_shm ar2_tcp ar4_over ar8_over
#                  ag2_shm rs2_shm bc2_shm a2a2_shm); targets of the others
#                  show as NOT RUN
#   RUN_TIMEOUT=S  seconds before one run is killed (default 300)
#   QUIET_WAIT=S   before each run, wait up to S seconds (default 60; at most
#                  QUIET_BUDGET=300 s over the whole script) for the machine
#                  to be idle (< 25% of the CPUs busy over 1 s); runs that
#                  start on a busy machine are counted in the report
#
# Open MPI is run as `mpirun -n N --bind-to none` (braid does not pin its
# ranks either; --oversubscribe when N exceeds the cores), with the defaults
# otherwise: ob1 + vader shared memory, or `--mca pml ob1 --mca btl self,tcp
# --mca btl_tcp_if_include lo` for TCP. "MPI*" is the same run with glibc told
# to keep freed memory (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_=16 GiB):
# on this VM a first touch of a page costs ~11 µs, and Open MPI's collectives
# malloc and free temporaries per call, which by default go back to the kernel
# (mmap'd above glibc's threshold, or trimmed), so MPI* is Open MPI at its
# best here. Targets are judged against plain defaults, as specified; the
# MPI* ratio is printed beside them.
# Exit status: 0 when every target that was run passes, 1 when one fails
# (a configuration braid crashed or timed out on fails, as does a braid
# binary that is missing or gives no rows, unless BRAID=0 left braid out),
# 2 on a usage or build error.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/braid_env.sh"  # clean_env: braid as a user runs it
root=$(cd "$here/.." && pwd)
build=""
md=""
while (($#)); do
  case "$1" in
    --md) md=${2:?--md needs a file}; shift 2 ;;
    --md=*) md=${1#--md=}; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "compare_mpi.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
build=${build:-$root/build}
build=$(cd "$build" 2>/dev/null && pwd || echo "$build")
quick=${QUICK:-0}
rounds=${ROUNDS:-3}
((quick)) && rounds=${ROUNDS:-1}
keepmem=${KEEPMEM:-1}
run_timeout=${RUN_TIMEOUT:-300}
quiet_wait=${QUIET_WAIT:-60}
quiet_budget=${QUIET_BUDGET:-300}
cores=$(nproc)

py=/usr/bin/python3
[[ -x $py ]] || py=python3
for tool in mpicc mpirun "$py"; do
  if ! command -v "$tool" >/dev/null; then
    echo "compare_mpi.sh: $tool not found (scripts/deps.sh bench installs Open MPI)" >&2
    exit 2
  fi
done

if mkdir -p "$build/bench-mpi" 2>/dev/null; then
  work="$build/bench-mpi"
else
  work=$(mktemp -d)
fi
mpicc -O2 -Wall -o "$work/mpi_bench" "$here/mpi_bench.c" || exit 2
results="$work/results.jsonl"
: >"$results"

braid="$build/braid"
have_braid=1
if [[ ${BRAID:-1} == 0 ]]; then
  have_braid=0
elif [[ ! -x "$braid" ]]; then
  echo "compare_mpi.sh: $braid not found; the braid column stays empty and its targets fail" >&2
  have_braid=0
elif ! "$braid" bench -n 2 --op all_reduce --min-bytes 8 --max-bytes 8 --dtype f32 \
        --iters 2 --warmup 1 --json 2>/dev/null | grep -q '"busbw_gbs"'; then
  echo "compare_mpi.sh: '$braid bench' gave no JSON rows; the braid column stays empty and its targets fail" >&2
  have_braid=0
fi

if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# Parts: config ranks op min-bytes max-bytes iters warmup transport. A config
# may have several parts (small sizes get many iterations, large ones few).
parts=()
if ((quick)); then
  parts+=("ar2_shm 2 all_reduce 8 1024 500 50 shm")
  parts+=("ar2_shm 2 all_reduce 16777216 67108864 5 1 shm")
  parts+=("ar2_tcp 2 all_reduce 8 8 100 10 tcp")
  parts+=("ar2_tcp 2 all_reduce 67108864 67108864 3 1 tcp")
  parts+=("ar4_over 4 all_reduce 16777216 16777216 5 1 shm")
  parts+=("ar8_over 8 all_reduce 16777216 16777216 3 1 shm")
  for c in "ag2_shm all_gather" "rs2_shm reduce_scatter" "bc2_shm broadcast" "a2a2_shm all_to_all"; do
    set -- $c
    parts+=("$1 2 $2 1048576 67108864 5 1 shm")
  done
else
  parts+=("ar2_shm 2 all_reduce 8 65536 2000 200 shm")
  parts+=("ar2_shm 2 all_reduce 131072 67108864 20 3 shm")
  parts+=("ar2_tcp 2 all_reduce 8 65536 100 10 tcp")
  parts+=("ar2_tcp 2 all_reduce 131072 67108864 5 1 tcp")
  parts+=("ar4_over 4 all_reduce 16777216 16777216 10 2 shm")
  parts+=("ar8_over 8 all_reduce 16777216 16777216 10 2 shm")
  for c in "ag2_shm all_gather" "rs2_shm reduce_scatter" "bc2_shm broadcast" "a2a2_shm all_to_all"; do
    set -- $c
    parts+=("$1 2 $2 1048576 67108864 20 3 shm")
  done
fi

if [[ -n ${ONLY:-} ]]; then
  kept=()
  for p in "${parts[@]}"; do [[ ${p%% *} =~ $ONLY ]] && kept+=("$p"); done
  ((${#kept[@]})) || { echo "compare_mpi.sh: ONLY=$ONLY matches no configuration" >&2; exit 2; }
  parts=("${kept[@]}")
fi

tools=()
((have_braid)) && tools+=(braid)
tools+=(mpi)
((keepmem)) && tools+=(mpi_keepmem)

# Percentage of CPU time not idle over the next second, all CPUs together.
cpu_busy() {
  local a b
  read -r -a a < <(grep '^cpu ' /proc/stat)
  sleep 1
  read -r -a b < <(grep '^cpu ' /proc/stat)
  local total=0 i
  for ((i = 1; i < ${#a[@]}; ++i)); do total=$((total + b[i] - a[i])); done
  local idle=$((b[4] - a[4] + b[5] - a[5]))
  ((total > 0)) && echo $((100 * (total - idle) / total)) || echo 0
}

# Waits (up to $quiet_wait s) for other work on the machine to stop, since
# one compiler in the background halves what two ranks on two cores get.
# Sets $busy to the last reading.
busy=0
wait_quiet() {
  local waited=0
  busy=$(cpu_busy)
  while ((busy >= 25 && waited < quiet_wait && quiet_budget > 0)); do
    sleep 2
    waited=$((waited + 3))
    quiet_budget=$((quiet_budget - 3))
    busy=$(cpu_busy)
  done
  ((busy >= 25)) && echo "  machine busy (${busy}% CPU) before $1; running anyway" >&2
  return 0
}

# One run of one tool; its JSON rows go to $results tagged with the config,
# the tool and the round. A failed run leaves an "error" line instead.
run_one() {
  local tool=$1 round=$2 part=$3
  shift
  local config=$3 n=$4 op=$5 lo=$6 hi=$7 iters=$8 warmup=$9 transport=${10}
  local cmd=()
  local args=(--op "$op" --min-bytes "$lo" --max-bytes "$hi" --dtype f32 --iters "$iters"
              --warmup "$warmup" --json)
  if [[ $tool == braid ]]; then
    # As a user runs it: nothing inherited from the shell's tuning.
    cmd=("${clean_env[@]}" "$braid" bench -n "$n" "${args[@]}")
    [[ $transport == tcp ]] && cmd+=(--transport tcp)
  else
    cmd=(mpirun -n "$n" --bind-to none)
    ((n > cores)) && cmd+=(--oversubscribe)
    [[ $transport == tcp ]] && cmd+=(--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo)
    [[ $tool == mpi_keepmem ]] && cmd+=(-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184)
    cmd+=("$work/mpi_bench" "${args[@]}")
  fi
  local out rc
  wait_quiet "$tool $config"
  out=$(timeout -k 10 "$run_timeout" "${cmd[@]}" 2>"$work/last.err")
  rc=$?
  local tag="\"config\":\"$config\",\"tool\":\"$tool\",\"round\":$round,\"part\":$part,\"n\":$n,\"busy\":$busy"
  printf '%s\n' "$out" | grep '^{' | sed "s/^{/{$tag,/" >>"$results"
  if ((rc != 0)); then
    local why="exit $rc"
    ((rc == 124 || rc == 137)) && why="timed out after ${run_timeout}s"
    local msg
    msg=$(tail -n 3 "$work/last.err" | tr '\n"\\' '   ' | cut -c1-200)
    printf '{%s,"error":"%s: %s"}\n' "$tag" "$why" "$msg" >>"$results"
    echo "  $tool $config $op $lo..$hi: $why" >&2
  fi
}

start=$SECONDS
echo "compare_mpi.sh: $rounds round(s), tools: ${tools[*]}, work dir $work" >&2
for ((r = 1; r <= rounds; ++r)); do
  for pi in "${!parts[@]}"; do
    set -- ${parts[pi]}
    # Alternate the order each round so that drift does not favour one side.
    if ((r % 2)); then order=("${tools[@]}"); else order=(); for ((i = ${#tools[@]} - 1; i >= 0; --i)); do order+=("${tools[i]}"); done; fi
    for t in "${order[@]}"; do
      run_one "$t" "$r" "$pi" "$@"
    done
  done
  echo "  round $r done at $((SECONDS - start)) s" >&2
done

command="bench/compare_mpi.sh"
((quick)) && command="QUICK=1 $command"
[[ -n ${ROUNDS:-} ]] && command="ROUNDS=$ROUNDS $command"
[[ -n ${ONLY:-} ]] && command="ONLY='$ONLY' $command"
((keepmem)) || command="KEEPMEM=0 $command"
command+=" BUILD_DIR${md:+ --md $md}"
table_args=("$results" --rounds "$rounds" --command "$command")
[[ ${BRAID:-1} == 0 ]] && table_args+=(--no-braid)
[[ -n $md ]] && table_args+=(--md "$md")
"$py" "$here/compare_table.py" "${table_args[@]}"
status=$?
echo "compare_mpi.sh: took $((SECONDS - start)) s; raw rows in $results" >&2
exit $status
