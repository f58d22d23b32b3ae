// What a job needs from this host, and what it shows of it to other hosts:
// the shared memory a job of N ranks on the host maps, and the address its
// TCP transport announces. `braid doctor` judges a host by these; a program
// of its own can too.
#pragma once

#include <cstddef>
#include <string>

namespace braid::comm {

// Shared memory a job needs on one host, from the same layout functions the
// transport and the chain all-reduce size their segments with (so the
// estimate follows BRAID_SHM_SLOT_BYTES, BRAID_SHM_SLOTS,
// BRAID_CHAIN_SLOT_BYTES and BRAID_CHAIN_SLOTS as a job would).
struct ShmBudget {
  int ranks = 0;                 // ranks on the host
  size_t segment_bytes = 0;      // one rank's shm-wire segment (an inbound ring per local peer)
  size_t p2p_segment_bytes = 0;  // the same for its point-to-point transport (fewer slots)
  size_t chain_bytes = 0;        // the world communicator's chain all-reduce segment
  // Every rank's two segments plus the chain's. A job's splits and its
  // alloc_shared buffers (data parallel's gradient buckets: 4 bytes per
  // parameter per rank) come on top.
  size_t total_bytes = 0;
};

// For `ranks` ranks on one host (a single rank needs none). Cheap; reads
// the environment.
ShmBudget shm_budget(int ranks);

// The IPv4 address a rank publishes for peers on other hosts: BRAID_TCP_ADDR
// when set; loopback when every TCP peer is on this host (`all_local`);
// else the first interface that is up and not loopback (loopback when there
// is none). Cheap (getifaddrs).
struct TcpEndpoint {
  std::string iface;    // interface name ("" for BRAID_TCP_ADDR)
  std::string address;  // dotted IPv4
  std::string why;      // how it was chosen, for people
};
TcpEndpoint tcp_local_endpoint(bool all_local);

}  // namespace braid::comm
