// A connection's frames over TCP or shared-memory rings (link.h).
#include "ps/io/link.h"

#include <cstring>
#include <string>

#include "braid/env.h"
#include "braid/error.h"

namespace braid::ps {

void Link::use_shm(std::unique_ptr<ShmChannel> ch) {
  BRAID_CHECK_ARG(rx_.buffered() == 0, "parameter server: bytes buffered when moving to shared memory");
  ch_ = std::move(ch);
}

void Link::send(const wire::Header& h, const void* payload, int64_t deadline_ns, const char* what) {
  if (!ch_) {
    wire::send_frame(fd_, h, payload, deadline_ns, what);
    return;
  }
  iovec iov[2] = {{const_cast<wire::Header*>(&h), sizeof h},
                  {const_cast<void*>(payload), payload ? size_t(h.payload) : 0}};
  ch_->write(fd_, iov, 2, deadline_ns, what);
}

uint8_t* Link::reply_area(size_t* room) {
  if (!ch_) return nullptr;
  size_t free = 0;
  uint8_t* at = ch_->write_area(&free);
  if (free <= sizeof(wire::Header)) return nullptr;
  *room = free - sizeof(wire::Header);
  return at + sizeof(wire::Header);
}

void Link::send_placed(const wire::Header& h, const char* what) {
  size_t free = 0;
  uint8_t* at = ch_->write_area(&free);
  BRAID_CHECK_ARG(sizeof h + h.payload <= free, std::string(what) + ": a placed reply outgrew its room");
  std::memcpy(at, &h, sizeof h);
  ch_->commit(fd_, sizeof h + size_t(h.payload));
}

void Link::send_gather(std::vector<iovec>& iov, int64_t deadline_ns, const char* what) {
  if (!ch_) {
    wire::write_gather(fd_, iov, deadline_ns, what);
    return;
  }
  ch_->write(fd_, iov.data(), iov.size(), deadline_ns, what);
}

size_t Link::buffered() const { return ch_ ? ch_->readable() - taken_ : rx_.buffered(); }

void Link::release() {
  if (taken_) ch_->consume(fd_, taken_);
  taken_ = 0;
}

void Link::await(size_t n, int64_t deadline_ns, const char* what) {
  if (!ch_->wait_readable(fd_, n, deadline_ns, what))
    throw Error(Errc::kTimeout, std::string(what) + ": timed out");
}

bool Link::arrived(const char* what) {
  if (!ch_) return rx_.arrived(fd_, what);
  release();
  return ch_->wait_readable(fd_, 1, int64_t(now_ns()) + int64_t(idle_ms_) * 1000000, what);
}

wire::Header Link::header(int64_t deadline_ns, const char* what) {
  if (!ch_) return rx_.header(fd_, deadline_ns, what);
  wire::Header h;
  std::memcpy(&h, take(sizeof h, deadline_ns, what), sizeof h);
  wire::check_magic(h, what);
  return h;
}

const uint8_t* Link::take(size_t n, int64_t deadline_ns, const char* what) {
  if (!ch_) return rx_.take(fd_, n, deadline_ns, what);
  release();
  if (n > ch_->capacity()) {
    spill_.resize(n);
    payload(spill_.data(), n, deadline_ns, what);
    return spill_.data();
  }
  await(n, deadline_ns, what);
  taken_ = n;
  return ch_->peek();
}

void Link::payload(void* dst, size_t n, int64_t deadline_ns, const char* what) {
  if (!ch_) {
    rx_.payload(fd_, dst, n, deadline_ns, what);
    return;
  }
  release();
  auto* d = static_cast<uint8_t*>(dst);
  while (n > 0) {
    await(1, deadline_ns, what);
    const size_t k = std::min(n, ch_->readable());
    std::memcpy(d, ch_->peek(), k);
    ch_->consume(fd_, k);
    d += k;
    n -= k;
  }
}

void Link::want(size_t n, int64_t deadline_ns, const char* what) {
  // On the rings every call waits for its own bytes; nothing to gather.
  if (!ch_) rx_.want(fd_, n, deadline_ns, what);
}

}  // namespace braid::ps
