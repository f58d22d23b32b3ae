// A shard's checkpoint: what ShardState holds that training depends on,
// written at a round close and read back in place of the initial values.
// Format and what resumes: include/braid/ps_checkpoint.h.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "braid/checkpoint.h"
#include "braid/ps_checkpoint.h"
#include "ps/checkpoint/saved_reader.h"
#include "ps/server_name.h"
#include "ps/shard/shard_state.h"

namespace braid::ps {

namespace {

const char* rule_name(UpdateRule::Kind k) {
  switch (k) {
    case UpdateRule::kSgd: return "sgd";
    case UpdateRule::kAdagrad: return "adagrad";
    case UpdateRule::kAdamW: return "adamw";
  }
  return "?";
}

// A checkpoint file's reader (saved_reader.h).
struct Reader : SavedReader {
  Reader(const Checkpoint& ck, const std::string& path) : SavedReader{ck, path, "checkpoint"} {}
};

}  // namespace

void ShardState::save_locked() {
  const bool due = (opt_.save_every > 0 && closed_ % opt_.save_every == 0) ||
                   (opt_.save_last > 0 && closed_ == opt_.save_last);
  if (opt_.save_dir.empty() || !due || (saves_ && !saves_())) return;
  std::vector<std::vector<int64_t>> rows;
  const Checkpoint ck = checkpoint_locked(rows);
  const std::string dir = step_dir_path(opt_.save_dir, closed_);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error(Errc::kIo, server_name(opt_.rank) + ": creating checkpoint directory " + dir +
                               ": " + ec.message());
  save_checkpoint(shard_file(dir, opt_.rank), ck);
}

Checkpoint ShardState::checkpoint_locked(std::vector<std::vector<int64_t>>& rows) const {
  Checkpoint ck;
  ck.meta = opt_.checkpoint_meta;
  const int slots = opt_.rule.slots();
  ck.meta["ps/format"] = "1";
  ck.meta["ps/servers"] = std::to_string(layout_.servers());
  ck.meta["ps/shard"] = std::to_string(opt_.rank);
  ck.meta["ps/step"] = std::to_string(closed_);
  ck.meta["step"] = std::to_string(closed_);  // braid::resume_step's convention
  ck.meta["ps/rule"] = rule_name(opt_.rule.kind);
  ck.meta["ps/slots"] = std::to_string(slots);
  ck.meta["ps/keys"] = std::to_string(layout_.size());
  ck.meta["ps/updates_applied"] = std::to_string(st_.updates_applied);
  // Sparse rows in position order (the index maps row -> position).
  rows.assign(layout_.size(), {});
  for (KeyId k = 0; k < layout_.size(); ++k) {
    const KeySpec& spec = layout_.key(k);
    if (!spec.sparse) {
      const Dense& d = dense_[k];
      const std::string p = "dense/" + spec.name;
      ck.meta[p + "/range"] = std::to_string(d.begin) + "," + std::to_string(d.end) + "," +
                              std::to_string(spec.size);
      ck.meta[p + "/t"] = std::to_string(d.t);
      if (!d.w.empty()) ck.tensors[p + "/w"] = saved_view(d.w.data(), {int64_t(d.w.size())});
      if (!d.state.empty())
        ck.tensors[p + "/state"] = saved_view(d.state.data(), {int64_t(d.state.size())});
      continue;
    }
    const Sparse& sp = sparse_[k];
    const std::string p = "sparse/" + spec.name;
    const int64_t n = int64_t(sp.index.size());
    rows[k].resize(size_t(n));
    for (const auto& [row, pos] : sp.index) rows[k][pos] = row;
    ck.meta[p + "/rows"] = std::to_string(n);
    ck.meta[p + "/width"] = std::to_string(spec.width);
    ck.meta[p + "/t"] = std::to_string(sp.t);
    if (n == 0) continue;
    // Checkpoints store no i64: each id as its two i32 halves, as in memory.
    ck.tensors[p + "/rows"] = saved_view(rows[k].data(), {n, 2}, DType::kI32);
    ck.tensors[p + "/w"] = saved_view(sp.w.data(), {n, spec.width});
    if (slots > 0) ck.tensors[p + "/state"] = saved_view(sp.state.data(), {n, spec.width * slots});
  }
  return ck;
}

void ShardState::restore(const std::string& step_dir) {
  const int saved = shard_files(step_dir);
  if (saved != layout_.servers()) return restore_resharded(step_dir, saved);
  const std::string path = shard_file(step_dir, opt_.rank);
  restore_checkpoint(load_checkpoint(path), path);
}

int64_t ShardState::check_saved(const Checkpoint& ck, const std::string& path, int servers,
                                 int shard) const {
  const Reader rd{ck, path};
  rd.expect("ps/format", 1, "format version");
  rd.expect("ps/servers", servers, "server count");
  rd.expect("ps/shard", shard, "shard");
  rd.expect("ps/keys", int64_t(layout_.size()), "key count");
  if (rd.meta("ps/rule") != rule_name(opt_.rule.kind))
    rd.mismatch("update rule " + rd.meta("ps/rule") + ", this job's is " +
                rule_name(opt_.rule.kind));
  rd.expect("ps/slots", opt_.rule.slots(),
            "optimizer state slots per element (e.g. momentum on or off)");
  const int64_t step = rd.number("ps/step");
  if (step < 0) rd.corrupt("negative step " + std::to_string(step));
  for (const auto& [name, t] : ck.tensors) {
    const bool dense = name.rfind("dense/", 0) == 0, sparse = name.rfind("sparse/", 0) == 0;
    const std::string key = name.substr(name.find('/') + 1, name.rfind('/') - name.find('/') - 1);
    bool known = false;
    for (KeyId k = 0; k < layout_.size() && !known; ++k)
      known = layout_.key(k).name == key && layout_.key(k).sparse == sparse;
    if ((dense || sparse) && !known)
      rd.mismatch("tensor '" + name + "' names a key this job does not have");
  }
  for (KeyId k = 0; k < layout_.size(); ++k) {
    const KeySpec& spec = layout_.key(k);
    if (spec.sparse)
      rd.expect("sparse/" + spec.name + "/width", spec.width,
                "width of sparse key '" + spec.name + "'");
  }
  return step;
}

namespace {

// One dense key's slice [begin, end) as shard `shard` of `saver` saved it.
struct SavedSlice {
  int64_t begin = 0, end = 0;
  const float* w = nullptr;
  const float* state = nullptr;  // slot-major: slot q of element i at q·(end-begin) + i
};

SavedSlice read_slice(const Reader& rd, const KeySpec& spec, KeyId k, const Layout& saver,
                      int shard, int slots) {
  SavedSlice s{saver.slice_begin(k, shard), saver.slice_end(k, shard)};
  const std::string p = "dense/" + spec.name;
  const std::string want = std::to_string(s.begin) + "," + std::to_string(s.end) + "," +
                           std::to_string(spec.size);
  if (rd.meta(p + "/range") != want)
    rd.mismatch("dense key '" + spec.name + "' has slice,size " + rd.meta(p + "/range") +
                ", this job " + want);
  const int64_t n = s.end - s.begin;
  s.w = static_cast<const float*>(rd.tensor(p + "/w", n));
  s.state = static_cast<const float*>(rd.tensor(p + "/state", n * slots));
  return s;
}

// One sparse key's rows as shard `shard` of `saver` saved them: ids, and by
// position their weights (width each) and state (width·slots each).
struct SavedRows {
  std::vector<int64_t> ids;
  const float* w = nullptr;
  const float* state = nullptr;
};

SavedRows read_rows(const Reader& rd, const KeySpec& spec, const Layout& saver, int shard,
                    int slots) {
  const std::string p = "sparse/" + spec.name;
  const int64_t n = rd.number(p + "/rows");
  if (n < 0 || n > spec.rows)
    rd.corrupt("sparse key '" + spec.name + "' holds " + std::to_string(n) + " rows");
  SavedRows s;
  s.ids.resize(size_t(n));
  if (n > 0) std::memcpy(s.ids.data(), rd.tensor(p + "/rows", 2 * n, DType::kI32), size_t(n) * 8);
  s.w = static_cast<const float*>(rd.tensor(p + "/w", n * spec.width));
  s.state = static_cast<const float*>(rd.tensor(p + "/state", n * spec.width * slots));
  std::unordered_set<int64_t> seen;
  for (const int64_t r : s.ids)
    if (r < 0 || r >= spec.rows || saver.row_server(r) != shard || !seen.insert(r).second)
      rd.corrupt("sparse key '" + spec.name + "': row " + std::to_string(r) +
                 " is out of range, another shard's or repeated");
  return s;
}

}  // namespace

void ShardState::restore_checkpoint(const Checkpoint& ck, const std::string& path) {
  const Reader rd{ck, path};
  const int64_t step = check_saved(ck, path, layout_.servers(), opt_.rank);
  const int slots = opt_.rule.slots();
  for (KeyId k = 0; k < layout_.size(); ++k) {
    const KeySpec& spec = layout_.key(k);
    const std::string p = (spec.sparse ? "sparse/" : "dense/") + spec.name;
    if (!spec.sparse) {
      Dense& d = dense_[k];
      const SavedSlice s = read_slice(rd, spec, k, layout_, opt_.rank, slots);
      const size_t n = size_t(s.end - s.begin);
      if (n) std::memcpy(d.w.data(), s.w, n * 4);
      if (n > 0 && slots > 0) std::memcpy(d.state.data(), s.state, n * size_t(slots) * 4);
      d.t = rd.number(p + "/t");
      continue;
    }
    Sparse& sp = sparse_[k];
    const SavedRows s = read_rows(rd, spec, layout_, opt_.rank, slots);
    const size_t n = s.ids.size(), width = size_t(spec.width);
    sp.index.clear();
    for (size_t i = 0; i < n; ++i) sp.index.emplace(s.ids[i], i);
    sp.w.assign(s.w, s.w + n * width);
    if (slots > 0) sp.state.assign(s.state, s.state + n * width * size_t(slots));
    else sp.state.clear();
    sp.t = rd.number(p + "/t");
  }
  closed_ = step;
  clocks_.assign(size_t(W_), step);
  st_.rounds_closed = step;
  st_.updates_applied = rd.number("ps/updates_applied");
}

void ShardState::restore_resharded(const std::string& step_dir, int saved) {
  // The layout that saved the files: the same keys over `saved` servers.
  Layout saver(saved);
  for (KeyId k = 0; k < layout_.size(); ++k) {
    const KeySpec& spec = layout_.key(k);
    if (spec.sparse) saver.add_sparse(spec.name, spec.rows, spec.width, spec.decay);
    else saver.add_dense(spec.name, spec.size, spec.decay);
  }
  const size_t slots = size_t(opt_.rule.slots());
  for (Sparse& sp : sparse_) sp = Sparse{};
  for (Dense& d : dense_) d.t = 0;
  int64_t step = -1, applied = 0;
  for (int o = 0; o < saved; ++o) {
    const std::string path = shard_file(step_dir, o);
    const Checkpoint ck = load_checkpoint(path);
    const Reader rd{ck, path};
    const int64_t at = check_saved(ck, path, saved, o);
    if (step >= 0 && at != step)
      rd.corrupt("saved at step " + std::to_string(at) + ", shard 0 at step " +
                 std::to_string(step));
    step = at;
    applied = std::max(applied, rd.number("ps/updates_applied"));
    for (KeyId k = 0; k < layout_.size(); ++k) {
      const KeySpec& spec = layout_.key(k);
      const std::string p = (spec.sparse ? "sparse/" : "dense/") + spec.name;
      if (!spec.sparse) {
        // The overlap of the saved slice and this shard's, each slot apart.
        Dense& d = dense_[k];
        const SavedSlice s = read_slice(rd, spec, k, saver, o, int(slots));
        const int64_t lo = std::max(s.begin, d.begin), hi = std::min(s.end, d.end);
        for (size_t q = 0; lo < hi && q <= slots; ++q) {
          const float* from = q == 0 ? s.w : s.state + (q - 1) * size_t(s.end - s.begin);
          float* to = q == 0 ? d.w.data() : d.state.data() + (q - 1) * size_t(d.end - d.begin);
          std::memcpy(to + (lo - d.begin), from + (lo - s.begin), size_t(hi - lo) * 4);
        }
        d.t = std::max(d.t, rd.number(p + "/t"));
        continue;
      }
      // The saved rows this shard owns now.
      Sparse& sp = sparse_[k];
      const SavedRows s = read_rows(rd, spec, saver, o, int(slots));
      const size_t width = size_t(spec.width);
      for (size_t i = 0; i < s.ids.size(); ++i) {
        if (layout_.row_server(s.ids[i]) != opt_.rank) continue;
        sp.index.emplace(s.ids[i], sp.index.size());
        sp.w.insert(sp.w.end(), s.w + i * width, s.w + (i + 1) * width);
        sp.state.insert(sp.state.end(), s.state + i * width * slots,
                        s.state + (i + 1) * width * slots);
      }
      sp.t = std::max(sp.t, rd.number(p + "/t"));
    }
  }
  closed_ = step;
  clocks_.assign(size_t(W_), step);
  st_.rounds_closed = step;
  st_.updates_applied = applied;
}

}  // namespace braid::ps
