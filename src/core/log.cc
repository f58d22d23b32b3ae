#include "braid/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "braid/env.h"

namespace braid {
namespace {
std::atomic<int> g_rank{-1};

LogLevel threshold() {
  static const LogLevel level = [] {
    auto v = env_str("BRAID_LOG_LEVEL");
    if (!v) return LogLevel::kWarn;
    if (*v == "debug") return LogLevel::kDebug;
    if (*v == "info") return LogLevel::kInfo;
    if (*v == "error") return LogLevel::kError;
    return LogLevel::kWarn;
  }();
  return level;
}
}  // namespace

bool log_enabled(LogLevel level) { return level >= threshold(); }

void log_set_rank(int rank) { g_rank.store(rank); }

void log_write(LogLevel level, const std::string& msg) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  int r = g_rank.load();
  if (r >= 0)
    std::fprintf(stderr, "braid[%s] rank %d: %s\n", names[int(level)], r, msg.c_str());
  else
    std::fprintf(stderr, "braid[%s]: %s\n", names[int(level)], msg.c_str());
}

}  // namespace braid
