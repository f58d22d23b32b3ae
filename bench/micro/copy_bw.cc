// Memory copy bandwidth on this machine: one process, or two at once (the
// all_to_all bound in bench/results/).
//
//   g++ -O2 -mavx2 bench/micro/copy_bw.cc -o /tmp/copy_bw
//   /tmp/copy_bw 32 1                          # 32 MiB, 256 KiB pieces, alone
//   /tmp/copy_bw 32 1 & /tmp/copy_bw 32 1; wait   # two processes at once
//
// mode 0: one memcpy; 1: memcpy in 256 KiB pieces; 2: AVX2 streaming stores.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static void stream_copy(char* d, const char* s, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
  }
  _mm_sfence();
  std::memcpy(d + i, s + i, n - i);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: copy_bw MIB MODE\n");
    return 2;
  }
  const size_t n = size_t(std::atoi(argv[1])) << 20;
  const int mode = std::atoi(argv[2]);
  char* s = static_cast<char*>(std::aligned_alloc(4096, n));
  char* d = static_cast<char*>(std::aligned_alloc(4096, n));
  std::memset(s, 1, n);
  std::memset(d, 2, n);
  std::vector<double> t;
  for (int r = 0; r < 30; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    if (mode == 0) {
      std::memcpy(d, s, n);
    } else if (mode == 1) {
      for (size_t o = 0; o < n; o += 256 << 10) std::memcpy(d + o, s + o, std::min<size_t>(256 << 10, n - o));
    } else {
      stream_copy(d, s, n);
    }
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  std::printf("mode %d, %zu MiB: best %.2f, median %.2f GB/s\n", mode, n >> 20, n / t[0] / 1e9,
              n / t[t.size() / 2] / 1e9);
  return 0;
}
