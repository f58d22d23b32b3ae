#include "support/tool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "braid/env.h"

namespace braid::testing {
std::string braid_bin() { return env_str("BRAID_BIN").value_or(BRAID_BIN_DEFAULT); }

CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return r;
}
std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  return parse_json_lines(text.str());
}

std::vector<nlohmann::json> parse_json_lines(const std::string& text) {
  std::vector<nlohmann::json> v;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

void expect_same_losses(const std::vector<nlohmann::json>& a,
                        const std::vector<nlohmann::json>& b, const std::string& what) {
  ASSERT_EQ(b.size(), a.size()) << what;
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    double la = a[i]["loss"], lb = b[i]["loss"];
    EXPECT_NEAR(lb, la, 1e-5 * la) << what << ", step " << i;
  }
  if (a.empty()) return;
  double fa = a.back()["final_loss"], fb = b.back()["final_loss"];
  EXPECT_NEAR(fb, fa, 1e-5 * fa) << what;
}

}  // namespace braid::testing
