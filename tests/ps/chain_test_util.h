// Helpers shared by the chain replication tests (ps_chain_test.cc,
// ps_chain_join_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::testing::ps_chain {

// Worker w's gradient at round c depends on the parameters it pulled, so a
// lost, doubled or reordered update changes every later round.
inline void gradient(int w, int64_t c, const std::vector<std::vector<float>>& p,
                     std::vector<std::vector<float>>& g) {
  for (size_t k = 0; k < p.size(); ++k)
    for (size_t i = 0; i < p[k].size(); ++i)
      g[k][i] = p[k][i] * p[k][i] - float(w + 1) * 0.5f + 0.01f * float(c) + 0.05f * float(i);
}

// Counters through the store, as space-separated numbers.
inline std::string encode(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += std::to_string(x) + " ";
  return s;
}
inline std::vector<int64_t> decode(const std::string& s) {
  std::vector<int64_t> v;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(' ', pos);
    v.push_back(std::stoll(s.substr(pos, end - pos)));
    pos = end + 1;
  }
  return v;
}

}  // namespace braid::testing::ps_chain
