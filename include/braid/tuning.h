// The α-β(-γ) figures braid's cost model picks algorithms by, where they
// come from, and how a link is measured for them. A job reads them once, at
// communicator creation; `braid bench --probe` measures and writes them;
// `braid doctor` shows them and compares the model's predictions with
// measured times.
//
// The figures are not raw hardware numbers: the model's formulas and their
// built-in values were fitted together against measured algorithm times on
// this project's reference VM (src/comm/algo/select.cc). A probe's raw
// numbers are compared with what the same probe measured there, and the
// built-in values are scaled by that ratio (src/comm/setup/probe.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace braid::comm {

struct LinkCost {
  double alpha_s = 1e-6;        // per message
  double beta_s_per_b = 1e-10;  // per byte
};

// One α-β per link class: "shm" (braid's shared memory, ranks of one
// host), "tcp" (TCP between ranks of one host: loopback) and "net" (TCP
// between hosts). A communicator whose ranks span hosts prices its TCP
// hops at `net`; one on a single host at `tcp`. A tuning file without a
// "net" entry gives net the tcp figures (so a file from before the class
// existed prices as it did).
struct CostParams {
  LinkCost shm{1.0e-6, 1.0 / 9e9};
  LinkCost tcp{20e-6, 1.0 / 3.5e9};
  LinkCost net{20e-6, 1.0 / 3.5e9};
  double gamma_s_per_b = 1.0 / 10e9;  // reduction
};

// The tuning file's text: BRAID_TUNING if set (an error if unreadable),
// else the probe's cache ($XDG_CACHE_HOME or
// ~/.cache/braid/tuning.json) if present, else "" (the built-in defaults).
std::string read_tuning();
// The text of the tuning file at `path`, or "" if it cannot be opened.
std::string read_tuning_file(const std::string& path);
// Cost parameters from a tuning file's text ("": the defaults); `from`
// names the file in errors. The same text gives the same bits everywhere.
CostParams parse_cost_params(const std::string& text, const std::string& from);
// The probe's cache path ("" without HOME or XDG_CACHE_HOME).
std::string default_tuning_path();

// The model's predicted seconds of `algo` for `collective` moving `bytes`
// (the collective's natural size, as Communicator's selector counts it) on
// `ranks` ranks of one host, all over shared memory, the host having
// `cores` cores; inf when the algorithm does not apply. Throws
// Error(kInvalidArgument) for an unknown collective.
double predict_one_host(const CostParams& p, const std::string& collective,
                        const std::string& algo, size_t bytes, int ranks, int cores);

// A group of ranks as the planner (include/braid/plan_cost.h) prices it:
// `ranks` over `hosts` hosts, at most `max_local` on one, `inner` the link
// between ranks of a host and `outer` the link between hosts (read only
// when hosts > 1), γ the reduction time per byte. inner_is_shm: the inner
// link is braid's shared memory (the chain all-reduce may run); cores: of
// a host (ranks beyond them take turns, as the selector prices it).
struct GroupLinks {
  int ranks = 1;
  int hosts = 1;
  int max_local = 1;
  int nics = 1;  // links out of a host its ranks spread their traffic over
  LinkCost inner, outer;
  double gamma_s_per_b = 1.0 / 10e9;
  bool inner_is_shm = false;
  int cores = 1 << 20;
  size_t chunk_bytes = size_t(1) << 20;  // the ring's pipelining chunk (BRAID_CHUNK_BYTES)
};
struct CollectivePrice {
  std::string algorithm;  // the registry entry the runtime would run
  double seconds = 0;     // its cost formula's prediction (0 for one rank)
};
// What a communicator shaped like `g` would run for `collective` (a name
// BRAID_ALGO takes, or "send") moving `bytes` of f32 (the collective's
// natural size, as predict_one_host), and that entry's predicted seconds:
// the runtime selector itself, built from `g`, so the planner and the
// runtime share one formula per algorithm. BRAID_DETERMINISTIC applies as
// it does at run time; BRAID_ALGO overrides do not (the price is the cost
// model's choice). Throws Error(kInvalidArgument) for an unknown
// collective or a group of no ranks.
CollectivePrice price_collective(const std::string& collective, size_t bytes, const GroupLinks& g);
// The same formula for the entry of `collective` named `algo`, whatever the
// selector would pick: its predicted seconds, inf when it cannot run on
// `g` (plan_sim.h checks the simulator against it). Throws
// Error(kInvalidArgument) for an unknown collective or algorithm.
double price_algorithm(const std::string& collective, const std::string& algo, size_t bytes,
                       const GroupLinks& g);

// What one probe measured on a link (raw, one way).
struct ProbeSample {
  double alpha_s = 0;      // 8-byte message
  double gbps = 0;         // 16 MiB message, α removed
  double reduce_gbps = 0;  // f32 sum of two 8 MiB buffers, in place
  // The smaller of the two ranks' shares of a core while the messages
  // ran (1 − time waiting for a core / wall time); well below 1
  // means the ranks shared cores with other work and the figures describe
  // that moment, not the machine.
  double core_share = 0;
};

// Below this core share a probe is not used (see ProbeSample::core_share).
constexpr double kMinCoreShare = 0.8;

// A probe's message buffer of `bytes` (a multiple of 2 MiB), on huge pages
// where the kernel allows them: 8 faults for 16 MiB instead of 4096, which
// on a VM cost more than the whole measurement. Error(kIo) if it cannot be
// had.
std::unique_ptr<uint8_t, void (*)(void*)> probe_buffer(size_t bytes);

// `iters` round trips of `bytes` from `buf` (the leader sends first, the
// other echoes into the same buffer): seconds one way, on either rank.
double round_trip_s(bool leader, const std::function<void(const void*, size_t)>& send,
                    const std::function<void(void*, size_t)>& recv, void* buf, size_t bytes,
                    int iters);

// Runs on both ranks of one link. The leader times; the other echoes.
// send / recv move `bytes` to / from the other rank. Returns the sample on
// the leader (zeros on the other). About 20 ms over shared memory.
ProbeSample probe_link(bool leader, const std::function<void(const void*, size_t)>& send,
                       const std::function<void(void*, size_t)>& recv);
// The model's parameters for link class `kind` ("shm", "tcp" or "net")
// from a sample: the built-in ones scaled by sample / reference ("net" is
// compared with TCP's reference, the same transport).
LinkCost calibrate_link(const std::string& kind, const ProbeSample& s);
double calibrate_reduce_gbps(const std::string& kind, const ProbeSample& s);
// Tuning-file text with the model parameters of link class `kind` (and
// reduce_gbps: rank 0's own sum) set from `s`, and the raw sample kept under "probed" (for people: the
// selector reads only the model values). Other entries are kept; text that
// does not parse is replaced.
std::string merge_probe(const std::string& text, const std::string& kind, const ProbeSample& s,
                        const std::string& host);
// Writes `text` to `path` atomically (a temporary file, then rename),
// creating the directory.
void write_tuning(const std::string& path, const std::string& text);
// Whether braid may measure this machine and keep what it saw in the
// tuning cache by itself: not when BRAID_TUNING names a file (the user
// chose the figures) or BRAID_PROBE=0. A job's first communicator (its
// links) and `braid plan`'s first this-machine plan (its GEMMs) ask.
bool may_probe();

}  // namespace braid::comm
