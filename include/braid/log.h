// Minimal leveled logging to stderr. BRAID_LOG_LEVEL=debug|info|warn|error
// (default warn). Lines carry the rank when one has been set.
#pragma once

#include <sstream>
#include <string>

namespace braid {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

bool log_enabled(LogLevel level);
void log_write(LogLevel level, const std::string& msg);
// Sets the rank shown in log lines (-1: none).
void log_set_rank(int rank);

}  // namespace braid

#define BRAID_LOG(level, expr)                                         \
  do {                                                                 \
    if (::braid::log_enabled(::braid::LogLevel::level)) {              \
      std::ostringstream braid_log_os_;                                \
      braid_log_os_ << expr;                                           \
      ::braid::log_write(::braid::LogLevel::level, braid_log_os_.str()); \
    }                                                                  \
  } while (0)
