// What a peer of the TCP transport sends after the job-secret handshake:
// its hello (comm/transport/tcp/tcp_connect.h, checked by tcp_hello_slot
// exactly as tcp_accept does), then message headers (MsgSig, 40 bytes,
// copied from the stream and compared with the receive it should match by
// sig_matches; a mismatch is reported with describe_sig, as
// Wire::throw_mismatch does). The shared-memory wire checks the headers a
// peer writes in its ring with the same two functions.
#include <cstring>
#include <string>
#include <vector>

#include "braid/error.h"
#include "comm/transport/msg_sig.h"
#include "comm/transport/tcp/tcp_connect.h"
#include "fuzz_target.h"

BRAID_FUZZ_TARGET(tcp_frame) {
  using namespace braid::comm;
  size_t off = 0;
  if (size >= sizeof(TcpHello)) {
    TcpHello h;
    std::memcpy(&h, data, sizeof h);
    off = sizeof h;
    try {
      tcp_hello_slot(h, "fuzz-job/world", 4, {1, 2, 3}, 2);
    } catch (const braid::Error&) {
    }
  }
  MsgSig want;
  want.seq = 7;
  want.count = 1024;
  want.bytes = 4096;
  want.op = CollOp::kAllReduce;
  want.dtype = braid::DType::kF32;
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
