// ps::Server: hot-key frames on a server's connections (ps.h "Hot keys").
#include "ps/server/server_impl.h"
#include "ps/server_name.h"

namespace braid::ps {

namespace {
// Bounds a refresh frame's allocation before its entries are checked.
constexpr uint64_t kMaxHotPayload = uint64_t(1) << 30;
}  // namespace

// Hot-key frames (ps.h "Hot keys"): refreshes from a peer's hot connection,
// hot pulls and hot-set queries from a worker's.
void Server::Impl::hot_frame(Link& link, const wire::Header& h, bool hot_conn, Shard& sh, std::vector<uint8_t>& in,
                             wire::Header& reply, ReplyBuf& out, int64_t deadline) {
  auto name = [&] { return server_name(opt.rank); };
  BRAID_CHECK_ARG(replicas != nullptr, name() + ": " + wire::op_name(h.op) +
                                           " but hot keys are off on this server");
  BRAID_CHECK_ARG(hot_conn == (h.op == wire::kHotPush),
                  name() + ": " + wire::op_name(h.op) + " on the wrong kind of connection");
  reply = h;
  reply.op = uint16_t(h.op | wire::kReply);
  reply.status = 0;
  out.clear();
  if (h.op == wire::kHotPush) {
    if (h.payload > kMaxHotPayload)
      throw Error(Errc::kProtocol, name() + ": hot-key refresh of " + std::to_string(h.payload) +
                                       " bytes");
    in.resize(h.payload);
    link.payload(in.data(), in.size(), deadline, "parameter server: hot refresh");
    replicas->refresh(h, in);
  } else if (h.op == wire::kHotPull) {
    const uint64_t n = replicas->expected_payload(h);
    if (h.payload != n)
      throw Error(Errc::kProtocol, name() + ": hot pull carries " + std::to_string(h.payload) +
                                       " bytes, expected " + std::to_string(n));
    in.resize(n);
    link.payload(in.data(), n, deadline, "parameter server: hot pull");
    hot_pull(h, in.data(), reply, out, deadline);
  } else {
    if (h.payload != 0) throw Error(Errc::kProtocol, name() + ": hot-set request with a payload");
    sh.state->hot_set(out);
  }
  reply.payload = out.size();
}

void Server::Impl::hot_pull(const wire::Header& h, const uint8_t* rows, wire::Header& reply,
                            ReplyBuf& out, int64_t deadline) {
  thread_local std::vector<uint8_t> values;  // HotReplicas::pull fills it whole
  reply = h;
  reply.op = uint16_t(h.op | wire::kReply);
  reply.status = 0;
  replicas->pull(h, rows, reply, values, deadline);
  out.append(values.data(), values.size());
  reply.payload = values.size();
  own().count_replica_pulls(int64_t(h.count));
}

ShardState::HotPulls Server::Impl::hot_pulls() {
  ShardState::HotPulls p;
  p.check = [this](const wire::Header& h) { return replicas->expected_payload(h); };
  p.run = [this](const wire::Header& h, const uint8_t* rows, wire::Header& reply,
                 ReplyBuf& out, int64_t deadline) {
    hot_pull(h, rows, reply, out, deadline);
  };
  return p;
}

}  // namespace braid::ps
