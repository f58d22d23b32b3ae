// A parameter server's frames through its shared-memory rings
// (ps/io/shm_channel.h, ps/io/link.h) rather than TCP: what a worker on
// the server's host writes into the request ring once the server has
// taken up its offer. The server's reader of the rings hands frames out
// where they lie (take()), copies a payload across the ring's wrap, and
// spills a frame larger than the ring; none of that is on the TCP path
// that ps_frame fuzzes.
//
// For each input the target plays a worker: it connects to the real
// server (ps_under_fuzz.h), proves the secret, sends a hello that offers a
// fresh 64 KiB segment (as ps::Worker does), and, once the server has
// taken it up, writes the input into the request ring with the
// production writer, closes its socket's sending half and drains the
// replies until the server closes the connection. Seeds: the frames a
// real worker sent after its hello (record_seeds.cc).
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include "braid/error.h"
#include "comm/store/auth.h"
#include "fuzz_target.h"
#include "ps/io/link.h"
#include "ps/io/shm_channel.h"
#include "ps/io/socket.h"
#include "ps/io/wire.h"
#include "ps_under_fuzz.h"

BRAID_FUZZ_TARGET(ps_shm) {
  using namespace braid::ps;
  braid::fuzz::PsUnderFuzz& ps = braid::fuzz::ps_under_fuzz();
  int fd = -1;
  try {
    fd = connect_tcp("127.0.0.1", ps.port, std::chrono::seconds(5), "ps shm fuzz");
    braid::comm::authenticate_connect(fd, braid::fuzz::kPsSecret, std::chrono::seconds(5));
    const int64_t deadline = wire::deadline_after(std::chrono::seconds(5));
    std::unique_ptr<ShmChannel> ch = ShmChannel::create(64 << 10);
    const std::string offer = ch->offer();
    wire::Header h;
    h.op = wire::kHello;
    h.flags = wire::kShm;
    h.payload = offer.size();
    Link link(fd);
    link.send(h, offer.data(), deadline, "ps shm fuzz: hello");
    const wire::Header r = link.header(deadline, "ps shm fuzz: hello reply");
    ch->close_offer();
    if (r.status == 0 && (r.flags & wire::kShm)) {
      iovec v{const_cast<uint8_t*>(data), size};
      ch->write(fd, &v, 1, deadline, "ps shm fuzz: frames");
      ::shutdown(fd, SHUT_WR);
      // The replies, until the server closes the connection (bounded: 5 s).
      while (ch->wait_readable(fd, 1, deadline, "ps shm fuzz: replies")) ch->consume(fd, ch->readable());
    }
  } catch (const braid::Error&) {
  }
  if (fd >= 0) ::close(fd);
}
