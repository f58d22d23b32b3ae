// braid bench: collective benchmark in the manner of nccl-tests.
//
// Started plainly, it forks N ranks itself under launch::Supervisor
// (meeting through a private file store); started under `braid run`,
// torchrun, mpirun or srun (BRAID_RANK, RANK, ... set), it joins that job. Rank 0 prints one row per size: bytes,
// count, dtype, time (the slowest rank's mean per iteration), algbw, busbw
// (nccl-tests' factors) and the number of wrong elements — every size's
// last timed call is checked against the exact expected result.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/reduce.h"
#include "braid/supervisor.h"
#include "sizes.h"
#include "subcommands.h"

namespace braid::tool {
namespace {

struct Opts {
  int n = 2;
  std::string op = "all_reduce";
  size_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  std::string dtype = "f32";
  std::string reduce = "sum";
  std::string algo = "auto";
  std::string transport = "auto";
  int iters = 20, warmup = 5;
  double warmup_s = 0;
  bool json = false;
  bool check = true;
  bool probe = false;
  bool shared = false;
  std::string probe_out;
};

const std::vector<std::string> kOps = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                       "reduce",     "all_to_all", "gather",         "scatter"};

// nccl-tests' bus-bandwidth factors.
double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return double(n - 1) / n;
  if (op == "gather" || op == "scatter") return double(n - 1) / n;
  return 1.0;
}

// Value rank r contributes at element i: small integers, so every reduction
// of up to 8 ranks is exact in every dtype.
double pattern(int r, size_t i) { return double(int((r * 3 + i) % 5) - 1); }

void fill(void* buf, size_t count, DType t, int r, size_t base = 0) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t es = dtype_size(t);
  for (size_t i = 0; i < count; ++i) {
    double v = pattern(r, base + i);
    dtype_store(p + i * es, t, t == DType::kU8 ? v + 1 : v);
  }
}

// Expected output element: reduce the patterns of all ranks with the same
// kernels (one element at a time, in rank order).
void expected(void* out, size_t count, DType t, ReduceOp op, int n, size_t base) {
  size_t es = dtype_size(t);
  std::vector<uint8_t> acc(count * es), cur(count * es);
  fill(acc.data(), count, t, 0, base);
  for (int r = 1; r < n; ++r) {
    fill(cur.data(), count, t, r, base);
    reduce2(acc.data(), acc.data(), cur.data(), count, t, op);
  }
  if (op == ReduceOp::kAvg) scale_avg(acc.data(), count, t, n);
  if (count) std::memcpy(out, acc.data(), count * es);  // count 0: out may be null
}

size_t count_wrong(const void* got, const void* want, size_t count, DType t) {
  size_t es = dtype_size(t), wrong = 0;
  auto* a = static_cast<const uint8_t*>(got);
  auto* b = static_cast<const uint8_t*>(want);
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(a + i * es, b + i * es, es) != 0) ++wrong;
  return wrong;
}

struct Row {
  size_t bytes, count;
  double time_us;
  uint64_t wrong;
  std::string algo;
};

// Runs `op` once on buffers sized for `count` elements per rank-block.
class Case {
 public:
  // shared: buffers from alloc_shared, and all_reduce in place (the way
  // data parallel training calls it on its gradient buckets).
  Case(Communicator& c, const std::string& op, size_t bytes, DType t, ReduceOp rop, bool shared)
      : c_(c), op_(op), t_(t), rop_(rop), n_(c.size()), es_(dtype_size(t)) {
    // bytes follows nccl-tests: the whole buffer for all_reduce, broadcast,
    // reduce; the whole output of all_gather / gather; the whole input of
    // reduce_scatter / scatter / all_to_all.
    size_t elems = bytes / es_;
    blockwise_ = op != "all_reduce" && op != "broadcast" && op != "reduce";
    count_ = blockwise_ ? elems / size_t(n_) : elems;
    size_t total = blockwise_ ? count_ * size_t(n_) : count_;
    if (shared) {
      shared_out_ = c.alloc_shared(total * es_);
      out_ = shared_out_.as<uint8_t>();
      if (op == "all_reduce") {
        in_ = out_;
      } else {
        shared_in_ = c.alloc_shared(total * es_);
        in_ = shared_in_.as<uint8_t>();
      }
    } else {
      in_store_.assign(total * es_, 0);
      out_store_.assign(total * es_, 0);
      in_ = in_store_.data();
      out_ = out_store_.data();
    }
  }
  size_t count() const { return count_; }
  // Elements in `bytes` (nccl-tests' count column: the whole buffer).
  size_t total_count() const { return bytes() / es_; }
  size_t bytes() const { return (blockwise_ ? count_ * size_t(n_) : count_) * es_; }

