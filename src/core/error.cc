#include "braid/error.h"

#include <cerrno>
#include <cstring>

namespace braid {

const char* errc_name(Errc c) {
  switch (c) {
    case Errc::kInvalidArgument: return "invalid argument";
    case Errc::kTimeout: return "timeout";
    case Errc::kPeerDied: return "peer died";
    case Errc::kMismatch: return "collective mismatch";
    case Errc::kAuth: return "authentication failed";
    case Errc::kProtocol: return "protocol error";
    case Errc::kIo: return "i/o error";
    case Errc::kCorrupt: return "corrupt data";
    case Errc::kNotSupported: return "not supported";
    case Errc::kInternal: return "internal error";
  }
  return "unknown";
}

void throw_errno(const std::string& what) {
  int e = errno;
  throw Error(Errc::kIo, what + ": " + std::strerror(e));
}

}  // namespace braid
