#include "braid/survivable.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "braid/error.h"

namespace braid::launch {

namespace {
std::string key(int rank) { return "launch/survivable/" + std::to_string(rank); }
constexpr const char* kFailedKey = "launch/failed";
constexpr const char* kFailedClaim = "launch/failed/claims";

// Open MPI's reading of a boolean MCA value: a non-zero integer, or
// true / yes / enabled in any case.
bool mca_true(const char* v) {
  if (!v || !*v) return false;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (s == "true" || s == "yes" || s == "enabled") return true;
  char* end = nullptr;
  const long n = std::strtol(s.c_str(), &end, 10);
  return end != s.c_str() && *end == '\0' && n != 0;
}
}  // namespace

void mark_survivable(Store& store, int rank, const std::string& why) {
  BRAID_CHECK_ARG(rank >= 0, "mark_survivable: rank " + std::to_string(rank) + " < 0");
  BRAID_CHECK_ARG(!why.empty(), "mark_survivable: rank " + std::to_string(rank) +
                                    " gave no reason its death is survivable");
  store.set_str(key(rank), why);
}

std::optional<std::string> survivable_reason(Store& store, int rank) {
  if (!store.check(key(rank))) return std::nullopt;
  return store.get_str(key(rank));
}

std::string launcher_recovery_option() {
  // OMPI_COMM_WORLD_SIZE is what bootstrap reads to call the job mpirun's.
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return "";
  // Open MPI 5's runtime, PRRTE, marks every process it starts with
  // PRTE_LAUNCHED; Open MPI 4's ORTE never sets it.
  if (std::getenv("PRTE_LAUNCHED")) {
    // Open MPI 5: --with-ft ulfm (or mpi) makes the job recoverable and
    // exports OMPI_MCA_mpi_ft_enable=1 to the ranks. --enable-recovery
    // also makes it recoverable, but as a job attribute that no rank's
    // environment shows, so the option braid can see is the one it names.
    if (mca_true(std::getenv("OMPI_MCA_mpi_ft_enable"))) return "";
    return "mpirun --with-ft ulfm";
  }
  if (mca_true(std::getenv("OMPI_MCA_orte_enable_recovery"))) return "";
  return "mpirun --enable-recovery";
}

void post_failure(Store& store, int rank, const std::string& what) {
  try {
    // The first poster wins: add() orders concurrent failures.
    if (store.add(kFailedClaim, 1) == 1)
      store.set_str(kFailedKey, "rank " + std::to_string(rank) + ": " + what);
  } catch (const std::exception&) {
    // The rank is failing already; its own error is the one to report.
  }
}

std::optional<std::string> posted_failure(Store& store) {
  if (!store.check(kFailedKey)) return std::nullopt;
  return store.get_str(kFailedKey);
}

}  // namespace braid::launch
