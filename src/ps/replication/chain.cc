#include "ps/replication/chain.h"

#include <algorithm>

#include "braid/error.h"
#include "braid/ps.h"

namespace braid::ps {

namespace {
std::string dead_key(int p) { return "ps/dead/" + std::to_string(p); }
std::string joined_key(int s, int i) {
  return "ps/joined/" + std::to_string(s) + "/" + std::to_string(i);
}
}  // namespace

int replacement_id(Store& store, int servers) {
  BRAID_CHECK_ARG(servers >= 1, "a parameter-server job has at least one server");
  return servers + int(store.add("ps/replacements", 1)) - 1;
}

ChainView::ChainView(int servers, int replicas, std::shared_ptr<Store> store)
    : S_(servers), R_(replicas), store_(std::move(store)), joined_(size_t(servers)) {
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
    if (!dead_.count(p)) c.push_back(p);
  }
  for (int p : joined_[size_t(s)])
    if (!dead_.count(p)) c.push_back(p);
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

bool ChainView::member(int s, int p) const {
  const std::vector<int> c = chain(s);
  return std::find(c.begin(), c.end(), p) != c.end();
}

std::vector<int> ChainView::shards_with(int p) const {
  std::vector<int> out;
  if (p >= 0 && p < S_) out = shards_of(p);
  std::lock_guard<std::mutex> lk(mu_);
  for (int s = 0; s < S_; ++s) {
    const std::vector<int>& j = joined_[size_t(s)];
    if (std::find(j.begin(), j.end(), p) != j.end()) out.push_back(s);
  }
  return out;
}

std::string ChainView::describe(int s) const {
  std::string m = "shard " + std::to_string(s) + " (members";
  for (int p : chain(s)) {
    m += ' ';
    m += std::to_string(p);
  }
  m += ')';
  return m;
}

uint32_t ChainView::epoch() const {
  std::lock_guard<std::mutex> lk(mu_);
  return epoch_;
}

bool ChainView::dead(int p) const {
  std::lock_guard<std::mutex> lk(mu_);
  return dead_.count(p) != 0;
}

void ChainView::refresh() {
  std::vector<std::vector<int>> joined(static_cast<size_t>(S_));
  std::set<int> d;
  for (int s = 0; s < S_; ++s)
    for (int i = 0; store_->check(joined_key(s, i)); ++i) {
      const int id = std::stoi(store_->get_str(joined_key(s, i)));
      joined[size_t(s)].push_back(id);
      if (store_->check(dead_key(id))) d.insert(id);
    }
  for (int p = 0; p < S_; ++p)
    if (store_->check(dead_key(p))) d.insert(p);
  uint32_t n = uint32_t(d.size());
  for (const auto& j : joined) n += uint32_t(j.size());
  std::lock_guard<std::mutex> lk(mu_);
  // Both sets only grow: a stale read never shrinks the view.
  if (n < epoch_) return;
  dead_ = std::move(d);
  joined_ = std::move(joined);
  epoch_ = n;
}

void ChainView::declare_dead(int p) {
  store_->set_str(dead_key(p), "1");
  refresh();
}

void ChainView::commit_join(int s, int id) {
  const int i = int(store_->add("ps/joins/" + std::to_string(s), 1)) - 1;
  store_->set_str(joined_key(s, i), std::to_string(id));
  refresh();
}

}  // namespace braid::ps
