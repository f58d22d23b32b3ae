#include "ps/chain.h"

#include "braid/error.h"

namespace braid::ps {

namespace {
std::string dead_key(int p) { return "ps/dead/" + std::to_string(p); }
}  // namespace

ChainView::ChainView(int servers, int replicas, std::shared_ptr<Store> store)
    : S_(servers), R_(replicas), store_(std::move(store)), dead_(size_t(servers), false) {
  BRAID_CHECK_ARG(replicas >= 1 && replicas <= servers,
                  "parameter-server chains of " + std::to_string(replicas) +
                      " replicas need 1 <= replicas <= servers (" + std::to_string(servers) + ")");
  BRAID_CHECK_ARG(store_ != nullptr, "a parameter server or worker needs the job's store");
  if (R_ > 1) refresh();
}

std::vector<int> ChainView::shards_of(int p) const {
  std::vector<int> out;
  for (int i = 0; i < R_; ++i) out.push_back(((p - i) % S_ + S_) % S_);
  return out;
}

std::vector<int> ChainView::chain(int s) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<int> c;
  for (int i = 0; i < R_; ++i) {
    const int p = (s + i) % S_;
    if (!dead_[size_t(p)]) c.push_back(p);
  }
  if (c.empty())
    throw Error(Errc::kPeerDied, "parameter-server shard " + std::to_string(s) +
                                     ": every server of its chain of " + std::to_string(R_) +
                                     " is dead");
  return c;
}

int ChainView::successor(int s, int p) const {
  const std::vector<int> c = chain(s);
  for (size_t i = 0; i + 1 < c.size(); ++i)
    if (c[i] == p) return c[i + 1];
  return -1;
}

uint32_t ChainView::epoch() const {
  std::lock_guard<std::mutex> lk(mu_);
  return epoch_;
}

bool ChainView::dead(int p) const {
  std::lock_guard<std::mutex> lk(mu_);
  return dead_[size_t(p)];
}

void ChainView::refresh() {
  std::vector<bool> d(size_t(S_), false);
  uint32_t n = 0;
  for (int p = 0; p < S_; ++p)
    if (store_->check(dead_key(p))) {
      d[size_t(p)] = true;
      ++n;
    }
  std::lock_guard<std::mutex> lk(mu_);
  // The set only grows: a stale read never shrinks the view.
  if (n < epoch_) return;
  dead_ = d;
  epoch_ = n;
}

void ChainView::declare_dead(int p) {
  store_->set_str(dead_key(p), "1");
  refresh();
}

}  // namespace braid::ps
