// Copies that bypass the writer's cache (streaming, non-temporal stores).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace braid::comm {

// memcpy with streaming stores; ends with an sfence, so a release (or
// seq_cst) store after it publishes the bytes. Worth it where the
// destination is not read again soon by this core: a slot the peer's core
// reads next, or an output larger than the caches. Falls back to memcpy
// where SSE2 is missing.
inline void stream_copy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
#if defined(__SSE2__)
  const size_t head = std::min<size_t>(n, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i a2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i a3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), a1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), a2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), a3);
  }
  std::memcpy(d + i, s + i, n - i);
  _mm_sfence();
#else
  std::memcpy(d, s, n);
#endif
}

// stream_copy when `stream`, else memcpy.
inline void copy_maybe_streamed(void* dst, const void* src, size_t n, bool stream) {
  if (stream) {
    stream_copy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

// A call whose output on this rank is at least this many bytes
// (BRAID_STREAM_OUT_BYTES, read once; 0: never) writes the parts it does not
// read again with stream_copy. Smaller outputs may still be in cache when
// the caller reads them, and are written through it.
size_t stream_out_min_bytes();
// NAME as a byte threshold (`dflt` when unset); 0 or less means never, read
// as the largest size_t.
size_t env_min_bytes(const char* name, int64_t dflt);
inline bool stream_out(size_t out_bytes) { return out_bytes >= stream_out_min_bytes(); }

}  // namespace braid::comm
