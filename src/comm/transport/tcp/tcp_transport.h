// TCP wire between ranks (other hosts, or every peer with BRAID_TRANSPORT=tcp).
//
// Set-up (tcp_connect.h): each rank listens on one socket whose address it
// publishes in the store; the higher rank of a pair connects to the lower
// one. Every connection proves the job secret (authenticate_connect/accept)
// and then sends a hello naming its rank and the communicator token before
// anything else is read; connections that fail either are logged and
// dropped without disturbing set-up. After set-up the listener is closed.
//
// Data: non-blocking sockets with TCP_NODELAY, epoll (edge triggered).
// A message is its 40-byte MsgSig followed by sig.bytes payload bytes, sent
// with one sendmsg (header + payload iovecs). A pair may open several
// connections (BRAID_TCP_STREAMS, default 1, at most 16; every rank must use
// the same value, checked at set-up): messages of 256 KiB and up are then
// cut into one stripe per connection (boundaries on 64-byte multiples, so
// stripes hold whole elements), each stripe behind its own copy of the
// header; smaller messages go whole on connection 0, which therefore sees
// every message, so a mismatch is caught there first. On loopback extra
// connections gain nothing (one default); between hosts, where one flow is
// bound to one core's network processing, they are the usual remedy. Receives go through a per-peer
// buffer (BRAID_TCP_RXBUF_BYTES, default 256 KiB) that also serves as the
// staging area of kRecvReduce (whole elements are reduced, a partial element
// waits for the next read); large kRecv payloads are read straight into the
// destination. BRAID_TCP_BUF_BYTES sets SO_SNDBUF/SO_RCVBUF; the default 0
// keeps the kernel's autotuning, which adapts each buffer to its flow where
// a fixed size must guess, and fixed sizes are capped by
// net.core.{w,r}mem_max anyway.
// BRAID_TCP_ADDR overrides the published address (default: 127.0.0.1 when
// every TCP peer is on this host, else this host's first non-loopback IPv4
// address).
#pragma once

#include <memory>
#include <vector>

#include "comm/transport/wire.h"

namespace braid::comm {

// Collective over `peers` (ranks reached over TCP). Throws Error(kTimeout)
// naming the peers that did not connect within the set-up deadline.
std::unique_ptr<Wire> make_tcp_wire(const WireContext& ctx, const std::vector<int>& peers);

}  // namespace braid::comm
