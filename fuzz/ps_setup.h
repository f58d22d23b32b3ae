// The parameter server the ps_frame target fuzzes and record_seeds records
// a worker's traffic with (the seeds must match its keys): one server, a
// dense key of 8 and a sparse key of 64 rows of 4, ASP, on 127.0.0.1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/ps_server.h"
#include "braid/ps_worker.h"

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

// What the recorded worker asks (record_seeds.cc), and the ps_reply
// target's worker again, so that the recorded replies answer it.
inline void ps_worker_session(ps::Worker& w) {
  std::vector<float> dense(8, 0.5f), got(8);
  std::vector<int64_t> rows = {3, 17};
  std::vector<float> rg(8, 0.25f), rv(8);
  w.push({{0, {}, dense.data()}, {1, rows, rg.data()}}, 0, true);
  w.pull({{0, {}, got.data()}, {1, rows, rv.data()}}, 1);
  w.report(0, 1.5, 4, 3);
  w.stats(0);
  w.finish();
}

}  // namespace braid::fuzz
