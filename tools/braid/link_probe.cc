#include "link_probe.h"

namespace braid::tool {

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
    const int other = r == 0 ? peers[c] : 0;
    out.back().sample = comm::probe_link(
        r == 0, [&](const void* b, size_t n) { comm.send(b, n, DType::kU8, other); },
        [&](void* b, size_t n) { comm.recv(b, n, DType::kU8, other); });
  }
  comm.barrier();
  return out;
}

}  // namespace braid::tool
