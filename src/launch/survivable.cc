#include "launch/survivable.h"

#include "braid/error.h"

namespace braid::launch {

namespace {
std::string key(int rank) { return "launch/survivable/" + std::to_string(rank); }
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

}  // namespace braid::launch
