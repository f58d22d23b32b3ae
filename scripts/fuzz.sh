#!/usr/bin/env bash
# Runs each libFuzzer target (fuzz/<name>_fuzz.cc) for a bounded time or
# number of executions and reports, per target: executions, seconds,
# libFuzzer's coverage (cov:, edges) and features (ft:), and findings
# (crash, leak, timeout or out-of-memory inputs libFuzzer wrote).
#
#   scripts/fuzz.sh [BUILD] [SECONDS] [RUNS] [TARGETS...]
#     BUILD    a BRAID_FUZZ=ON build (default build-fuzz; `make fuzz`)
#     SECONDS  per target (default 10; 0: no time bound)
#     RUNS     per target (default 0: no bound)
#
# Each target starts from fuzz/corpus/<name>/ and fuzz/regressions/<name>/
# (read only: new inputs go to a scratch directory). Findings are copied to $FUZZ_OUT/findings/<name>/
# (FUZZ_OUT default: a fresh /tmp directory, kept); fix each, then move
# its input to fuzz/regressions/<name>/, which `make test` replays
# (tests/fuzz/replay_test.cc). Exits 1 if any target found anything.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-fuzz}
SECS=${2:-10}
RUNS=${3:-0}
shift $(( $# > 3 ? 3 : $# ))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cc; do n=$(basename "$f" _fuzz.cc); targets+=("$n"); done
fi
OUT=${FUZZ_OUT:-$(mktemp -d /tmp/braid_fuzz_XXXXXX)}
mkdir -p "$OUT"
found=0
printf '%-14s %12s %8s %8s %8s %s\n' target execs seconds cov ft findings
for t in "${targets[@]}"; do
  bin="$BUILD/fuzz/${t}_fuzz"
  if [ ! -x "$bin" ]; then echo "$t: $bin not built (make fuzz)" >&2; found=1; continue; fi
  work="$OUT/$t"
  rm -rf "$work"; mkdir -p "$work/corpus" "$work/artifacts"
  seeds=()
  [ -d "fuzz/corpus/$t" ] && seeds=("fuzz/corpus/$t")
  [ -d "fuzz/regressions/$t" ] && seeds+=("fuzz/regressions/$t")
  args=(-artifact_prefix="$work/artifacts/" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1)
  [ "$SECS" != 0 ] && args+=(-max_total_time="$SECS")
  [ "$RUNS" != 0 ] && args+=(-runs="$RUNS")
  # ps_frame's and ps_shm's server threads outlive an input by a moment, and
  # libFuzzer's per-input leak check reads their live buffers as leaks
  # (docs/FUZZING.md); the check at exit suppresses OpenSSL's per-thread
  # state (fuzz/ps_server.lsan).
  lsan=${LSAN_OPTIONS:-}
  if [ "$t" = ps_frame ] || [ "$t" = ps_shm ]; then
    args+=(-detect_leaks=0)
    lsan="suppressions=$PWD/fuzz/ps_server.lsan${lsan:+:$lsan}"
  fi
  start=$(date +%s)
  LSAN_OPTIONS=$lsan BRAID_LOG_LEVEL=${BRAID_LOG_LEVEL:-error} "$bin" "${args[@]}" "$work/corpus" "${seeds[@]}" >"$work/log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
  last=$(grep -E '^#[0-9]+' "$work/log" | tail -n 1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  n=$(find "$work/artifacts" -type f | wc -l)
  if [ "$rc" != 0 ] || [ "$n" != 0 ]; then
    found=1
    mkdir -p "$OUT/findings/$t"
    cp "$work"/artifacts/* "$OUT/findings/$t/" 2>/dev/null
    n="$n (exit $rc; log $work/log)"
  fi
  printf '%-14s %12s %8s %8s %8s %s\n' "$t" "${execs:-?}" "$secs" "${cov:-?}" "${ft:-?}" "$n"
done
echo "logs and findings: $OUT"
exit $found
