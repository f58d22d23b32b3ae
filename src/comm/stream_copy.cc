#include "comm/stream_copy.h"

#include "braid/env.h"

namespace braid::comm {

size_t stream_out_min_bytes() {
  static const size_t v = [] {
    const int64_t b = env_int("BRAID_STREAM_OUT_BYTES", 16 << 20);
    return b <= 0 ? ~size_t(0) : size_t(b);
  }();
  return v;
}

}  // namespace braid::comm
