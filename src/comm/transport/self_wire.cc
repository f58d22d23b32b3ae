// The self wire: copies (or reduces) each send straight into the receive
// it meets; nothing to wait for.
#include "comm/transport/self_wire.h"

#include <cstring>

#include "braid/reduce.h"

namespace braid::comm {
namespace {

// Messages to oneself: a send meets the recv posted for it.
class SelfWire final : public Wire {
 public:
  explicit SelfWire(const WireContext& ctx) : Wire(ctx) {}
  void abort(const std::string&) override {}
  void post(Request* r) override { (r->kind == Request::Kind::kSend ? sends_ : recvs_).push(r); }
  bool progress() override {
    bool moved = false;
    while (!sends_.empty() && !recvs_.empty()) {
      Request* s = sends_.front();
      Request* r = recvs_.front();
      if (!sig_matches(s->sig, r->sig)) throw_mismatch(*r, s->sig, "self");
      size_t n = r->sig.bytes;
      if (n) {
        if (r->kind == Request::Kind::kRecv) {
          if (r->dst != s->src) std::memmove(r->dst, s->src, n);
        } else {
          reduce2(r->dst, r->acc, s->src, n / dtype_size(r->dtype), r->dtype, r->rop);
        }
      }
      s->done = r->done = n;
      s->complete = r->complete = true;
      sends_.pop();
      recvs_.pop();
      moved = true;
    }
    return moved;
  }
  void wait_activity(std::chrono::microseconds) override {}
  std::string kind_to(int) const override { return "self"; }
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }
  bool poll_ready() override { return false; }

 private:
  ReqQueue sends_, recvs_;
};

}  // namespace

std::unique_ptr<Wire> make_self_wire(const WireContext& ctx) { return std::make_unique<SelfWire>(ctx); }

}  // namespace braid::comm
