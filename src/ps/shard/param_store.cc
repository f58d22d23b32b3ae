// A shard's parameters, optimizer state and update rule (param_store.h).
#include "ps/shard/param_store.h"

#include <algorithm>
#include <cstring>

#include "ps/server_name.h"
#include "ps/shard/update_rule.h"

namespace braid::ps {

using wire::Header;

ParamStore::ParamStore(const Layout& layout, int shard, const UpdateRule& rule,
                       const std::vector<std::vector<float>>& init,
                       std::function<void(KeyId, int64_t, float*)> init_sparse)
    : layout_(layout), shard_(shard), rule_(rule), init_sparse_(std::move(init_sparse)) {
  BRAID_CHECK_ARG(init.size() == layout.size(),
                  "initial values for " + std::to_string(init.size()) + " keys, layout has " +
                      std::to_string(layout.size()));
  dense_.resize(layout.size());
  sparse_.resize(layout.size());
  const int slots = rule.slots();
  for (KeyId k = 0; k < layout.size(); ++k) {
    const KeySpec& spec = layout.key(k);
    if (spec.sparse) continue;
    BRAID_CHECK_ARG(int64_t(init[k].size()) == spec.size,
                    "initial values of key '" + spec.name + "' have " +
                        std::to_string(init[k].size()) + " elements, the key " +
                        std::to_string(spec.size));
    Dense& d = dense_[k];
    d.begin = layout.slice_begin(k, shard);
    d.end = layout.slice_end(k, shard);
    d.w.assign(init[k].begin() + d.begin, init[k].begin() + d.end);
    d.state.assign(size_t((d.end - d.begin) * slots), 0.0f);
  }
}

size_t ParamStore::row(KeyId k, int64_t row) {
  Sparse& sp = sparse_[k];
  auto it = sp.index.find(row);
  if (it != sp.index.end()) return it->second;
  const int64_t width = layout_.key(k).width;
  const size_t pos = sp.index.size();
  sp.index.emplace(row, pos);
  sp.w.resize(sp.w.size() + size_t(width), 0.0f);
  sp.state.resize(sp.state.size() + size_t(width * rule_.slots()), 0.0f);
  if (init_sparse_) init_sparse_(k, row, sp.w.data() + pos * size_t(width));
  return pos;
}

// Row ids of a sparse frame, each checked against the table and this server.
static std::vector<int64_t> frame_rows(const Layout& layout, int server, const Header& h,
                                       const uint8_t* payload, const std::string& where) {
  std::vector<int64_t> rows(h.count);
  std::memcpy(rows.data(), payload, h.count * 8);
  const KeySpec& spec = layout.key(h.key);
  for (int64_t r : rows) {
    if (r < 0 || r >= spec.rows)
      throw Error(Errc::kInvalidArgument, where + ": row " + std::to_string(r) +
                                              " outside sparse key '" + spec.name + "' of " +
                                              std::to_string(spec.rows) + " rows");
    if (layout.row_server(r) != server)
      throw Error(Errc::kInvalidArgument, where + ": row " + std::to_string(r) + " of key '" +
                                              spec.name + "' belongs to server " +
                                              std::to_string(layout.row_server(r)));
  }
  return rows;
}

void ParamStore::add_push(Contribution& c, const Header& h, const uint8_t* payload) const {
  const KeySpec& spec = layout_.key(h.key);
  if (!spec.sparse) {
    const Dense& d = dense_[h.key];
    std::vector<float>& acc = c.dense[h.key];
    if (acc.empty()) acc.assign(size_t(d.end - d.begin), 0.0f);
    const float* g = reinterpret_cast<const float*>(payload);
    float* a = acc.data() + (h.offset - uint64_t(d.begin));
    for (uint64_t i = 0; i < h.count; ++i) a[i] += g[i];
    return;
  }
  std::vector<int64_t> rows = frame_rows(layout_, shard_, h, payload, frame_where(shard_, h));
  const float* g = reinterpret_cast<const float*>(payload + h.count * 8);
  SparseGrad& table = c.sparse[h.key];
  table.rows.insert(table.rows.end(), rows.begin(), rows.end());
  table.g.insert(table.g.end(), g, g + rows.size() * size_t(spec.width));
}

// Every element is summed as 0 + parts[0] + parts[1] + ... (a part's
// repeated rows in arrival order), so the result is the same whatever
// order the rows came in. Sparse rows are merged by a sort of (row,
// arrival) rather than a map per row: a round is thousands of rows.
Contribution ParamStore::summed(const std::vector<const Contribution*>& parts) const {
  Contribution sum;
  for (const Contribution* c : parts)
    for (const auto& [k, g] : c->dense) {
      auto& acc = sum.dense[k];
      if (acc.empty()) acc.assign(g.size(), 0.0f);
      for (size_t i = 0; i < g.size(); ++i) acc[i] += g[i];
    }
  // (row, arrival, gradient): sorted by row then arrival, a row's pushes
  // are summed in arrival order.
  struct Entry {
    int64_t row;
    size_t seq;
    const float* g;
    bool operator<(const Entry& o) const { return row != o.row ? row < o.row : seq < o.seq; }
  };
  std::map<KeyId, std::vector<Entry>> by_key;
  for (const Contribution* c : parts)
    for (const auto& [k, sg] : c->sparse) {
      const size_t width = size_t(layout_.key(k).width);
      auto& v = by_key[k];
      for (size_t r = 0; r < sg.rows.size(); ++r)
        v.push_back({sg.rows[r], v.size(), sg.g.data() + r * width});
    }
  for (auto& [k, v] : by_key) {
    const size_t width = size_t(layout_.key(k).width);
    if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
    SparseGrad& out = sum.sparse[k];
    out.rows.reserve(v.size());
    out.g.reserve(v.size() * width);
    for (size_t i = 0; i < v.size(); ++i) {
      if (i == 0 || v[i].row != v[i - 1].row) {
        out.rows.push_back(v[i].row);
        out.g.resize(out.g.size() + width, 0.0f);
      }
      float* acc = out.g.data() + out.g.size() - width;
      for (size_t j = 0; j < width; ++j) acc[j] += v[i].g[j];
    }
  }
  return sum;
}

void ParamStore::apply(const Contribution& sum, int contributors, float lr) {
  const float inv = 1.0f / float(std::max(1, contributors));
  std::vector<float> mean;
  for (const auto& [k, g] : sum.dense) {
    Dense& d = dense_[k];
    mean.resize(g.size());
    for (size_t i = 0; i < g.size(); ++i) mean[i] = g[i] * inv;
    apply_update(rule_, d.w.data(), mean.data(), d.state.data(), int64_t(g.size()), lr, ++d.t,
                 layout_.key(k).decay);
  }
  for (const auto& [k, sg] : sum.sparse) {
    Sparse& sp = sparse_[k];
    const int64_t width = layout_.key(k).width;
    const int slots = rule_.slots();
    ++sp.t;
    mean.resize(size_t(width));
    for (size_t r = 0; r < sg.rows.size(); ++r) {
      const size_t pos = row(k, sg.rows[r]);
      const float* g = sg.g.data() + r * size_t(width);
      for (size_t i = 0; i < size_t(width); ++i) mean[i] = g[i] * inv;
      // A row's slots lie together, slot-major over its width.
      float* state = sp.state.data() + pos * size_t(width * slots);
      apply_update(rule_, sp.w.data() + pos * size_t(width), mean.data(), state, width, lr,
                   sp.t, layout_.key(k).decay);
    }
  }
  updates_applied += 1;
}

void ParamStore::read(const Header& h, const uint8_t* payload, ReplyBuf& out) {
  const KeySpec& spec = layout_.key(h.key);
  const size_t base = out.size();  // the reply is appended (a batch's replies share `out`)
  if (!spec.sparse) {
    const Dense& d = dense_[h.key];
    out.resize(base + h.count * 4);
    std::memcpy(out.data() + base, d.w.data() + (h.offset - uint64_t(d.begin)), h.count * 4);
    return;
  }
  std::vector<int64_t> rows(h.count);
  std::memcpy(rows.data(), payload, h.count * 8);
  for (int64_t r : rows)
    if (r < 0 || r >= spec.rows || layout_.row_server(r) != shard_)
      throw Error(Errc::kInvalidArgument, frame_where(shard_, h) + ": row " + std::to_string(r) +
                                              " of key '" + spec.name +
                                              "' is not on this server");
  out.resize(base + h.count * uint64_t(spec.width) * 4);
  float* o = reinterpret_cast<float*>(out.data() + base);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t pos = row(h.key, rows[i]);
    std::memcpy(o + i * size_t(spec.width), sparse_[h.key].w.data() + pos * size_t(spec.width),
                size_t(spec.width) * 4);
  }
}

}  // namespace braid::ps
