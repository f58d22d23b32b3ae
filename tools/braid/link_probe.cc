#include "link_probe.h"

#include <functional>

namespace braid::tool {
namespace {

// The blocking send and receive a probe runs over, to `other`.
struct PairIo {
  std::function<void(const void*, size_t)> send;
  std::function<void(void*, size_t)> recv;
};
PairIo pair_io(Communicator& comm, int other) {
  return {[&comm, other](const void* b, size_t n) { comm.send(b, n, DType::kU8, other); },
          [&comm, other](void* b, size_t n) { comm.recv(b, n, DType::kU8, other); }};
}

}  // namespace

std::vector<ClassProbe> probe_each_class(Communicator& comm) {
  const int r = comm.rank();
  const char* const kClasses[] = {"shm", "tcp", "net"};
  int peers[3] = {-1, -1, -1};
  if (r == 0)
    for (int c = 0; c < 3; ++c)
      for (int p = 1; p < comm.size() && peers[c] < 0; ++p)
        if (comm.link_class_to(p) == kClasses[c]) peers[c] = p;
  comm.broadcast(peers, 3, DType::kI32, 0);
  std::vector<ClassProbe> out;
  for (int c = 0; c < 3; ++c) {
    if (peers[c] < 0) continue;
    out.push_back({kClasses[c], peers[c], {}});
    comm.barrier();
    if (r != 0 && r != peers[c]) continue;
    const PairIo io = pair_io(comm, r == 0 ? peers[c] : 0);
    out.back().sample = comm::probe_link(r == 0, io.send, io.recv);
  }
  comm.barrier();
  return out;
}

std::optional<plan::MemorySample> probe_shm_memory(Communicator& comm,
                                                   const std::vector<ClassProbe>& probes) {
  const int r = comm.rank();
  int peer = -1;
  for (const ClassProbe& p : probes)
    if (p.kind == "shm") peer = p.peer;
  if (peer < 0) return std::nullopt;
  comm.barrier();
  std::optional<plan::MemorySample> out;
  if (r == 0 || r == peer) {
    const PairIo io = pair_io(comm, r == 0 ? peer : 0);
    const plan::MemorySample s = plan::probe_memory(r == 0, io.send, io.recv);
    if (r == 0) out = s;
  }
  comm.barrier();
  return out;
}

}  // namespace braid::tool
