// AbortMark: first writer wins, published with release (abort_mark.h).
#include "comm/transport/shm/abort_mark.h"

#include <algorithm>
#include <cstring>

namespace braid::comm::shm {

bool AbortMark::mark(int by_rank, Errc why_code, std::string_view why) noexcept {
  uint32_t clear = kClear;
  if (!state.compare_exchange_strong(clear, kWriting, std::memory_order_acquire,
                                     std::memory_order_relaxed))
    return false;
  rank = int32_t(by_rank);
  code = int32_t(why_code);
  const size_t len = std::min(why.size(), kMsgBytes - 1);
  std::memcpy(msg, why.data(), len);
  msg[len] = 0;
  state.store(kSet, std::memory_order_release);
  return true;
}

std::optional<AbortNote> AbortMark::read() const {
  if (state.load(std::memory_order_acquire) != kSet) return std::nullopt;
  return AbortNote{int(rank), Errc(code), std::string(msg, strnlen(msg, kMsgBytes))};
}

}  // namespace braid::comm::shm