  void run() {
    void* in = in_;
    void* out = out_;
    if (op_ == "all_reduce") c_.all_reduce(in, out, count_, t_, rop_);
    else if (op_ == "broadcast") c_.broadcast(out, count_, t_, 0);
    else if (op_ == "reduce") c_.reduce(in, out, count_, t_, rop_, 0);
    else if (op_ == "all_gather") c_.all_gather(in, out, count_, t_);
    else if (op_ == "reduce_scatter") c_.reduce_scatter(in, out, count_, t_, rop_);
    else if (op_ == "all_to_all") c_.all_to_all(in, out, count_, t_);
    else if (op_ == "gather") c_.gather(in, out, count_, t_, 0);
    else if (op_ == "scatter") c_.scatter(in, out, count_, t_, 0);
  }

  // True when a call reads its own output (all_reduce on a shared buffer):
  // each call's input is then the previous call's result.
  bool in_place() const { return in_ == out_; }

  // Fills the inputs with the pattern and the outputs with a sentinel, so
  // that the next call has to write every checked element itself; the
  // first time, also computes what the outputs must hold after that call.
  void prepare() {
    const int r = c_.rank();
    std::fill(out_, out_ + bytes(), 0xEE);
    const size_t total = blockwise_ ? count_ * size_t(n_) : count_;
    const bool first = !prepared_;
    prepared_ = true;
    if (op_ == "all_reduce" || (op_ == "reduce" && r == 0)) {
      fill(in_, count_, t_, r);
      if (first) expected(want(count_), count_, t_, rop_, n_, 0);
    } else if (op_ == "reduce") {
      fill(in_, count_, t_, r);
    } else if (op_ == "broadcast") {
      if (r == 0) fill(out_, count_, t_, 0);
      if (first) fill(want(count_), count_, t_, 0);
    } else if (op_ == "all_gather" || op_ == "gather") {
      fill(in_, count_, t_, r);
      if (first && (op_ == "all_gather" || r == 0)) {
        uint8_t* w = want(total);
        for (int j = 0; j < n_; ++j) fill(w + size_t(j) * count_ * es_, count_, t_, j);
      }
    } else if (op_ == "reduce_scatter") {
      fill(in_, total, t_, r);
      if (first) expected(want(count_), count_, t_, rop_, n_, size_t(r) * count_);
    } else if (op_ == "scatter") {
      if (r == 0) fill(in_, total, t_, 0);
      if (first) fill(want(count_), count_, t_, 0, size_t(r) * count_);
    } else if (op_ == "all_to_all") {
      // block j of rank r's input is pattern(r*n + j); rank r receives
      // block r of every rank j.
      for (int j = 0; j < n_; ++j) fill(in_ + size_t(j) * count_ * es_, count_, t_, r * n_ + j);
      if (first) {
        uint8_t* w = want(total);
        for (int j = 0; j < n_; ++j) fill(w + size_t(j) * count_ * es_, count_, t_, j * n_ + r);
      }
    }
  }

  // Output elements of the last call that differ from what it had to
  // produce from the inputs prepare() wrote.
  uint64_t wrong() const { return check_n_ ? count_wrong(out_, want_.data(), check_n_, t_) : 0; }

 private:
  // The expected output: n elements, to be written through the pointer.
  uint8_t* want(size_t n) {
    want_.assign(n * es_, 0);
    check_n_ = n;
    return want_.data();
  }

  Communicator& c_;
  std::string op_;
  DType t_;
  ReduceOp rop_;
  int n_;
  size_t es_, count_ = 0;
  bool blockwise_ = false;
  std::vector<uint8_t> in_store_, out_store_;
  SharedBuffer shared_in_, shared_out_;
  uint8_t* in_ = nullptr;
  uint8_t* out_ = nullptr;
  bool prepared_ = false;
  std::vector<uint8_t> want_;
  size_t check_n_ = 0;
};

