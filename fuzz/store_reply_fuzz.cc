// The TCP store client's reply side: the bytes a store server sends, cut
// by the client's cut_frame and split by parse_response
// (comm/store/tcp_store_wire.h), as the client's reader thread does.
#include <vector>

#include "comm/store/tcp_store_wire.h"
#include "fuzz_target.h"

BRAID_FUZZ_TARGET(store_reply) {
  using namespace braid::comm::store_wire;
  size_t off = 0;
  volatile size_t seen = 0;
  for (;;) {
    uint32_t len = 0;
    if (cut_frame(data + off, size - off, kMaxResponseBody, &len) != Cut::kWhole) break;
    const Response r = parse_response(data + off + 4, len);
    // The client copies the payload it hands back to the caller.
    std::vector<uint8_t> payload(r.payload, r.payload + r.payload_len);
    seen = seen + payload.size() + r.status + (r.id & 1);
    off += 4 + size_t(len);
  }
}
