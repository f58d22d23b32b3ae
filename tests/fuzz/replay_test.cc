// Every input in fuzz/corpus/<target>/ (the seeds) and
// fuzz/regressions/<target>/ (each input a fuzzer once found a crash, hang,
// leak or sanitizer report with, kept after its fix) run through the fuzz
// targets (fuzz/<target>_fuzz.cc, compiled here as plain functions: see
// fuzz/fuzz_target.h) with the ordinary compiler, so `make test` replays
// them without clang. A target fails the test by crashing, by throwing
// anything but braid::Error out of the parser, or (under the ASan build)
// by a sanitizer report.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/asan.h"
#include "../../fuzz/auth_fuzz.cc"
#include "../../fuzz/checkpoint_fuzz.cc"
#include "../../fuzz/cluster_fuzz.cc"
#include "../../fuzz/dataset_fuzz.cc"
#include "../../fuzz/model_fuzz.cc"
#include "../../fuzz/ps_frame_fuzz.cc"
#include "../../fuzz/ps_reply_fuzz.cc"
#include "../../fuzz/ps_shm_fuzz.cc"
#include "../../fuzz/shard_state_fuzz.cc"
#include "../../fuzz/shm_ring_fuzz.cc"
#include "../../fuzz/store_reply_fuzz.cc"
#include "../../fuzz/store_request_fuzz.cc"
#include "../../fuzz/tcp_frame_fuzz.cc"
#include "../../fuzz/tuning_fuzz.cc"

// Under AddressSanitizer (CI's ASan stage): the parameter-server targets'
// server is stopped at exit (fuzz/ps_under_fuzz.h), and LeakSanitizer's
// check after it has reported OpenSSL's per-thread state, blocks allocated
// inside libcrypto that braid holds no pointer to, in about one libFuzzer
// run in ten (docs/FUZZING.md); the same suppression as
// fuzz/ps_server.lsan, for this binary only.
#if BRAID_ASAN
extern "C" const char* __lsan_default_suppressions() { return "leak:CRYPTO_zalloc\n"; }
#endif

namespace {

namespace fs = std::filesystem;
using Target = std::function<void(const uint8_t*, size_t)>;

const std::map<std::string, Target>& targets() {
  static const std::map<std::string, Target> t = {
      {"auth", braid_fuzz_auth},           {"checkpoint", braid_fuzz_checkpoint},
      {"cluster", braid_fuzz_cluster},     {"dataset", braid_fuzz_dataset},
      {"model", braid_fuzz_model},         {"ps_frame", braid_fuzz_ps_frame},
      {"ps_reply", braid_fuzz_ps_reply},   {"ps_shm", braid_fuzz_ps_shm},
      {"shard_state", braid_fuzz_shard_state}, {"shm_ring", braid_fuzz_shm_ring},
      {"store_reply", braid_fuzz_store_reply},
      {"store_request", braid_fuzz_store_request},
      {"tcp_frame", braid_fuzz_tcp_frame}, {"tuning", braid_fuzz_tuning},
  };
  return t;
}

// The source tree's fuzz/: from BRAID_SOURCE_DIR when set, else from this
// file's own path (the discovered tests' CTest ENVIRONMENT does not
// reach them with it: CMakeLists.txt passes it as a second list item).
fs::path fuzz_dir() {
  const char* src = std::getenv("BRAID_SOURCE_DIR");
  return (src ? fs::path(src) : fs::path(__FILE__).parent_path().parent_path().parent_path()) / "fuzz";
}

// Runs every file under fuzz/<kind>/<target>/; returns how many ran.
size_t replay(const std::string& kind) {
  size_t n = 0;
  const fs::path root = fuzz_dir() / kind;
  if (!fs::exists(root)) return 0;
  for (const auto& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory()) continue;
    const std::string name = dir.path().filename().string();
    auto it = targets().find(name);
    EXPECT_NE(it, targets().end()) << root << " has inputs for an unknown target " << name;
    if (it == targets().end()) continue;
    for (const auto& f : fs::directory_iterator(dir.path())) {
      std::ifstream in(f.path(), std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SCOPED_TRACE(f.path().string());
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_NO_THROW(it->second(bytes.data(), bytes.size()));
      // A hang is a finding too: no input may take the parser long.
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
      ++n;
    }
  }
  return n;
}

TEST(FuzzReplay, SeedCorporaRunCleanly) {
  // The recorded seeds exist for the targets that have a recorder
  // (fuzz/record_seeds.cc).
  const size_t n = replay("corpus");
  EXPECT_GE(n, 8u);
  for (const char* t : {"auth", "checkpoint", "cluster", "dataset", "model", "ps_frame", "ps_reply", "ps_shm", "shard_state", "shm_ring",
                        "store_reply", "store_request", "tcp_frame", "tuning"})
    EXPECT_TRUE(fs::exists(fuzz_dir() / "corpus" / t)) << t;
}

TEST(FuzzReplay, RegressionsRunCleanly) {
  // At least the first finding's input (fuzz/regressions/tuning/).
  EXPECT_GE(replay("regressions"), 1u);
}

}  // namespace
