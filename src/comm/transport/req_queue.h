// ReqQueue: the FIFO of caller-owned requests that every wire keeps per
// peer and direction.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/transport/transport.h"

namespace braid::comm {

// FIFO of caller-owned requests; grows by doubling, never allocates in the
// steady state.
class ReqQueue {
 public:
  bool empty() const { return head_ == tail_; }
  size_t size() const { return tail_ - head_; }
  Request* front() const { return buf_[head_ & (buf_.size() - 1)]; }
  void pop() { ++head_; }
  void push(Request* r) {
    if (buf_.empty() || tail_ - head_ == buf_.size()) grow();
    buf_[tail_++ & (buf_.size() - 1)] = r;
  }

 private:
  void grow() {
    std::vector<Request*> nb(buf_.empty() ? 16 : buf_.size() * 2);
    size_t n = tail_ - head_;
    for (size_t i = 0; i < n; ++i) nb[i] = buf_[(head_ + i) & (buf_.size() - 1)];
    buf_.swap(nb);
    head_ = 0;
    tail_ = n;
  }
  std::vector<Request*> buf_;
  size_t head_ = 0, tail_ = 0;
};

}  // namespace braid::comm
