// Checkpoint files (braid/checkpoint.h) through parse_checkpoint, the
// function load_checkpoint reads every file with. The input is a file's
// contents up to its CRC; the target seals it with the format's CRC-32 and
// end marker (the library's own crc32) so that the fuzzer reaches the
// header and tensor checks behind the checksum, and, when the input's
// first byte is odd, also tries the input as a whole file, unsealed.
#include <vector>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "fuzz_target.h"

BRAID_FUZZ_TARGET(checkpoint) {
  std::vector<char> file(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  if (size > 0 && (data[0] & 1)) {
    try {
      braid::parse_checkpoint(file, "fuzz.ckpt");
    } catch (const braid::Error&) {
    }
  }
  const uint32_t crc = braid::crc32(file.data(), file.size());
  const char* c = reinterpret_cast<const char*>(&crc);
  file.insert(file.end(), c, c + 4);
  const char end[8] = {'B', 'R', 'A', 'I', 'D', 'E', 'N', 'D'};
  file.insert(file.end(), end, end + 8);
  try {
    braid::parse_checkpoint(file, "fuzz.ckpt");
  } catch (const braid::Error&) {
  }
}
