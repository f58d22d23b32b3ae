// braid/survivable.h beyond braid's own launchers: which environments
// show a launcher that ends the job on any death (launcher_recovery_option)
// and the failure a rank posts for the ranks such a launcher leaves running
// (post_failure, posted_failure). Real processes race for the post.
#include "braid/survivable.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "braid/error.h"
#include "braid/store.h"
#include "support/multiproc.h"

namespace {

using braid::launch::launcher_recovery_option;
using braid::launch::post_failure;
using braid::launch::posted_failure;

void put(const char* k, const char* v) {
  if (v) ::setenv(k, v, 1);
  else ::unsetenv(k);
}

// What an Open MPI 4 (ORTE) rank sees: no PRTE_LAUNCHED.
TEST(Survivable, LauncherRecoveryOptionReadsOpenMpisEnvironment) {
  put("PRTE_LAUNCHED", nullptr);
  put("OMPI_MCA_mpi_ft_enable", nullptr);
  put("OMPI_MCA_orte_enable_recovery", nullptr);
  put("OMPI_COMM_WORLD_SIZE", nullptr);
  EXPECT_EQ(launcher_recovery_option(), "");  // braid run, srun, no launcher
  put("OMPI_COMM_WORLD_SIZE", "5");
  EXPECT_EQ(launcher_recovery_option(), "mpirun --enable-recovery");
  // Open MPI's boolean spellings: enabled ...
  for (const char* on : {"1", "true", "TRUE", "yes", "Enabled", "2"}) {
    put("OMPI_MCA_orte_enable_recovery", on);
    EXPECT_EQ(launcher_recovery_option(), "") << on;
  }
  // ... and not.
  for (const char* off : {"0", "false", "no", "", "1x"}) {
    put("OMPI_MCA_orte_enable_recovery", off);
    EXPECT_EQ(launcher_recovery_option(), "mpirun --enable-recovery") << "'" << off << "'";
  }
  // Open MPI 5's setting means nothing to Open MPI 4's mpirun.
  put("OMPI_MCA_mpi_ft_enable", "1");
  EXPECT_EQ(launcher_recovery_option(), "mpirun --enable-recovery");
  put("OMPI_MCA_mpi_ft_enable", nullptr);
  put("OMPI_MCA_orte_enable_recovery", nullptr);
  put("OMPI_COMM_WORLD_SIZE", nullptr);
}

// What an Open MPI 5 (PRRTE) rank sees: PRTE_LAUNCHED=1 beside the
// OMPI_COMM_WORLD_* variables, and OMPI_MCA_mpi_ft_enable=1 when mpirun
// was given --with-ft ulfm (or mpi). Only Open MPI 4.1.4 runs here: these
// are the variables PRRTE's sources set, not ones observed from a run.
TEST(Survivable, LauncherRecoveryOptionReadsOpenMpi5sEnvironment) {
  put("OMPI_MCA_orte_enable_recovery", nullptr);
  put("OMPI_MCA_mpi_ft_enable", nullptr);
  put("OMPI_COMM_WORLD_SIZE", nullptr);
  put("PRTE_LAUNCHED", "1");
  EXPECT_EQ(launcher_recovery_option(), "");  // prterun without Open MPI's ranks
  put("OMPI_COMM_WORLD_SIZE", "4");
  EXPECT_EQ(launcher_recovery_option(), "mpirun --with-ft ulfm");
  for (const char* on : {"1", "true", "yes"}) {
    put("OMPI_MCA_mpi_ft_enable", on);
    EXPECT_EQ(launcher_recovery_option(), "") << on;
  }
  for (const char* off : {"0", "false", ""}) {
    put("OMPI_MCA_mpi_ft_enable", off);
    EXPECT_EQ(launcher_recovery_option(), "mpirun --with-ft ulfm") << "'" << off << "'";
  }
  // Open MPI 4's setting means nothing to Open MPI 5's mpirun.
  put("OMPI_MCA_mpi_ft_enable", nullptr);
  put("OMPI_MCA_orte_enable_recovery", "1");
  EXPECT_EQ(launcher_recovery_option(), "mpirun --with-ft ulfm");
  put("OMPI_MCA_orte_enable_recovery", nullptr);
  put("OMPI_COMM_WORLD_SIZE", nullptr);
  put("PRTE_LAUNCHED", nullptr);
}

// Four ranks fail at once: one post is kept, whole, and every rank reads
// that one.
TEST(Survivable, TheFirstPostedFailureIsKept) {
  const std::string dir = braid::testing::temp_dir("survivable_post");
  {
    auto store = braid::make_file_store(dir);
    EXPECT_FALSE(posted_failure(*store).has_value());
  }
  braid::testing::expect_all_pass(4, [&](int rank, int size, std::shared_ptr<braid::Store> sync) {
    auto store = braid::make_file_store(dir);
    post_failure(*store, rank, "worker " + std::to_string(rank) + " gave up");
    sync->add("posted", 1);
    while (sync->add("posted", 0) < size) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto got = posted_failure(*store);
    ASSERT_TRUE(got.has_value());
    std::set<std::string> allowed;
    for (int r = 0; r < size; ++r)
      allowed.insert("rank " + std::to_string(r) + ": worker " + std::to_string(r) + " gave up");
    EXPECT_EQ(allowed.count(*got), 1u) << *got;
    sync->set_str("seen/" + std::to_string(rank), *got);
    for (int r = 0; r < size; ++r) {
      sync->wait({"seen/" + std::to_string(r)}, std::chrono::seconds(30));
      EXPECT_EQ(sync->get_str("seen/" + std::to_string(r)), *got);
    }
  }, std::chrono::seconds(60));
}

// A store that cannot take the post: post_failure does not throw, so the
// rank's own error is the one reported.
TEST(Survivable, PostFailureToADeadStoreDoesNotThrow) {
  std::shared_ptr<braid::Store> store;
  int port = 0;
  {
    braid::TcpStoreServer server("127.0.0.1", 0, "s3cret");
    port = server.port();
    store = braid::connect_tcp_store("127.0.0.1", port, "s3cret", std::chrono::seconds(10));
    store->set_str("k", "v");
  }
  EXPECT_NO_THROW(post_failure(*store, 2, "lost"));
  EXPECT_THROW(posted_failure(*store), braid::Error);
}

}  // namespace
