// The planner's measurement of this machine's device: the f32 GEMM rate of
// one core by size, which `braid bench --probe` keeps in the tuning file
// (braid/tuning.h) beside the links' α/β, and the `this-machine` preset
// reads in place of the generic curve.
#pragma once

#include <string>
#include <vector>

namespace braid::plan {

struct GemmSample {
  double flops = 0;      // 2·m·n·k of one product
  double flop_s = 0;     // its rate, best of a few
};

// Square f32 products, 32 to 1024 (×2), on one thread, through braid's
// own GEMM (kernels.h: OpenBLAS); the fastest of 3 timed runs each after
// one warm-up, each run at least 2 ms. About a tenth of a second. The
// thread count is restored afterwards. `core_share`, when given: the
// share of a core the thread had meanwhile (braid::CoreShare; well below
// 1: the core was shared with other work).
std::vector<GemmSample> probe_gemm(double* core_share = nullptr);

// Where the tuning cache (comm::default_tuning_path) has no GEMM curve
// yet, measures one and keeps it there, as a job's first communicator
// probes its links; `braid plan --cluster this-machine` calls it first.
// Not where the user chose the figures (BRAID_TUNING) or said
// BRAID_PROBE=0, and not kept when the probe shared its core
// (comm::kMinCoreShare). Returns a line saying what it did ("" when it did
// nothing). Throws Error(kIo) when the file cannot be written.
std::string keep_gemm_probe_if_missing();

// Tuning-file text with "gemm_f32_1thread": [[flops, GFLOP/s], ...] set
// from `samples`; other entries are kept; text that does not parse is
// replaced.
std::string merge_gemm_probe(const std::string& text, const std::vector<GemmSample>& samples);

// The samples in a tuning file's text (empty when it has none). Throws
// Error(kInvalidArgument) naming `from` for a malformed entry.
std::vector<GemmSample> gemm_probe_from(const std::string& text, const std::string& from);

}  // namespace braid::plan
