// Trace: a simulated run's timeline in the Chrome trace format (the JSON
// that chrome://tracing and Perfetto open): one process per host, one
// thread per rank, a complete ("X") event per message on its sender's row
// (from when it left to when it arrived), per reduction and compute span
// on its rank's row, and a span per rank for each phase it ran.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace braid::plan::sim {

class Trace {
 public:
  // Keeps at most `limit` events; later ones are counted, not kept.
  explicit Trace(size_t limit = 1'000'000) : limit_(limit) {}
  // A span of rank `rank` (on host `host`) from t0 to t1 seconds.
  void span(int host, int rank, const std::string& name, double t0, double t1,
            const std::string& args_json = "");
  size_t dropped() const { return dropped_; }
  size_t size() const { return events_.size(); }
  // The whole trace as JSON; `ranks_per_host` names the rows.
  std::string json(int ranks, int ranks_per_host) const;

 private:
  struct Ev {
    int host, rank;
    std::string name, args;
    double t0, t1;
  };
  size_t limit_;
  size_t dropped_ = 0;
  std::vector<Ev> events_;
};

}  // namespace braid::plan::sim
