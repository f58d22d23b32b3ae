// The planner's measurement of this machine's device: the f32 GEMM rate of
// one core by size, which `braid bench --probe` keeps in the tuning file
// (braid/tuning.h) beside the links' α/β, and the `this-machine` preset
// reads in place of the generic curve.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
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

// Where the tuning cache (comm::default_tuning_path) lacks the GEMM curve
// or the element-wise rates (probe_elementwise, below), measures both and
// keeps them there, as a job's first communicator
// probes its links; `braid plan --cluster this-machine` calls it first.
// Not where the user chose the figures (BRAID_TUNING) or said
// BRAID_PROBE=0, and not kept when the probe shared its core
// (comm::kMinCoreShare). Returns a line saying what it did ("" when it did
// nothing). Throws Error(kIo) when the file cannot be written.
std::string keep_device_probe_if_missing();

// Tuning-file text with "gemm_f32_1thread": [[flops, GFLOP/s], ...] set
// from `samples`; other entries are kept; text that does not parse is
// replaced.
std::string merge_gemm_probe(const std::string& text, const std::vector<GemmSample>& samples);

// The samples in a tuning file's text (empty when it has none). Throws
// Error(kInvalidArgument) naming `from` for a malformed entry.
std::vector<GemmSample> gemm_probe_from(const std::string& text, const std::string& from);

// One core's rates for the memory-bound passes of braid's GPT block and
// its optimizer, each timed through the kernels the layers run and given
// in the bytes the planner counts for that pass (docs/PLAN.md, "The cost
// model": a pass's forward moves its count, its backward twice that):
// what `this-machine` prices element-wise work with in place of an
// assumed memory bandwidth.
struct ElementwiseSample {
  // Fused residual add + layer norm (LayerNorm::forward_add and
  // backward_add): 5 elements a token and channel forward.
  double norm_gbps = 0;
  // The MLP's bias + GELU (fused into its first Linear): 2 elements of
  // the [tokens, 4·d] product forward.
  double gelu_gbps = 0;
  // The attention's causal softmax: 3 elements a score forward.
  double softmax_gbps = 0;
  // AdamW's update: 28 bytes a parameter (w, g, m, v read; w, m, v
  // written); a step, no backward.
  double optimizer_gbps = 0;
  double core_share = 0;  // as GemmSample's probe reports it
};

// At the default GPT's shapes (2048 tokens, d_model 256, 4 heads, context
// 128; AdamW over 2^20 parameters), one thread, each pass over 8 copies of
// its buffers in turn (about 80 MiB: beyond the last-level cache, as a
// step's activations are); the best of 3 timed runs after a warm-up. About
// half a second, most of it the buffers' first touch. The thread count is
// restored afterwards.
ElementwiseSample probe_elementwise();

// Tuning-file text with "elementwise_f32_1thread": {...} set from `s`
// (GB/s); other entries are kept; text that does not parse is replaced.
std::string merge_elementwise_probe(const std::string& text, const ElementwiseSample& s);

// The sample in a tuning file's text (nullopt when it has none). Throws
// Error(kInvalidArgument) naming `from` and the field for a malformed one.
std::optional<ElementwiseSample> elementwise_probe_from(const std::string& text,
                                                        const std::string& from);

// The memory a host's CPU ranks copy through, as braid's shared-memory
// wire uses it: what the simulator prices those ranks' copies and
// reductions with on `this-machine` (docs/PLAN.md, "The simulator"). A
// message between two ranks of a host is the sender's copy into a slot and
// the receiver's copy out, on their two cores at once; how fast depends on
// whether the ranks' buffers fit in the last-level cache.
struct MemorySample {
  double cached_gbps = 0;      // one way, 1 MiB messages: both ranks' buffers in the cache
  double beyond_gbps = 0;      // one way, 64 MiB messages: the buffers far beyond it
  double beyond_ws_bytes = 0;  // both ranks' buffers in the latter (2 × 64 MiB)
  double reduce_gbps = 0;      // f32 a += b in the last-level cache (2 × 4 MiB), one core
  double llc_bytes = 0;        // the last-level cache (last_level_cache_bytes)
  // The smaller of the two ranks' shares of a core meanwhile (as
  // comm::ProbeSample's): below comm::kMinCoreShare the rates describe
  // other work's load, and `braid bench --probe` does not keep them.
  double core_share = 0;
};

// The largest cache of CPU 0 in sysfs (the last level), in bytes; 0 when
// sysfs does not say.
double last_level_cache_bytes();

// Runs on both ranks of a shared-memory pair, as comm::probe_link does
// (the leader times, the other echoes; `send` and `recv` block): the
// one-way rate of round trips of 1 MiB (the best of 15 runs of 20) and of
// 64 MiB (the best of 6), in a 64 MiB buffer on huge pages where the
// kernel allows them, and the leader's reduction rate (the best of 3
// bursts of 8); each figure's trials spread over three rounds. About
// 0.2 s. The other rank returns zeros.
MemorySample probe_memory(bool leader, const std::function<void(const void*, size_t)>& send,
                          const std::function<void(void*, size_t)>& recv);

// Tuning-file text with "shm_memory": {...} set from `s`; other entries
// are kept; text that does not parse is replaced.
std::string merge_memory_probe(const std::string& text, const MemorySample& s);

// The sample in a tuning file's text (nullopt when it has none). Throws
// Error(kInvalidArgument) naming `from` and the field for a malformed one.
std::optional<MemorySample> memory_probe_from(const std::string& text, const std::string& from);

}  // namespace braid::plan
