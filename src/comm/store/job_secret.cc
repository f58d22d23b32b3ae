// make_job_secret: 32 random bytes from OpenSSL, as hex.
#include <openssl/rand.h>

#include <cstdint>
#include <string>

#include "braid/error.h"
#include "braid/store.h"

namespace braid {

std::string make_job_secret() {
  uint8_t raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1)
    throw Error(Errc::kInternal, "make_job_secret: RAND_bytes failed");
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t b : raw) {
    s.push_back(d[b >> 4]);
    s.push_back(d[b & 15]);
  }
  return s;
}

}  // namespace braid