int run_rank(Communicator& comm, const Opts& o) {
  const DType t = parse_dtype(o.dtype);
  const ReduceOp rop = parse_reduce_op(o.reduce);
  std::vector<std::string> ops = o.op == "all" ? kOps : std::vector<std::string>{o.op};
  const bool root = comm.rank() == 0;
  uint64_t total_wrong = 0;
  for (auto& op : ops) {
    if (std::find(kOps.begin(), kOps.end(), op) == kOps.end())
      throw Error(Errc::kInvalidArgument, "unknown --op '" + op + "'");
    if (o.algo != "auto") comm.set_algorithm(op, o.algo);
    if (root && !o.json) {
      std::printf("# braid bench  op %s  ranks %d  dtype %s  reduce %s  transport %s  iters %d  warmup %d\n",
                  op.c_str(), comm.size(), o.dtype.c_str(), o.reduce.c_str(),
                  comm.size() > 1 ? comm.transport_to((comm.rank() + 1) % comm.size()).c_str() : "self",
                  o.iters, o.warmup);
      std::printf("%12s %12s %6s %12s %10s %10s %8s  %s\n", "bytes", "count", "type", "time_us",
                  "algbw_GB/s", "busbw_GB/s", "wrong", "algo");
    }
    for (size_t bytes = std::max<size_t>(o.min_bytes, 1); bytes <= o.max_bytes;) {
      // As mpi_bench: `warmup` untimed calls, then `iters` timed ones, and
      // the check is on the last timed call's output.
      Case cs(comm, op, bytes, t, rop, o.shared);
      if (o.check) cs.prepare();
      for (int i = 0; i < o.warmup; ++i) cs.run();
      // Then on until rank 0 has spent --warmup-s in the size's warm-up:
      // each call followed by rank 0's verdict, so every rank makes as many.
      const double w0 = now_s();
      for (int more = o.warmup_s > 0; more;) {
        cs.run();
        more = now_s() - w0 < o.warmup_s;
        comm.broadcast(&more, 1, DType::kI32, 0);
      }
      // Back to the pattern and the sentinel (untimed): the timed calls
      // must write the result themselves, not leave the warm-up's.
      if (o.check) cs.prepare();
      // In place, every call's input is the one before's output, so only
      // a call that starts from prepare() has a known result: the last
      // timed call runs after one, timed on its own.
      const int before_last = cs.in_place() && o.check ? o.iters - 1 : o.iters;
      comm.barrier();
      double t0 = now_s();
      for (int i = 0; i < before_last; ++i) cs.run();
      double mine = now_s() - t0;
      if (before_last < o.iters) {
        cs.prepare();
        comm.barrier();
        const double t1 = now_s();
        cs.run();
        mine += now_s() - t1;
      }
      mine /= std::max(o.iters, 1);
      uint64_t wrong = o.check ? cs.wrong() : 0;
      const std::string algo = comm.last_algorithm();  // what the timed calls ran
      double slowest = 0;
      comm.all_reduce(&mine, &slowest, 1, DType::kF64, ReduceOp::kMax);
      uint64_t wrong_all = 0;
      comm.all_reduce(&wrong, &wrong_all, 1, DType::kI64, ReduceOp::kSum);
      total_wrong += wrong_all;
      if (root) {
        size_t b = cs.bytes();
        double algbw = slowest > 0 ? double(b) / slowest / 1e9 : 0;
        double busbw = algbw * bus_factor(op, comm.size());
        if (o.json) {
          nlohmann::json j = {{"op", op}, {"bytes", b}, {"count", cs.total_count()},
                              {"dtype", o.dtype}, {"time_us", slowest * 1e6},
                              {"algbw_gbs", algbw}, {"busbw_gbs", busbw}, {"wrong", wrong_all},
                              {"ranks", comm.size()}, {"algo", algo}};
          std::printf("%s\n", j.dump().c_str());
        } else {
          std::printf("%12zu %12zu %6s %12.2f %10.3f %10.3f %8llu  %s\n", b, cs.total_count(),
                      o.dtype.c_str(), slowest * 1e6, algbw, busbw,
                      (unsigned long long)wrong_all, algo.c_str());
        }
        std::fflush(stdout);
      }
      size_t next = size_t(std::ceil(double(bytes) * o.factor));
      bytes = next > bytes ? next : bytes + 1;
    }
  }
  if (root && !o.json)
    std::printf("# %s: %llu wrong elements in total\n", total_wrong ? "FAILED" : "OK",
                (unsigned long long)total_wrong);
  return total_wrong ? 1 : 0;
}


}  // namespace

