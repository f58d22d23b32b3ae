#include "ps/hot/hot_keys.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "braid/env.h"
#include "ps/server_name.h"

namespace braid::ps {

namespace {
constexpr int64_t kHotFactor = 8;  // ps.h: at least 8× the mean count
}

const std::vector<RowId>& HotCounter::update() {
  if (counts_.empty() || hot_.size() >= max_) return hot_;
  // count ≥ 8 × mean  ⇔  count · distinct ≥ 8 · total (no rounding).
  const int64_t distinct = int64_t(counts_.size());
  std::vector<std::pair<int64_t, RowId>> cand;
  for (const auto& [id, n] : counts_)
    if (!is_hot_.count(id) && n * distinct >= kHotFactor * total_) cand.push_back({n, id});
  // Hottest first; ties by row id so every run picks the same rows.
  std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (const auto& [n, id] : cand) {
    if (hot_.size() >= max_) break;
    hot_.push_back(id);
    is_hot_.insert(id);
  }
  return hot_;
}

void append_hot_row(std::vector<uint8_t>& out, KeyId k, int64_t row, const float* w,
                    int64_t width) {
  const size_t at = out.size();
  out.resize(at + 16 + size_t(width) * 4);
  const int64_t key = k;
  std::memcpy(out.data() + at, &key, 8);
  std::memcpy(out.data() + at + 8, &row, 8);
  std::memcpy(out.data() + at + 16, w, size_t(width) * 4);
}

HotReplicas::HotReplicas(const Layout& layout, const ServerOptions& opt)
    : layout_(layout), opt_(opt) {}

void HotReplicas::refresh(const wire::Header& h, const std::vector<uint8_t>& payload) {
  const std::string where =
      server_name(opt_.rank) + ": hot-key refresh from shard " + std::to_string(h.key);
  if (h.key >= uint32_t(layout_.servers()) || int(h.key) == opt_.rank)
    throw Error(Errc::kProtocol, where + ": not another server's shard");
  std::vector<std::pair<RowId, const float*>> entries;
  size_t at = 0;
  for (uint64_t i = 0; i < h.count; ++i) {
    int64_t key = -1, row = -1;
    if (payload.size() - at < 16) throw Error(Errc::kProtocol, where + ": payload cut short");
    std::memcpy(&key, payload.data() + at, 8);
    std::memcpy(&row, payload.data() + at + 8, 8);
    if (key < 0 || uint64_t(key) >= layout_.size() || !layout_.key(KeyId(key)).sparse)
      throw Error(Errc::kProtocol, where + ": key " + std::to_string(key) + " is not sparse");
    const KeySpec& spec = layout_.key(KeyId(key));
    if (row < 0 || row >= spec.rows || layout_.row_server(row) != int(h.key))
      throw Error(Errc::kProtocol, where + ": row " + std::to_string(row) + " of key '" +
                                       spec.name + "' is not that shard's");
    at += 16;
    if (payload.size() - at < size_t(spec.width) * 4)
      throw Error(Errc::kProtocol, where + ": payload cut short");
    entries.push_back({{KeyId(key), row}, reinterpret_cast<const float*>(payload.data() + at)});
    at += size_t(spec.width) * 4;
  }
  if (at != payload.size()) throw Error(Errc::kProtocol, where + ": trailing payload bytes");
  std::lock_guard<std::mutex> lk(mu_);
  Copy& c = copies_[int(h.key)];
  for (const auto& [id, w] : entries) {
    auto& v = c.rows[id];
    v.assign(w, w + layout_.key(id.first).width);
  }
  c.round = std::max(c.round, h.clock);
  cv_.notify_all();
}

uint64_t HotReplicas::expected_payload(const wire::Header& h) const {
  const std::string where = server_name(opt_.rank) + ": hot pull";
  BRAID_CHECK_ARG(h.key < layout_.size() && layout_.key(h.key).sparse,
                  where + " of key id " + std::to_string(h.key) + ", which is not a sparse key");
  BRAID_CHECK_ARG(h.offset < uint64_t(layout_.servers()) && int(h.offset) != opt_.rank,
                  where + " names owner shard " + std::to_string(h.offset) +
                      ", not another server's");
  BRAID_CHECK_ARG(h.count > 0 && h.count <= uint64_t(layout_.key(h.key).rows),
                  where + " of " + std::to_string(h.count) + " rows");
  return h.count * 8;
}

void HotReplicas::pull(const wire::Header& h, const uint8_t* payload, wire::Header& reply,
                       std::vector<uint8_t>& out, int64_t deadline_ns) {
  const KeySpec& spec = layout_.key(h.key);
  std::vector<int64_t> rows(h.count);
  std::memcpy(rows.data(), payload, h.count * 8);
  // The same rounds a pull at this clock needs on the owner (ps/consistency/rounds.cc).
  const int64_t need = opt_.consistency == Consistency::kSsp ? h.clock - opt_.staleness : h.clock;
  const int shard = int(h.offset);
  std::unique_lock<std::mutex> lk(mu_);
  auto ready = [&] {
    if (stopping_) return true;
    auto it = copies_.find(shard);
    if (it == copies_.end() || it->second.round < need) return false;
    for (int64_t r : rows)
      if (!it->second.rows.count({h.key, r})) return false;
    return true;
  };
  while (!ready()) {
    const int64_t left = deadline_ns - int64_t(now_ns());
    if (left <= 0)
      throw Error(Errc::kTimeout, server_name(opt_.rank) + ": hot pull of key '" + spec.name +
                                      "' from shard " + std::to_string(shard) + " for clock " +
                                      std::to_string(h.clock) + ": no refresh that new");
    cv_.wait_for(lk, std::chrono::nanoseconds(left));
  }
  if (stopping_) throw Error(Errc::kPeerDied, "parameter server stopping");
  const Copy& c = copies_.at(shard);
  out.resize(h.count * uint64_t(spec.width) * 4);
  float* o = reinterpret_cast<float*>(out.data());
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(o + i * size_t(spec.width), c.rows.at({h.key, rows[i]}).data(),
                size_t(spec.width) * 4);
  reply.clock = h.clock;
}

void HotReplicas::stop() {
  std::lock_guard<std::mutex> lk(mu_);
  stopping_ = true;
  cv_.notify_all();
}

}  // namespace braid::ps
