// The parameter server the ps_frame target fuzzes and record_seeds records
// a worker's traffic with (the seeds must match its keys): one server, a
// dense key of 8 and a sparse key of 64 rows of 4, ASP, on 127.0.0.1.
#pragma once

#include <string>

#include "braid/ps_server.h"

namespace braid::fuzz {

inline ps::Layout ps_layout() {
  ps::Layout l(1);
  l.add_dense("w", 8);
  l.add_sparse("emb", 64, 4);
  return l;
}

inline ps::ServerOptions ps_options(const std::string& secret, int workers) {
  ps::ServerOptions o;
  o.workers = workers;
  o.consistency = ps::Consistency::kAsp;
  o.secret = secret;
  o.bind_host = "127.0.0.1";
  return o;
}

}  // namespace braid::fuzz
