// Counter-based random numbers: a value is a pure function of its key, so
// results do not depend on threads, batch splits or call order.
//
// Dropout keys its mask on (seed, step, global sample index, element);
// weight initialisation on (seed, parameter index, element); the sampler's
// shuffle on (seed, epoch). Nothing carries hidden state, so a checkpoint
// only needs the seed and the step to resume the same stream.
#pragma once

#include <cstdint>

namespace braid {

// A 64-bit mix of four 64-bit words (splitmix64 finaliser applied in a
// chain). Statistically good enough for masks and shuffles; not crypto.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t counter_hash(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {
  uint64_t h = mix64(a);
  h = mix64(h ^ b);
  h = mix64(h ^ c);
  return mix64(h ^ d);
}
// Uniform in [0, 1) from the top 24 bits.
inline float uniform01(uint64_t h) { return float(h >> 40) * (1.0f / 16777216.0f); }
// Uniform in [0, 1) with 53 bits.
inline double uniform01_f64(uint64_t h) { return double(h >> 11) * (1.0 / 9007199254740992.0); }

// A sequential generator for places where a stream is natural (tests,
// data synthesis): state = (seed, counter).
class CounterRng {
 public:
  explicit CounterRng(uint64_t seed, uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  uint64_t next_u64() { return counter_hash(seed_, stream_, counter_++); }
  float uniform() { return uniform01(next_u64()); }  // [0, 1)
  // Uniform integer in [0, n) (n > 0), by 128-bit multiply (no modulo bias
  // worth caring about for n < 2^32).
  uint64_t below(uint64_t n) {
    return uint64_t((unsigned __int128)(next_u64()) * n >> 64);
  }
  float normal();  // standard normal (Box-Muller)
  uint64_t counter() const { return counter_; }
  void set_counter(uint64_t c) { counter_ = c; }

 private:
  uint64_t seed_, stream_, counter_ = 0;
};

}  // namespace braid
