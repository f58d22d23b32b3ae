// Where a server builds a reply's payload (ShardState::handle, the hot-key
// frames): a vector of its own or, on a shared-memory link, the outgoing
// ring itself, just behind the place of the reply's header (link.h). A pull
// then copies the shard's values once, into the bytes the worker reads,
// with no staging copy on the server. Private to src/ps.
//
// Only what fits in the ring's free room at placement goes there; a reply
// that outgrows it moves to the vector. The room is never waited for while
// a reply is built: the builder may hold the shard's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace braid::ps {

class ReplyBuf {
 public:
  // Builds the next reply in [area, area + room) while it fits.
  void place(uint8_t* area, size_t room) {
    area_ = area;
    room_ = room;
    n_ = 0;
    v_.clear();
  }
  void unplace() { area_ = nullptr; }
  // Whether the reply so far lies in the placed area.
  bool placed() const { return area_ != nullptr; }

  // A vector's calls: empties, keeping the placement.
  void clear() {
    n_ = 0;
    v_.clear();
  }
  size_t size() const { return area_ ? n_ : v_.size(); }
  uint8_t* data() { return area_ ? area_ : v_.data(); }
  // Bytes added by a resize are not zeroed: builders write all they add.
  void resize(size_t n) {
    if (area_) {
      if (n <= room_) {
        n_ = n;
        return;
      }
      v_.assign(area_, area_ + n_);
      area_ = nullptr;
    }
    v_.resize(n);
  }
  void append(const void* p, size_t k) {
    const size_t at = size();
    resize(at + k);
    if (k) std::memcpy(data() + at, p, k);
  }

 private:
  std::vector<uint8_t> v_;
  uint8_t* area_ = nullptr;
  size_t room_ = 0, n_ = 0;
};

}  // namespace braid::ps
