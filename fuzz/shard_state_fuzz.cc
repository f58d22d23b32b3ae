// A parameter server's shard state as it arrives from outside the process:
// the state transfer a joining server receives from its chain's tail, and
// a shard file a restarted server resumes from. Both are checkpoint files
// read by ShardState::transfer_in (ps/shard/shard_state.h): the checkpoint
// checks, then the shard's parameters and optimizer slots
// (restore_shard_file) and its live rounds, roster, write ids and reports
// (restore_live). The input is the file up to its CRC, which the target
// seals (as checkpoint_fuzz does) and writes where transfer_in reads it.
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "fuzz_target.h"
#include "ps/shard/shard_state.h"
#include "ps_setup.h"

BRAID_FUZZ_TARGET(shard_state) {
  static const braid::ps::Layout layout = braid::fuzz::ps_layout();
  static const braid::ps::ServerOptions opt = braid::fuzz::ps_options("unused", 2);
  static const std::string path = "/tmp/braid_fuzz_shard_" + std::to_string(::getpid()) + ".ckpt";
  std::vector<char> file(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  const uint32_t crc = braid::crc32(file.data(), file.size());
  file.insert(file.end(), reinterpret_cast<const char*>(&crc), reinterpret_cast<const char*>(&crc) + 4);
  const char end[8] = {'B', 'R', 'A', 'I', 'D', 'E', 'N', 'D'};
  file.insert(file.end(), end, end + 8);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(file.data(), std::streamsize(file.size()));
  }
  braid::ps::ShardState st(layout, opt, {std::vector<float>(8, 1.f), {}}, {});
  try {
    st.transfer_in(path);
  } catch (const braid::Error&) {
  }
}
