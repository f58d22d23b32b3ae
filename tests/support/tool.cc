#include "support/tool.h"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>

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
  std::vector<nlohmann::json> v;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

}  // namespace braid::testing
