// CPUID leaves 1 and 7 and XCR0 (cpu_features.h).
#include "tensor/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <cstdint>

namespace braid {

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// XCR0, the register states the OS saves; 0 where XGETBV is not enabled.
uint64_t xcr0() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0;  // OSXSAVE
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
constexpr uint64_t kAvxState = 0x6;     // XMM, YMM
constexpr uint64_t kAvx512State = 0xe6; // XMM, YMM, opmask, ZMM upper halves, ZMM16-31
#endif

}  // namespace

bool cpu_has_f16c() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c & (1u << 29)) != 0 && (xcr0() & kAvxState) == kAvxState;
  }();
  return yes;
#else
  return false;
#endif
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = [] {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 1, a, b, c, d);
    return (a & (1u << 5)) != 0 && (xcr0() & kAvx512State) == kAvx512State;
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace braid
