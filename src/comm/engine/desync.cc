#include "comm/engine/desync.h"

#include <cstring>

namespace braid::comm {
namespace {

bool is_collective(const MsgSig& s) {
  return s.seq > 0 && s.op != CollOp::kSend && s.op != CollOp::kRecv && s.op != CollOp::kProbe;
}

}  // namespace

bool same_call(const MsgSig& a, const MsgSig& b) {
  return a.seq == b.seq && a.op == b.op && a.count == b.count && a.dtype == b.dtype &&
         a.rop == b.rop && a.root == b.root;
}

Desync::Desync(std::shared_ptr<Store> store, int rank) : store_(std::move(store)), rank_(rank) {}

std::optional<Disagreement> Desync::stalled(const MsgSig& call,
                                            const std::vector<int>& waiting_on) {
  if (auto f = first_failure()) throw forward(*f);
  if (!is_collective(call)) return std::nullopt;
  std::vector<MsgSig> mine{call};
  for (const MsgSig& s : recent_)
    if (is_collective(s) && s.seq < call.seq) mine.push_back(s);
  try {
    if (published_seq_ != call.seq) {
      Bytes v(mine.size() * sizeof(MsgSig));
      std::memcpy(v.data(), mine.data(), v.size());
      store_->set("desync/" + std::to_string(rank_), v);
      published_seq_ = call.seq;
    }
    for (int p : waiting_on) {
      const std::string key = "desync/" + std::to_string(p);
      if (p == rank_ || !store_->check(key)) continue;
      const Bytes v = store_->get(key);
      if (v.size() % sizeof(MsgSig) != 0) continue;
      for (size_t i = 0; i < v.size() / sizeof(MsgSig); ++i) {
        MsgSig theirs;
        std::memcpy(&theirs, v.data() + i * sizeof(MsgSig), sizeof theirs);
        for (const MsgSig& ours : mine)
          if (ours.seq == theirs.seq && !same_call(ours, theirs))
            return Disagreement{p, ours, theirs};
      }
    }
  } catch (const Error&) {
    // The store is gone or slow: the wire's own checks report what failed.
  }
  return std::nullopt;
}

Error Desync::forward(const Failure& f) {
  return Error(f.code, "stopped, because " + f.origin + " failed first: " + f.msg);
}

void Desync::record_failure(Errc code, const std::string& origin, const std::string& msg) {
  try {
    const std::string text = origin + "\n" + msg;
    Bytes v(sizeof(int32_t) + text.size());
    const int32_t c = int32_t(code);
    std::memcpy(v.data(), &c, sizeof c);
    std::memcpy(v.data() + sizeof c, text.data(), text.size());
    store_->compare_set("failed", {}, v);
  } catch (const Error&) {
  }
}

std::optional<Desync::Failure> Desync::first_failure() {
  try {
    if (!store_->check("failed")) return std::nullopt;
    const Bytes v = store_->get("failed");
    int32_t c = 0;
    if (v.size() < sizeof c) return std::nullopt;
    std::memcpy(&c, v.data(), sizeof c);
    if (c < 0 || c > int32_t(Errc::kInternal)) return std::nullopt;
    const std::string text(v.begin() + sizeof c, v.end());
    const size_t nl = text.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    return Failure{Errc(c), text.substr(0, nl), text.substr(nl + 1)};
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace braid::comm
