// The TCP store server's request side: the bytes a client sends after the
// handshake, cut into frames by the server's own cut_frame and run on a
// StoreState (comm/store/tcp_store_state.h), exactly as the event loop
// (tcp_store_conn.cc) does. A frame the server would drop ends the input.
#include <string>

#include "comm/store/tcp_store_state.h"
#include "comm/store/tcp_store_wire.h"
#include "fuzz_target.h"

BRAID_FUZZ_TARGET(store_request) {
  using namespace braid::comm::store_wire;
  size_t replies = 0;
  braid::comm::StoreState state([&](uint64_t, uint64_t, Status, const braid::Bytes&) { ++replies; });
  size_t off = 0;
  for (;;) {
    uint32_t len = 0;
    const Cut cut = cut_frame(data + off, size - off, kMaxRequestBody, &len);
    if (cut != Cut::kWhole) break;
    const std::string bad = state.handle(1, data + off + 4, len);
    off += 4 + size_t(len);
    if (!bad.empty()) break;
  }
  state.expire();
  state.forget_conn(1);
}
