// A shard's workers: attached, finished, dropped (roster.h).
#include "ps/shard/roster.h"

#include <algorithm>

#include "braid/env.h"
#include "braid/error.h"
#include "ps/server_name.h"

namespace braid::ps {

Roster::Roster(int workers, int server)
    : W_(workers),
      server_(server),
      attached_(size_t(workers), false),
      finished_(size_t(workers), false),
      dropped_at_(size_t(workers), 0) {}

void Roster::attach(int w) {
  if (attached_[size_t(w)])
    throw Error(Errc::kInvalidArgument,
                server_name(server_) + ": worker " + std::to_string(w) + " is already connected");
  attached_[size_t(w)] = true;
  dropped_at_[size_t(w)] = 0;
}

void Roster::detach(int w, bool gone) {
  attached_[size_t(w)] = false;
  if (gone && !finished_[size_t(w)] && !stopping_) dropped_at_[size_t(w)] = int64_t(now_ns());
}

std::vector<int> Roster::dropped_before(int64_t before_ns) const {
  std::vector<int> out;
  for (int w = 0; w < W_; ++w) {
    const int64_t at = dropped_at_[size_t(w)];
    if (at != 0 && at <= before_ns && !attached_[size_t(w)] && !finished_[size_t(w)])
      out.push_back(w);
  }
  return out;
}

bool Roster::all_finished() const {
  return std::all_of(finished_.begin(), finished_.end(), [](bool b) { return b; });
}

bool Roster::others_finished(int w) const {
  for (int o = 0; o < W_; ++o)
    if (o != w && !finished_[size_t(o)]) return false;
  return true;
}

std::string Roster::unfinished() const {
  std::string m;
  for (int w = 0; w < W_; ++w)
    if (!finished_[size_t(w)]) {
      m += ' ';
      m += std::to_string(w);
    }
  return m;
}

}  // namespace braid::ps
