// Transport microbenchmark: 2 ranks, for each wire (BENCH_MODES=auto,tcp):
// ping-pong latency of 8 bytes, uni- and bidirectional bandwidth and
// recv-reduce throughput of BENCH_BYTES (default 64 MiB), straight on the
// transport (no collectives). Build: cmake --build BUILD --target
// transport_microbench; run: BUILD/transport_microbench.
#include "comm/transport_microbench.h"

int main() {
  braid::comm::tutil::run_microbenchmark();
  return 0;
}
