// Mutual proof of the job secret on a freshly connected socket.
//
// Before anything else is read from a connection, both sides prove they know
// the job secret without sending it: each sends a random 32-byte nonce, and
// answers the other's nonce with HMAC-SHA256(secret, role || their_nonce ||
// my_nonce). A side that fails (wrong MAC, short read, timeout) gets
// Error(kAuth) and the caller drops the connection. Fixed-size frames only,
// so nothing is allocated from peer-controlled lengths.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace braid::comm {

// `fd` is a connected stream socket (blocking or not). `timeout` bounds the
// whole exchange. Throws Error(kAuth) on a failed proof, Error(kTimeout) or
// Error(kPeerDied) on a slow or closed peer.
void authenticate_accept(int fd, const std::string& secret, std::chrono::milliseconds timeout);
void authenticate_connect(int fd, const std::string& secret, std::chrono::milliseconds timeout);

// Full-length I/O with a deadline on any socket (poll-based). Throw
// Error(kTimeout) / Error(kPeerDied) / Error(kIo). `what` names the operation.
// On a blocking socket a read that has part of its bytes waits for the
// rest in one recv (MSG_WAITALL), past the deadline if they never come;
// the handshake above therefore runs its socket non-blocking.
void write_full(int fd, const void* buf, size_t n, int64_t deadline_ns, const char* what);
void read_full(int fd, void* buf, size_t n, int64_t deadline_ns, const char* what);
// At least `min` and at most `max` bytes into buf (read_full is min = max);
// returns how many. The first recv takes whatever has arrived up to max,
// later ones wait for the rest of min in one call (MSG_WAITALL).
size_t read_at_least(int fd, void* buf, size_t min, size_t max, int64_t deadline_ns,
                     const char* what);

}  // namespace braid::comm
