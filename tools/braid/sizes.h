// Byte sizes as the tool's flags take them and its reports print them.
#pragma once

#include <cstdio>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "braid/error.h"

namespace braid::tool {

// "64M" -> 67108864; K, M, G are powers of 1024. Throws
// Error(kInvalidArgument) naming `flag` for anything else.
inline size_t parse_size(const std::string& s, const char* flag) {
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0) throw Error(Errc::kInvalidArgument, std::string(flag) + ": not a size: '" + s + "'");
  std::string suf = s.substr(pos);
  unsigned long long mult = 1;
  if (suf == "K" || suf == "k" || suf == "KiB") mult = 1ull << 10;
  else if (suf == "M" || suf == "MiB") mult = 1ull << 20;
  else if (suf == "G" || suf == "GiB") mult = 1ull << 30;
  else if (!suf.empty())
    throw Error(Errc::kInvalidArgument, std::string(flag) + ": unknown suffix in '" + s + "'");
  return size_t(v * mult);
}

// 67108864 -> "64.0 MiB", 4096 -> "4.0 KiB", 100 -> "100 B".
inline std::string format_size(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  char b[32];
  if (u == 0) std::snprintf(b, sizeof b, "%.0f B", bytes);
  else std::snprintf(b, sizeof b, "%.1f %s", bytes, units[u]);
  return b;
}

}  // namespace braid::tool
