// Memory that every rank of a one-host communicator maps (Communicator::
// alloc_shared), and the registry that lets a collective recognise it.
//
// Each allocation is a POSIX shared-memory object per rank. alloc_shared is
// collective: every rank creates its object, the ranks exchange the names
// (all_gather), every rank maps every peer's object, and once all have (an
// all_reduce, which is also the barrier) each unlinks its own name — so no
// name outlives the call, and the pages live until the last rank unmaps.
// Allocations get the same id on every rank (a per-communicator counter), so
// a message can name "region 3, offset 4096" and every peer can resolve it.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace braid {
class Communicator;
}

namespace braid::comm {

struct SharedRegion {
  uint64_t id = 0;
  uint8_t* base = nullptr;  // this rank's memory
  size_t bytes = 0;         // as requested; mapped rounded up to whole pages
  bool shared = false;      // peers map it (else plain private memory)
  std::vector<uint8_t*> peer_base;  // by rank; this rank's own entry is `base`
  std::vector<size_t> peer_bytes;
  ~SharedRegion();
};

// Where a buffer lies: the region (kept alive by the pointer) and offset.
struct SharedSpan {
  std::shared_ptr<SharedRegion> region;
  size_t offset = 0;
  explicit operator bool() const { return region != nullptr; }
};

class SharedRegistry {
 public:
  uint64_t next_id() { return ++last_id_; }
  void add(const std::shared_ptr<SharedRegion>& r);
  // The shared region holding [p, p + bytes) whole, or an empty span.
  SharedSpan find(const void* p, size_t bytes);

 private:
  std::mutex mu_;
  std::atomic<size_t> live_{0};  // entries in regions_ (find skips the lock at 0)
  uint64_t last_id_ = 0;
  std::vector<std::weak_ptr<SharedRegion>> regions_;
};

// The collective behind Communicator::alloc_shared. Falls back to private
// memory (shared == false) on every rank when any rank cannot share: a peer
// on another host or over TCP, a single rank, or a failed shm_open/mmap.
std::shared_ptr<SharedRegion> alloc_shared_region(Communicator& c, SharedRegistry& reg,
                                                  size_t bytes);

}  // namespace braid::comm
