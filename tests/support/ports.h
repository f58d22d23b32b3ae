// A TCP port for a test's store or rendezvous to listen on.
#pragma once

namespace braid::testing {

// A port on 127.0.0.1 that nothing is bound to now (with `pair`, the next
// one too), drawn at random below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range). A port the kernel handed out
// by bind(0) is one it may hand to another process's outgoing connection
// before the test listens on it ("Address already in use"); below the
// range only another test's own draw can take it. 0 when 100 draws found
// none.
int free_port(bool pair = false);

}  // namespace braid::testing
