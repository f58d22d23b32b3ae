// make_transport: meets the peers through the store, picks a wire per peer
// (self / shm / tcp) and routes requests to it through a composite.
//
// Set-up: every rank publishes "info/<rank>" = pid, hostname, host identity
// and a random nonce (peer_info.h). Two ranks share memory when their host
// identities are equal: hostname + kernel boot id + IPC and PID namespaces
// (so pidfds and POSIX shm both work between them). BRAID_HOST_ID overrides
// the identity (tests use it to fake several hosts on one machine). Rank 0's
// nonce names this communicator's shm segments and authenticates TCP hellos.
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "comm/transport/composite_transport.h"
#include "comm/transport/self_wire.h"
#include "comm/transport/shm/shm_transport.h"
#include "comm/transport/tcp/tcp_transport.h"
#include "comm/transport/transport.h"
#include "comm/transport/wire.h"

namespace braid::comm {

std::unique_ptr<Transport> make_transport(int rank, int size, Store& store, const TransportOptions& opt) {
  BRAID_CHECK_ARG(size >= 1 && rank >= 0 && rank < size,
                  "make_transport: rank " + std::to_string(rank) + " of size " + std::to_string(size));
  BRAID_CHECK_ARG(opt.mode == "auto" || opt.mode == "tcp" || opt.mode == "shm",
                  "transport mode '" + opt.mode + "' (BRAID_TRANSPORT) is not auto, shm or tcp");
  WireContext ctx;
  ctx.rank = rank;
  ctx.size = size;
  ctx.store = &store;
  ctx.opt = &opt;
  ctx.deadline_ns = now_ns() + uint64_t(std::max<int64_t>(opt.timeout.count(), 0)) * 1000000;

  PeerInfo me;
  me.rank = rank;
  me.pid = int(::getpid());
  me.host = hostname();
  me.host_id = host_identity();
  me.cpus = affinity_hex();
  me.world_rank = opt.world_rank >= 0 ? opt.world_rank : rank;
  if (::getrandom(&me.nonce, sizeof me.nonce, 0) != sizeof me.nonce)
    me.nonce = now_ns() ^ (uint64_t(me.pid) << 32);
  store.set_str("info/" + std::to_string(rank), encode_peer_info(me));

  std::vector<std::string> keys;
  for (int p = 0; p < size; ++p) keys.push_back("info/" + std::to_string(p));
  try {
    store.wait(keys, std::chrono::milliseconds(std::max<int64_t>(ctx.ms_left(), 1)));
  } catch (const Error& e) {
    if (e.code() != Errc::kTimeout) throw;
    std::string missing;
    for (int p = 0; p < size; ++p)
      if (!store.check(keys[size_t(p)])) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
    throw Error(Errc::kTimeout, "rank " + std::to_string(rank) + ": transport set-up timed out after " +
                                    std::to_string(opt.timeout.count()) + " ms waiting for peer rank(s) " +
                                    missing + " to join");
  }
  ctx.peers.resize(size_t(size));
  for (int p = 0; p < size; ++p)
    ctx.peers[size_t(p)] = p == rank ? me : decode_peer_info(p, store.get_str(keys[size_t(p)]));
  char tok[17];
  std::snprintf(tok, sizeof tok, "%016llx", static_cast<unsigned long long>(ctx.peers[0].nonce));
  ctx.token = tok;

  std::vector<int> shm_peers, tcp_peers;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    bool same_host = ctx.peers[size_t(p)].host_id == me.host_id;
    if (opt.mode == "shm" && !same_host)
      throw Error(Errc::kNotSupported, "BRAID_TRANSPORT=shm needs every rank on one host, but " +
                                           describe_peer_info(ctx.peers[size_t(p)]) + " is not on " +
                                           me.host + " with rank " + std::to_string(rank));
    (opt.mode != "tcp" && same_host ? shm_peers : tcp_peers).push_back(p);
  }

  std::map<std::string, int> cores;  // host_id -> host_cores
  for (const PeerInfo& p : ctx.peers)
    if (!cores.count(p.host_id)) cores[p.host_id] = host_cores(ctx.peers, p.host_id);
  ctx.host_cores = cores[me.host_id];

  auto t = std::make_unique<CompositeTransport>(rank, ctx.peers, std::move(cores));
  t->add(make_self_wire(ctx), {rank}, false);
  // shm first, then tcp, on every rank: the shm groups never wait on TCP.
  if (!shm_peers.empty()) t->add(make_shm_wire(ctx, shm_peers), shm_peers, true);
  if (!tcp_peers.empty()) t->add(make_tcp_wire(ctx, tcp_peers), tcp_peers, true);
  BRAID_LOG(kDebug, "transport: rank " << rank << " of " << size << ": " << shm_peers.size()
                                       << " shm peer(s), " << tcp_peers.size() << " tcp peer(s)");
  return t;
}

}  // namespace braid::comm
