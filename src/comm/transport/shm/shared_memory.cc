#include "comm/transport/shm/shared_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "braid/comm.h"
#include "braid/error.h"
#include "comm/transport/shm/shm_object.h"

namespace braid::comm {
namespace {

// One rank's entry in the name exchange (a fixed size, for all_gather).
struct NameRecord {
  char name[48];
  uint64_t bytes;
  int32_t ok;
  int32_t pad;
};
static_assert(sizeof(NameRecord) == 64);

size_t map_length(size_t bytes) {
  size_t page = size_t(::sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

SharedRegion::~SharedRegion() {
  for (size_t p = 0; p < peer_base.size(); ++p)
    if (peer_base[p] && peer_base[p] != base) ::munmap(peer_base[p], map_length(peer_bytes[p]));
  if (base) ::munmap(base, map_length(bytes));
}

void SharedRegistry::add(const std::shared_ptr<SharedRegion>& r) {
  std::lock_guard<std::mutex> l(mu_);
  std::erase_if(regions_, [](const std::weak_ptr<SharedRegion>& w) { return w.expired(); });
  regions_.push_back(r);
  live_.store(regions_.size(), std::memory_order_relaxed);
}

SharedSpan SharedRegistry::find(const void* p, size_t bytes) {
  if (live_.load(std::memory_order_relaxed) == 0) return {};
  auto* q = static_cast<const uint8_t*>(p);
  std::lock_guard<std::mutex> l(mu_);
  for (auto& w : regions_) {
    auto r = w.lock();
    if (r && q >= r->base && q <= r->base + r->bytes && bytes <= size_t(r->base + r->bytes - q))
      return SharedSpan{r, size_t(q - r->base)};
  }
  return {};
}

std::shared_ptr<SharedRegion> alloc_shared_region(Communicator& c, SharedRegistry& reg,
                                                  size_t bytes) {
  const int n = c.size(), me = c.rank();
  auto r = std::make_shared<SharedRegion>();
  r->id = reg.next_id();
  r->bytes = bytes;
  const size_t len = map_length(bytes);

  int32_t can = n > 1;
  for (int p = 0; p < n && can; ++p)
    if (p != me && c.transport_to(p) != "shm") can = 0;
  c.all_reduce(&can, &can, 1, DType::kI32, ReduceOp::kMin);

  NameRecord mine{};
  mine.bytes = bytes;
  if (can) {
    std::random_device rd;
    std::snprintf(mine.name, sizeof mine.name, "/braid-sm-%d-%llu-%08x", int(::getpid()),
                  (unsigned long long)r->id, unsigned(rd()));
    const char* step = nullptr;
    r->base = shm_create(mine.name, len, &step);
    mine.ok = r->base != nullptr;
  }

  int32_t ok = 0;
  if (can) {
    std::vector<NameRecord> all(static_cast<size_t>(n));
    c.all_gather(&mine, all.data(), sizeof(NameRecord), DType::kU8);
    ok = 1;
    for (auto& a : all) ok &= a.ok;
    r->peer_base.assign(size_t(n), nullptr);
    r->peer_bytes.assign(size_t(n), 0);
    for (int p = 0; p < n && ok; ++p) {
      NameRecord& a = all[size_t(p)];
      a.name[sizeof a.name - 1] = 0;
      r->peer_bytes[size_t(p)] = a.bytes;
      if (p == me) {
        r->peer_base[size_t(p)] = r->base;
        continue;
      }
      const char* step = nullptr;
      size_t got = 0;
      uint8_t* pb = shm_attach(a.name, &got, &step);
      if (pb && got != map_length(a.bytes)) {  // not what the peer announced
        ::munmap(pb, got);
        pb = nullptr;
      }
      r->peer_base[size_t(p)] = pb;
      ok = pb != nullptr;
    }
    // Every rank has mapped every peer (or someone failed): the names can go.
    c.all_reduce(&ok, &ok, 1, DType::kI32, ReduceOp::kMin);
  }
  if (mine.ok) ::shm_unlink(mine.name);

  if (ok) {
    r->shared = true;
    reg.add(r);
    return r;
  }
  // Private memory on every rank: the collectives take their usual paths.
  // (r's destructor unmaps whatever was mapped before the failure.)
  auto priv = std::make_shared<SharedRegion>();
  priv->id = r->id;
  priv->bytes = bytes;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error(Errc::kIo,
                "alloc_shared: cannot allocate " + std::to_string(bytes) + " bytes on rank " +
                    std::to_string(me) + ": " + std::strerror(errno));
  priv->base = static_cast<uint8_t*>(p);
  return priv;
}

}  // namespace braid::comm