int bench_main(int argc, char** argv) {
  CLI::App app{"braid bench: collective benchmark (nccl-tests style)", "braid bench"};
  Opts o;
  app.add_option("-n,--ranks", o.n, "number of ranks to start (ignored under a launcher)")
      ->check(CLI::Range(1, 256));
  app.add_option("--op", o.op, "collective, or 'all'")->check(CLI::IsMember([] {
    auto v = kOps;
    v.push_back("all");
    return v;
  }()));
  std::string min_s = "8", max_s = "64M";
  app.add_option("--min-bytes,-b", min_s, "smallest size in bytes (K, M, G suffixes: powers of 1024)");
  app.add_option("--max-bytes,-e", max_s, "largest size in bytes");
  app.add_option("--step-factor,-f", o.factor, "size multiplier between rows")
      ->check(CLI::Range(1.01, 1024.0));
  app.add_option("--dtype", o.dtype, "f32 f64 f16 bf16 i8 u8 i32 i64");
  app.add_option("--reduce-op", o.reduce, "sum prod min max avg band bor bxor");
  app.add_option("--algo", o.algo, "algorithm of --op, or auto (--list-algos names them)");
  bool list_algos = false;
  app.add_flag("--list-algos", list_algos, "print each collective's algorithms and exit");
  app.add_option("--transport", o.transport, "auto, shm or tcp")
      ->check(CLI::IsMember({"auto", "shm", "tcp"}));
  app.add_option("--iters", o.iters, "timed iterations per size")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup,-w", o.warmup, "untimed iterations per size")->check(CLI::Range(0, 1000000));
  app.add_option("--warmup-s", o.warmup_s,
                 "then untimed iterations until this many seconds of warm-up per size (a job's "
                 "first tenths of a second can run small calls many times slower)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_flag("--json", o.json, "one JSON object per row");
  app.add_flag("--shared", o.shared,
               "buffers from alloc_shared (mapped by every rank of the host): all_reduce (in "
               "place), all_gather and reduce_scatter take the shared path");
  app.add_flag("!--no-check", o.check, "skip the correctness check");
  app.add_flag("--probe", o.probe,
               "measure alpha/beta/gamma of this transport and cache them for the cost model");
  app.add_option("--probe-out", o.probe_out, "tuning file to write (default ~/.cache/braid/tuning.json)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.min_bytes = parse_size(min_s, "--min-bytes");
  o.max_bytes = parse_size(max_s, "--max-bytes");
  if (o.min_bytes > o.max_bytes)
    throw Error(Errc::kInvalidArgument, "--min-bytes is larger than --max-bytes");
  parse_dtype(o.dtype);
  parse_reduce_op(o.reduce);
  if (list_algos) {
    for (const std::string& op : comm::collectives()) {
      std::string names;
      for (const std::string& a : comm::algorithms(op)) names += (names.empty() ? "" : ", ") + a;
      std::printf("%-15s %s\n", op.c_str(), names.c_str());
    }
    return 0;
  }
  for (const std::string& op : o.op == "all" ? kOps : std::vector<std::string>{o.op}) {
    const std::vector<std::string> algos = comm::algorithms(op);
    if (o.algo == "auto" || std::find(algos.begin(), algos.end(), o.algo) != algos.end()) continue;
    std::string names;
    for (const std::string& a : algos) names += a + ", ";
    throw Error(Errc::kInvalidArgument, "--algo '" + o.algo + "' is not an algorithm of " + op +
                                            " (choose from: " + names + "auto)");
  }
  CommOptions co;
  co.transport = o.transport == "auto" ? "" : o.transport;
  auto run_job = [&](Communicator& comm) { return o.probe ? bench_probe(comm, o.probe_out) : run_rank(comm, o); };
  if (env_str("BRAID_RANK") || env_str("RANK") || env_str("OMPI_COMM_WORLD_RANK") ||
      env_str("SLURM_PROCID"))
    return run_job(*Communicator::from_env(co));
  // Started plainly: n ranks forked under the supervisor, meeting in a private store.
  return launch::run_forked("braid bench", o.n,
                            [&](const launch::ForkedRank& r) { return run_job(*r.communicator(co)); });
}

}  // namespace braid::tool
