// Hot keys' owner side inside a shard (hot_owner.h).
#include "ps/hot/hot_owner.h"

namespace braid::ps {

void HotOwner::after_close(int64_t closed, ParamStore& store) {
  if (!sink_) return;
  const std::vector<RowId>& hot = counter_.update();
  rows_ = int64_t(hot.size());
  if (hot.empty()) return;
  std::vector<uint8_t> payload;
  for (const auto& [k, row] : hot) {
    const int64_t width = store.layout().key(k).width;
    const size_t pos = store.row(k, row);
    append_hot_row(payload, k, row, store.sparse(k).w.data() + pos * size_t(width), width);
  }
  sink_(closed, hot.size(), std::move(payload));
}

void HotOwner::hot_set(ReplyBuf& out) const {
  for (const auto& [k, row] : counter_.hot()) {
    const int64_t ids[2] = {int64_t(k), row};
    out.append(ids, sizeof ids);
  }
}

}  // namespace braid::ps
