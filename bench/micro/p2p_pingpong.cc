// Point-to-point latency between two ranks: blocking ping-pong, and the
// exchange idiom (recv_async, then send, then wait) that MPI users write.
//
//   g++ -O2 -std=c++20 -Iinclude bench/micro/p2p_pingpong.cc build/libbraid.a
//       -lssl -lcrypto -lz -fopenmp -lopenblas -lrt -lpthread -o /tmp/p2p_pingpong
//   (one line)
//   chrt -f 10 build/braid run -n 2 -- /tmp/p2p_pingpong
#include <braid/comm.h>

#include <chrono>
#include <cstdio>
#include <vector>

using namespace braid;

int main() {
  auto c = Communicator::from_env();
  const int r = c->rank(), p = 1 - r;
  auto secs = [](auto t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (size_t bytes : {size_t(8), size_t(64) << 10, size_t(4) << 20}) {
    std::vector<char> a(bytes, 1), b(bytes, 2);
    const int iters = bytes > 100000 ? 200 : 20000;
    double one_way = 0, exchange = 0;
    for (int rep = 0; rep < 2; ++rep) {  // the first round warms up
      c->barrier();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        if (r == 0) {
          c->send(a.data(), bytes, DType::kU8, p);
          c->recv(b.data(), bytes, DType::kU8, p);
        } else {
          c->recv(b.data(), bytes, DType::kU8, p);
          c->send(a.data(), bytes, DType::kU8, p);
        }
      }
      one_way = secs(t0) * 1e6 / iters / 2;
      c->barrier();
      t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        Work w = c->recv_async(b.data(), bytes, DType::kU8, p);
        c->send(a.data(), bytes, DType::kU8, p);
        w.wait();
      }
      exchange = secs(t0) * 1e6 / iters;
    }
    if (r == 0)
      std::printf("%8zu B: ping-pong one-way %.2f us; recv_async + send exchange %.2f us\n", bytes,
                  one_way, exchange);
  }
  return 0;
}
