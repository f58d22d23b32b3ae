#include "comm/transport/shm/stream_copy.h"

#include "braid/env.h"

namespace braid::comm {

size_t env_min_bytes(const char* name, int64_t dflt) {
  const int64_t b = env_int(name, dflt);
  return b <= 0 ? ~size_t(0) : size_t(b);
}

size_t stream_out_min_bytes() {
  static const size_t v = env_min_bytes("BRAID_STREAM_OUT_BYTES", 16 << 20);
  return v;
}

}  // namespace braid::comm
