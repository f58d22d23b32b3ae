#include "plan/sim/trace.h"

#include <cstdio>

namespace braid::plan::sim {

void Trace::span(int host, int rank, const std::string& name, double t0, double t1,
                 const std::string& args_json) {
  if (events_.size() >= limit_) {
    ++dropped_;
    return;
  }
  events_.push_back({host, rank, name, args_json, t0, t1});
}

std::string Trace::json(int ranks, int ranks_per_host) const {
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  char buf[256];
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (int r = 0; r < ranks; ++r) {
    const int h = r / ranks_per_host;
    if (r % ranks_per_host == 0) {
      sep();
      std::snprintf(buf, sizeof buf,
                    "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"host %d\"}}",
                    h, h);
      out += buf;
    }
    sep();
    std::snprintf(buf, sizeof buf,
                  "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                  h, r, r);
    out += buf;
  }
  for (const Ev& e : events_) {
    sep();
    // Microseconds, the format's unit.
    std::snprintf(buf, sizeof buf, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.4f,\"dur\":%.4f,\"name\":\"",
                  e.host, e.rank, e.t0 * 1e6, (e.t1 - e.t0) * 1e6);
    out += buf;
    out += e.name;  // names are built by the simulator: no quotes to escape
    out += "\"";
    if (!e.args.empty()) out += ",\"args\":" + e.args;
    out += "}";
  }
  out += "\n]";
  std::snprintf(buf, sizeof buf, ",\"otherData\":{\"dropped_events\":%zu}}\n", dropped_);
  out += buf;
  return out;
}

}  // namespace braid::plan::sim
