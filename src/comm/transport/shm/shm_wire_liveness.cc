// Shared-memory wire, liveness and abort: a peer is gone when its pidfd
// says it exited or when its segment carries an abort mark (its
// communicator failed, ShmWire::abort); either fails what waits on it.
#include <poll.h>
#include <signal.h>

#include <cerrno>

#include "braid/error.h"
#include "braid/log.h"
#include "comm/transport/shm/shm_wire.h"

namespace braid::comm::shm {

bool ShmWire::check_liveness() {
  last_check_ns_ = now_ns();
  // Abandoned by this process (another communicator of its family failed)
  // while an operation still waits here: stop it.
  if (npending_ > 0)
    if (std::string mine = abort_text(*my_); !mine.empty())
      throw Error(Errc::kPeerDied,
                  describe_self() + " stopped: this process abandoned the communicator after: " + mine);
  bool newly = false;
  for (Peer& p : peers_local_) {
    if (p.dead) continue;
    if (std::string why = abort_text(*p.seg); !why.empty()) {
      p.dead = true;
      newly = true;
      p.how = "abandoned the communicator: " + why;
      // The communicator has failed: what waits here on other peers can
      // no longer complete everywhere, so it stops now too.
      if (npending_ > 0) throw_peer_died(p.rank, nullptr, p.how);
      continue;
    }
    bool gone = false;
    if (p.pidfd >= 0) {
      pollfd pf{p.pidfd, POLLIN, 0};
      gone = ::poll(&pf, 1, 0) > 0;
    } else {
      gone = ::kill(p.pid, 0) != 0 && errno == ESRCH;
    }
    if (gone) {
      p.dead = true;
      p.how = "exited";
      newly = true;
      BRAID_LOG(kInfo, "shm: " << describe_peer(p.rank) << " exited");
    }
  }
  return newly;
}

int ShmWire::exited_peer() {
  check_liveness();
  for (const Peer& p : peers_local_)
    if (p.dead) return p.rank;
  return -1;
}

std::string ShmWire::how_gone(int peer) const {
  const int i = peer >= 0 && size_t(peer) < index_.size() ? index_[size_t(peer)] : -1;
  if (i < 0 || !peers_local_[size_t(i)].dead) return "exited";
  return peers_local_[size_t(i)].how;
}

std::string ShmWire::peer_abort_reason() const {
  // Only the peers' segments (atomics), not Peer::dead: any thread may ask.
  for (const Peer& p : peers_local_)
    if (std::string r = abort_text(*p.seg); !r.empty()) return r;
  return {};
}

void ShmWire::abort(const std::string& why) {
  // Once, though a failure here and a sibling's may call it together: the
  // mark's first writer wins. Its peers fail as with a dead peer.
  if (!my_->abort.mark(rank_, Errc::kPeerDied, why)) return;
  // Wake every peer, asleep or about to be: they look at the flag when
  // they wake (check_liveness).
  for (Peer& p : peers_local_) {
    p.seg->bell.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&p.seg->bell);
  }
}

void ShmWire::fail_dead(Peer& p) {
  const Request* r = !p.recvs.empty() ? p.recvs.front() : !p.cma_wait.empty() ? p.cma_wait.front() : p.sends.front();
  throw_peer_died(p.rank, r, p.how);
}

}  // namespace braid::comm::shm
