// braid::Error — the one exception type the library throws.
//
// Every failure carries a code (what kind of failure) and a message that,
// for communication failures, names this rank, the peer, the operation and
// its sequence number. The library never calls exit/abort on bad input.
#pragma once

#include <stdexcept>
#include <string>

namespace braid {

enum class Errc {
  kInvalidArgument,  // bad input from the caller: null buffer, bad root, ...
  kTimeout,          // a deadline passed
  kPeerDied,         // a peer's process exited or closed its connection,
                     // with no failure of the communicator before it
  kMismatch,         // ranks called different collectives / sizes / dtypes
                     // / roots. A rank told of another rank's failure
                     // gets that failure's code (kMismatch, kTimeout, ...)
  kAuth,             // a connection failed to prove the job secret
  kProtocol,         // malformed or oversized frame
  kIo,               // system call failed (socket, shm, file)
  kCorrupt,          // checksum or format error in a file
  kNotSupported,     // op/dtype pair or feature not available
  kInternal,         // a bug in braid
};

const char* errc_name(Errc c);

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  Errc code() const { return code_; }

 private:
  Errc code_;
};

// Throws Error(kIo) with `what` and strerror(errno).
[[noreturn]] void throw_errno(const std::string& what);

}  // namespace braid

// Checks a caller-supplied condition; throws kInvalidArgument otherwise.
#define BRAID_CHECK_ARG(cond, msg)                                  \
  do {                                                              \
    if (!(cond)) throw ::braid::Error(::braid::Errc::kInvalidArgument, (msg)); \
  } while (0)
