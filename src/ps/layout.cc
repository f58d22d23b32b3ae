// Keys and their placement over servers (contract in include/braid/ps.h).
#include <set>

#include "braid/error.h"
#include "braid/ps.h"

namespace braid::ps {

Consistency parse_consistency(const std::string& s) {
  if (s == "bsp") return Consistency::kBsp;
  if (s == "asp") return Consistency::kAsp;
  if (s == "ssp") return Consistency::kSsp;
  if (s == "kofn") return Consistency::kRoundK;
  throw Error(Errc::kInvalidArgument,
              "consistency '" + s + "' is not one of bsp, asp, ssp, kofn");
}

const char* consistency_name(Consistency c) {
  switch (c) {
    case Consistency::kBsp: return "bsp";
    case Consistency::kAsp: return "asp";
    case Consistency::kSsp: return "ssp";
    case Consistency::kRoundK: return "kofn";
  }
  return "?";
}

Layout::Layout(int servers) : servers_(servers) {
  BRAID_CHECK_ARG(servers >= 1, "a parameter server layout needs at least one server (got " +
                                    std::to_string(servers) + ")");
}

namespace {
void check_new_name(const std::vector<KeySpec>& keys, const std::string& name) {
  BRAID_CHECK_ARG(!name.empty(), "a parameter-server key needs a name");
  for (const KeySpec& k : keys)
    BRAID_CHECK_ARG(k.name != name, "parameter-server key '" + name + "' registered twice");
}
}  // namespace

KeyId Layout::add_dense(const std::string& name, int64_t size, bool decay) {
  check_new_name(keys_, name);
  BRAID_CHECK_ARG(size > 0, "dense key '" + name + "' needs a positive size (got " +
                                std::to_string(size) + ")");
  KeySpec k;
  k.name = name;
  k.size = size;
  k.decay = decay;
  keys_.push_back(k);
  return KeyId(keys_.size() - 1);
}

KeyId Layout::add_sparse(const std::string& name, int64_t rows, int64_t width, bool decay) {
  check_new_name(keys_, name);
  BRAID_CHECK_ARG(rows > 0 && width > 0, "sparse key '" + name +
                                             "' needs positive rows and width (got " +
                                             std::to_string(rows) + " x " +
                                             std::to_string(width) + ")");
  KeySpec k;
  k.name = name;
  k.sparse = true;
  k.rows = rows;
  k.width = width;
  k.decay = decay;
  keys_.push_back(k);
  return KeyId(keys_.size() - 1);
}

const KeySpec& Layout::key(KeyId k) const {
  if (k >= keys_.size())
    throw Error(Errc::kInvalidArgument, "unknown parameter-server key id " + std::to_string(k) +
                                            " (the layout has " + std::to_string(keys_.size()) +
                                            " keys)");
  return keys_[k];
}

int64_t Layout::slice_begin(KeyId k, int s) const {
  const int64_t n = key(k).size;
  // Even cut; the product fits: sizes are far below 2^63 / servers.
  return n * int64_t(s) / int64_t(servers_);
}

int Layout::row_server(int64_t row) const {
  // splitmix64 finaliser: neighbouring (and Zipf-hot, low-numbered) rows
  // land on different servers.
  uint64_t z = uint64_t(row) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return int(z % uint64_t(servers_));
}

std::vector<int64_t> Layout::dense_elements_per_server() const {
  std::vector<int64_t> out(size_t(servers_), 0);
  for (KeyId k = 0; k < keys_.size(); ++k)
    if (!keys_[k].sparse)
      for (int s = 0; s < servers_; ++s) out[size_t(s)] += slice_end(k, s) - slice_begin(k, s);
  return out;
}

}  // namespace braid::ps
