#include "support/weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "braid/checkpoint.h"

namespace braid::testing {

std::map<std::string, double> weight_diffs(const std::string& pa, const std::string& pb,
                                           const std::string& prefix) {
  const Checkpoint a = load_checkpoint(pa), b = load_checkpoint(pb);
  std::map<std::string, double> out;
  for (const auto& [name, ta] : a.tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    auto it = b.tensors.find(name);
    double& worst = out[name];
    if (it == b.tensors.end() || it->second.numel() != ta.numel()) {
      worst = std::numeric_limits<double>::infinity();
      continue;
    }
    const float *x = ta.f32(), *y = it->second.f32();
    for (int64_t i = 0; i < ta.numel(); ++i) worst = std::max(worst, double(std::fabs(x[i] - y[i])));
  }
  return out;
}

size_t expect_same_weights(const std::string& a, const std::string& b, double tol,
                           const std::string& what) {
  const std::map<std::string, double> ab = weight_diffs(a, b), ba = weight_diffs(b, a);
  EXPECT_FALSE(ab.empty()) << what << ": " << a << " holds no model/ tensor";
  // b's names that a lacks show as infinite differences in ba.
  for (const auto& [name, worst] : ba)
    EXPECT_TRUE(ab.count(name)) << what << ": " << name << " only in " << b;
  for (const auto& [name, worst] : ab)
    EXPECT_LE(worst, tol) << what << ": " << name << " differs by " << worst << " (" << a
                          << " vs " << b << ")";
  return ab.size();
}

}  // namespace braid::testing
