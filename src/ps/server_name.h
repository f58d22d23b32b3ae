// How every message names a parameter server: "parameter server <id>", and
// a frame it runs: "parameter server <id>, worker <w>, <op>".
#pragma once

#include <string>

#include "ps/io/wire.h"

namespace braid::ps {

inline std::string server_name(int id) { return "parameter server " + std::to_string(id); }

inline std::string frame_where(int server, const wire::Header& h) {
  return server_name(server) + ", worker " + std::to_string(h.worker) + ", " +
         wire::op_name(h.op);
}

}  // namespace braid::ps
