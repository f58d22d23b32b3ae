// What a peer of the TCP transport sends after the job-secret handshake:
// its hello (comm/transport/tcp/tcp_connect.h, checked by tcp_hello_slot
// exactly as tcp_accept does), then message headers (MsgSig, 40 bytes,
// copied from the stream and compared with the receive it should match by
// sig_matches; a mismatch is reported with describe_sig, as
// Wire::throw_mismatch does). Payloads are left out: a receiver reads the
// length its own request expects after a header that matched it, so no
// length is taken from the stream. The shared-memory wire checks the
// headers a peer writes in its ring with the same two functions
// (shm_ring fuzzes those in place).
#include <cstring>
#include <string>
#include <vector>

#include "braid/error.h"
#include "comm/transport/msg_sig.h"
#include "comm/transport/tcp/tcp_connect.h"
#include "fuzz_target.h"
#include "tcp_setup.h"

BRAID_FUZZ_TARGET(tcp_frame) {
  using namespace braid::comm;
  size_t off = 0;
  if (size >= sizeof(TcpHello)) {
    TcpHello h;
    std::memcpy(&h, data, sizeof h);
    off = sizeof h;
    try {
      tcp_hello_slot(h, braid::fuzz::kTcpToken, braid::fuzz::kTcpWorld, {1}, braid::fuzz::kTcpStreams);
    } catch (const braid::Error&) {
    }
  }
  const MsgSig want = braid::fuzz::tcp_sig();
  while (size - off >= sizeof(MsgSig)) {
    MsgSig got;
    std::memcpy(&got, data + off, sizeof got);
    off += sizeof got;
    if (!sig_matches(got, want)) {
      MsgSig same_len = got;
      same_len.bytes = want.bytes;
      const bool only_len = sig_matches(want, same_len);
      const std::string msg = describe_sig(want, only_len) + " / " + describe_sig(got, only_len);
      (void)msg;
    }
  }
}
