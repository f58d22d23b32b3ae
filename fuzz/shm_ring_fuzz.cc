// What a shared-memory peer writes where a rank reads it: the header of
// the peer's segment (checked when the rank maps it at set-up), the abort
// mark in that header, and the rank's inbound ring from the peer (the
// ring's head, the fast boxes' stamps, lengths and signatures, each slot's
// header, signature and length, single-copy descriptors). Layout:
// comm/transport/shm/shm_segment.h.
//
// For each input a real ShmWire (comm/transport/shm/shm_wire.h) is built
// for rank 0 of 2; the target plays rank 1. It makes rank 1's segment as a
// ShmWire would (same layout), lays the input's header bytes over its
// header, lets rank 0 set up against it, writes the rest of the input into
// rank 0's inbound ring, posts a receive on rank 0 and progresses it until
// the receive completes, fails with braid::Error, or makes no progress.
//
// Input: a flags byte (fuzz/shm_setup.h; kShmBadHeader: XOR 48 bytes onto
// the peer's header; kShmAbortMark: set its abort mark from 40 bytes;
// kShmReduce: a reducing receive; kShmSingleCopy: single-copy reads on), a
// u16 message length, the header and mark bytes when flagged, then the
// ring: head (u64), fb_blocked (u32), two fast boxes' length (8 bytes),
// signature (40) and stamp (8), and one 64-byte slot header per slot
// (shm_ring_input writes a sender's ring in that order).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "braid/error.h"
#include "comm/store/memory_store.h"
#include "comm/transport/shm/shm_segment.h"
#include "comm/transport/shm/shm_transport.h"
#include "comm/transport/wire.h"
#include "fuzz_target.h"
#include "shm_setup.h"

namespace {

// Reads the input front to back; past its end, zeros.
struct Cursor {
  const uint8_t* data;
  size_t size, off = 0;
  void take(void* to, size_t n) {
    const size_t k = off < size ? std::min(n, size - off) : 0;
    std::memcpy(to, data + off, k);
    std::memset(static_cast<uint8_t*>(to) + k, 0, n - k);
    off += n;
  }
  template <class T>
  T get() {
    T v;
    take(&v, sizeof v);
    return v;
  }
};

}  // namespace

BRAID_FUZZ_TARGET(shm_ring) {
  using namespace braid::comm;
  using namespace braid::comm::shm;
  using namespace braid::fuzz;
  Cursor in{data, size};
  const uint8_t flags = in.get<uint8_t>();
  const bool reduce = flags & kShmReduce;
  uint64_t bytes = in.get<uint16_t>() % (kShmSlots * kShmSlotBytes + 1);
  if (reduce) bytes -= bytes % 4;

  auto store = make_memory_store();
  TransportOptions opt;
  const WireContext ctx = shm_context(0, store.get(), &opt);
  // Rank 1's segment, as ShmWire's set-up writes it, then the input over it.
  const Layout pl = shm_layout();
  const std::string pname = shm_name(ctx, 1);
  uint8_t* pbase = shm_segment(ctx, 1);
  SegHeader* ph = reinterpret_cast<SegHeader*>(pbase);
  if (flags & kShmBadHeader) {
    uint8_t x[48];
    in.take(x, sizeof x);
    uint8_t* h = reinterpret_cast<uint8_t*>(ph);
    for (size_t i = 0; i < sizeof x; ++i) h[i] ^= x[i];
  }
  if (flags & kShmAbortMark) {
    ph->abort.rank = in.get<int32_t>();
    ph->abort.code = in.get<int32_t>();
    in.take(ph->abort.msg, 32);
    std::memset(ph->abort.msg + 32, 'x', sizeof ph->abort.msg - 32);  // no terminating zero
    ph->abort.state.store(AbortMark::kSet, std::memory_order_release);
  }
  store->set_str("shm/ready/1", std::to_string(pl.total));
  if (flags & kShmSingleCopy) ::setenv("BRAID_SHM_CMA_BYTES", "4097", 1);

  std::unique_ptr<Wire> wire;
  try {
    wire = make_shm_wire(ctx, {1});
  } catch (const braid::Error&) {
  }
  ::unsetenv("BRAID_SHM_CMA_BYTES");
  if (wire) {
    // Rank 0's segment, where rank 1 writes its ring to rank 0.
    size_t len = 0;
    const std::string mname = shm_name(ctx, 0);
    const char* step = nullptr;
    uint8_t* mbase = shm_attach(mname, &len, &step);
    if (!mbase) braid::throw_errno(std::string(step) + " " + mname);
    ::shm_unlink(mname.c_str());
    const Layout ml = shm_layout();
    uint8_t* ring = ml.ring(mbase, 0);
    RingCtl* ctl = reinterpret_cast<RingCtl*>(ring);
    uint8_t* slots = ring + ml.ring_ctl;
    const uint64_t head = in.get<uint64_t>();
    ctl->fb_blocked.store(in.get<uint32_t>(), std::memory_order_relaxed);
    for (size_t b = 0; b < 2; ++b) {
      FastBox& box = ctl->fb[b];
      in.take(&box.len, 8);
      in.take(&box.sig, sizeof box.sig);
      box.stamp.store(in.get<uint64_t>(), std::memory_order_release);
    }
    for (size_t s = 0; s < kShmSlots; ++s) in.take(slots + s * ml.stride, kSlotHdr);
    ctl->head.store(head, std::memory_order_release);

    std::vector<uint8_t> dst(bytes + 1), acc(bytes + 1, 0);
    Request r;
    r.kind = reduce ? Request::Kind::kRecvReduce : Request::Kind::kRecv;
    r.peer = 1;
    r.sig = shm_sig(bytes, reduce);
    r.dst = dst.data();
    r.acc = acc.data();
    r.dtype = r.sig.dtype;
    try {
      wire->post(&r);
      for (int i = 0; i < 2 * int(kShmSlots) + 4 && !r.complete; ++i) wire->progress();
    } catch (const braid::Error&) {
    }
    wire.reset();
    ::munmap(mbase, len);
  }
  ::shm_unlink(pname.c_str());
  ::munmap(pbase, pl.total);
}
