// all_reduce of float32 through braid::Communicator's three paths that the
// PyTorch binding could take, timed like bench/torch_backend.py's
// `allreduce` mode (same sizes, iteration counts, warm-up, slowest rank's
// mean), so that the binding's overhead splits into Python + binding
// (torch_backend.py against async_ip) and braid's own paths:
//   blk_oop   blocking, out of place: what `braid bench` runs
//   blk_ip    blocking, in place on ordinary memory
//   async_ip  all_reduce_async in place, then wait(): what the binding runs
// Each figure is the median (and minimum) of 5 timed runs.
//
//   g++ -O2 -std=c++20 -Iinclude bench/micro/allreduce_paths.cc
//       build/libbraid_comm.a build/libbraid_core.a -lcrypto -lz -lpthread
//       -o /tmp/allreduce_paths   (one line)
//   chrt -r 10 build/braid run -n 2 -- /tmp/allreduce_paths blk_oop blk_ip async_ip
// (chrt keeps a loaded machine's other tasks off the two cores while it runs.)
#include <braid/comm.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace braid;

int main(int argc, char** argv) {
  auto c = Communicator::from_env();
  std::vector<std::string> modes(argv + 1, argv + argc);
  if (modes.empty()) modes = {"blk_oop", "blk_ip", "async_ip"};
  constexpr int kReps = 5;
  auto now = [] { return std::chrono::steady_clock::now(); };
  for (size_t bytes : {size_t(8), size_t(64), size_t(512), size_t(4) << 10, size_t(32) << 10,
                       size_t(256) << 10, size_t(1) << 20, size_t(4) << 20, size_t(16) << 20,
                       size_t(64) << 20}) {
    const size_t n = std::max<size_t>(1, bytes / 4);
    std::vector<float> a(n, 1.f), b(n, 1.f);
    const int iters = int(std::max<size_t>(5, std::min<size_t>(2000, (size_t(256) << 20) / (bytes * 8))));
    for (const std::string& m : modes) {
      auto one = [&] {
        if (m == "blk_oop") c->all_reduce(a.data(), b.data(), n, DType::kF32, ReduceOp::kSum);
        else if (m == "blk_ip") c->all_reduce(a.data(), a.data(), n, DType::kF32, ReduceOp::kSum);
        else c->all_reduce_async(a.data(), a.data(), n, DType::kF32, ReduceOp::kSum).wait();
      };
      if (m != "blk_oop" && m != "blk_ip" && m != "async_ip") {
        std::fprintf(stderr, "unknown mode %s (blk_oop, blk_ip, async_ip)\n", m.c_str());
        return 2;
      }
      std::vector<double> us;
      for (int r = 0; r < kReps; ++r) {
        for (int i = 0; i < 3; ++i) one();
        c->barrier();
        const auto t0 = now();
        for (int i = 0; i < iters; ++i) one();
        double mine = std::chrono::duration<double, std::micro>(now() - t0).count() / iters, slowest = 0;
        c->all_reduce(&mine, &slowest, 1, DType::kF64, ReduceOp::kMax);
        us.push_back(slowest);
      }
      std::sort(us.begin(), us.end());
      if (c->rank() == 0)
        std::printf("%10zu %-9s median %10.1f us  min %10.1f us\n", n * 4, m.c_str(), us[kReps / 2], us[0]);
    }
  }
  return 0;
}
