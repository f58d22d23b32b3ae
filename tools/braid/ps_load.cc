// Per-server load windows of braid ps train (ps_load.h).
#include "ps_load.h"

namespace braid::tool {

namespace {
template <class F>
nlohmann::json per_server(const std::vector<ps::ServerStats>& a,
                          const std::vector<ps::ServerStats>& b, F f) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t s = 0; s < b.size() && s < a.size(); ++s) out.push_back(f(a[s], b[s]));
  return out;
}
}  // namespace

nlohmann::json LoadMeter::window(const Point& a, const Point& b) {
  const double dt = b.t - a.t;
  if (dt <= 0) return nullptr;
  using S = ps::ServerStats;
  return {{"seconds", dt},
          {"requests_per_s",
           per_server(a.s, b.s, [&](const S& x, const S& y) { return double(y.requests - x.requests) / dt; })},
          {"bytes_per_s", per_server(a.s, b.s,
                                     [&](const S& x, const S& y) {
                                       return double(y.bytes_in + y.bytes_out - x.bytes_in -
                                                     x.bytes_out) /
                                              dt;
                                     })},
          {"pulls_owner",
           per_server(a.s, b.s, [](const S& x, const S& y) { return y.pulls_owner - x.pulls_owner; })},
          {"pulls_replica", per_server(a.s, b.s, [](const S& x, const S& y) {
             return y.pulls_replica - x.pulls_replica;
           })}};
}

nlohmann::json LoadMeter::sample(int64_t step, double t, const std::vector<ps::ServerStats>& all) {
  Point p{t, all};
  nlohmann::json rec = nlohmann::json::object();
  if (have_first_) {
    const nlohmann::json w = window(last_, p);
    if (!w.is_null()) {
      rec["server_requests_per_s"] = w["requests_per_s"];
      rec["server_bytes_per_s"] = w["bytes_per_s"];
    }
  } else {
    first_ = p;
    have_first_ = true;
  }
  // The "after" window starts at the sample taken after step split - 1.
  if (step + 1 == split_) {
    at_split_ = p;
    have_split_ = true;
  }
  last_ = std::move(p);
  return rec;
}

nlohmann::json LoadMeter::windows() const {
  nlohmann::json out{{"split_step", split_}};
  if (!have_first_) return out;
  out["before"] = have_split_ ? window(first_, at_split_) : window(first_, last_);
  out["after"] = have_split_ ? window(at_split_, last_) : nullptr;
  return out;
}

}  // namespace braid::tool
