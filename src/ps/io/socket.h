// TCP sockets for the parameter server. Private to src/ps.
#pragma once

#include <chrono>
#include <string>

namespace braid::ps {

// A listening socket on host (IPv4 dotted or a name) and a free port.
// Returns the fd; *port gets the port. Throws Error(kIo).
int listen_tcp(const std::string& host, int* port);
// Accepts one connection (-1 when none is pending or it failed), with
// TCP_NODELAY (a request/reply protocol must not wait out delayed ACKs)
// and keepalive: a peer whose host vanished fails the connection in about
// 10 s rather than at the next deadline. connect_tcp's sockets likewise.
int accept_tcp(int listen_fd);
// Connects to host:port, retrying refused connections until `timeout`
// (a server may not listen yet). Throws Error(kTimeout) naming `what`.
int connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout,
                const std::string& what);
// connect_tcp, then the job-secret handshake (comm/store/auth.h), both
// retried until `timeout` while the server closes the connection before
// the handshake ends: a server refuses connections while too many are
// proving the secret (a flood of strangers). The proof itself failing
// (Error(kAuth)) is final.
int connect_authenticated(const std::string& host, int port, const std::string& secret,
                          std::chrono::milliseconds timeout, const std::string& what);
// Waits up to `ms` for fd to become readable (or closed). True if so.
bool wait_readable(int fd, int ms);
// A blocking recv on fd returns EAGAIN after `ms` without data
// (SO_RCVTIMEO); the frame readers then wait out their deadline with poll.
void set_recv_timeout(int fd, int ms);

}  // namespace braid::ps
