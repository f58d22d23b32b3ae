// PeerInfo: what transport set-up learns about every rank through the
// store (process, host, host identity, affinity), how it is encoded there,
// and the names by which messages refer to ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::comm {

// What set-up learns about every rank through the store.
struct PeerInfo {
  int rank = -1;
  int pid = 0;
  std::string host;     // hostname, for messages
  std::string host_id;  // hostname + boot id + ipc/pid namespaces: equal => shm possible
  uint64_t nonce = 0;   // random per rank and communicator
  std::string cpus;     // the CPUs it may run on (sched_getaffinity), hex, lowest CPU last
  int world_rank = -1;  // its rank in the communicator this one was split from (at the top)
};

// The CPUs the ranks on `host_id` may run on between them: the union of
// their affinity masks. A launcher that pins each rank to its own core
// (mpirun -n 2 does) gives every rank a mask of one, but the host still has
// a core per rank.
int host_cores(const std::vector<PeerInfo>& peers, const std::string& host_id);
// This process's affinity mask as PeerInfo::cpus spells it.
std::string affinity_hex();

// "rank 3 (pid 1234 on host h)"; in a sub-communicator
// "rank 1 (world rank 3, pid 1234 on host h)".
std::string describe_peer_info(const PeerInfo& p);

// This host's identity: hostname + kernel boot id + IPC and PID namespaces
// (equal identities can share memory and watch each other's pidfds), or
// BRAID_HOST_ID.
std::string host_identity();

// The store value of "info/<rank>" ("pid\nnonce\nhost\nhost_id\ncpus\nworld_rank"),
// and back. decode_peer_info throws Error(kProtocol) naming `rank` when the
// value is malformed.
std::string encode_peer_info(const PeerInfo& p);
PeerInfo decode_peer_info(int rank, const std::string& v);

}  // namespace braid::comm
