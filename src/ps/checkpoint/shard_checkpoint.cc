// A shard's checkpoint (shard_checkpoint.h): what its ParamStore holds that
// training depends on, written at a round close and read back in place of
// the initial values. Format and what resumes: include/braid/ps_checkpoint.h.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "braid/checkpoint.h"
#include "braid/ps_checkpoint.h"
#include "ps/checkpoint/shard_checkpoint.h"
#include "ps/checkpoint/saved_reader.h"
#include "ps/server_name.h"

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

void save_if_due(const ParamStore& store, const ServerOptions& opt, int64_t step,
                 const std::function<bool()>& saves) {
  const bool due = (opt.save_every > 0 && step % opt.save_every == 0) ||
                   (opt.save_last > 0 && step == opt.save_last);
  if (opt.save_dir.empty() || !due || (saves && !saves())) return;
  std::vector<std::vector<int64_t>> rows;
  const Checkpoint ck = shard_checkpoint(store, opt, step, rows);
  const std::string dir = step_dir_path(opt.save_dir, step);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error(Errc::kIo, server_name(opt.rank) + ": creating checkpoint directory " + dir +
                               ": " + ec.message());
  save_checkpoint(shard_file(dir, opt.rank), ck);
}

Checkpoint shard_checkpoint(const ParamStore& store, const ServerOptions& opt, int64_t step,
                            std::vector<std::vector<int64_t>>& rows) {
  const Layout& layout = store.layout();
  Checkpoint ck;
  ck.meta = opt.checkpoint_meta;
  const int slots = opt.rule.slots();
  ck.meta["ps/format"] = "1";
  ck.meta["ps/servers"] = std::to_string(layout.servers());
  ck.meta["ps/shard"] = std::to_string(opt.rank);
  ck.meta["ps/step"] = std::to_string(step);
  ck.meta["step"] = std::to_string(step);  // braid::resume_step's convention
  ck.meta["ps/rule"] = rule_name(opt.rule.kind);
  ck.meta["ps/slots"] = std::to_string(slots);
  ck.meta["ps/keys"] = std::to_string(layout.size());
  ck.meta["ps/updates_applied"] = std::to_string(store.updates_applied);
  // Sparse rows in position order (the index maps row -> position).
  rows.assign(layout.size(), {});
  for (KeyId k = 0; k < layout.size(); ++k) {
    const KeySpec& spec = layout.key(k);
    if (!spec.sparse) {
      const ParamStore::Dense& d = store.dense(k);
      const std::string p = "dense/" + spec.name;
      ck.meta[p + "/range"] = std::to_string(d.begin) + "," + std::to_string(d.end) + "," +
                              std::to_string(spec.size);
      ck.meta[p + "/t"] = std::to_string(d.t);
      if (!d.w.empty()) ck.tensors[p + "/w"] = saved_view(d.w.data(), {int64_t(d.w.size())});
      if (!d.state.empty())
        ck.tensors[p + "/state"] = saved_view(d.state.data(), {int64_t(d.state.size())});
      continue;
    }
    const ParamStore::Sparse& sp = store.sparse(k);
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

namespace {

// Checks what shard `shard` of a save by `servers` servers must hold to
// restore into this job (format, counts, rule, known keys); its step.
int64_t check_saved(const ParamStore& store, const Checkpoint& ck, const std::string& path,
                    int servers, int shard) {
  const Layout& layout = store.layout();
  const UpdateRule& rule = store.rule();
  const Reader rd{ck, path};
  rd.expect("ps/format", 1, "format version");
  rd.expect("ps/servers", servers, "server count");
  rd.expect("ps/shard", shard, "shard");
  rd.expect("ps/keys", int64_t(layout.size()), "key count");
  if (rd.meta("ps/rule") != rule_name(rule.kind))
    rd.mismatch("update rule " + rd.meta("ps/rule") + ", this job's is " +
                rule_name(rule.kind));
  rd.expect("ps/slots", rule.slots(),
            "optimizer state slots per element (e.g. momentum on or off)");
  const int64_t step = rd.number("ps/step");
  if (step < 0) rd.corrupt("negative step " + std::to_string(step));
  for (const auto& [name, t] : ck.tensors) {
    const bool dense = name.rfind("dense/", 0) == 0, sparse = name.rfind("sparse/", 0) == 0;
    const std::string key = name.substr(name.find('/') + 1, name.rfind('/') - name.find('/') - 1);
    bool known = false;
    for (KeyId k = 0; k < layout.size() && !known; ++k)
      known = layout.key(k).name == key && layout.key(k).sparse == sparse;
    if ((dense || sparse) && !known)
      rd.mismatch("tensor '" + name + "' names a key this job does not have");
  }
  for (KeyId k = 0; k < layout.size(); ++k) {
    const KeySpec& spec = layout.key(k);
    if (spec.sparse)
      rd.expect("sparse/" + spec.name + "/width", spec.width,
                "width of sparse key '" + spec.name + "'");
  }
  return step;
}

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

// A checkpoint of `saved` shards (braid/ps_checkpoint.h) read by a job of
// another server count: every shard file, keeping this shard's part.
int64_t restore_resharded(ParamStore& store, const ServerOptions& opt,
                          const std::string& step_dir, int saved);

}  // namespace

int64_t restore_shard(ParamStore& store, const ServerOptions& opt, const std::string& step_dir) {
  const int saved = shard_files(step_dir);
  if (saved != store.layout().servers()) return restore_resharded(store, opt, step_dir, saved);
  const std::string path = shard_file(step_dir, opt.rank);
  return restore_shard_file(store, opt, load_checkpoint(path), path);
}

int64_t restore_shard_file(ParamStore& store, const ServerOptions& opt, const Checkpoint& ck,
                           const std::string& path) {
  const Layout& layout = store.layout();
  const Reader rd{ck, path};
  const int64_t step = check_saved(store, ck, path, layout.servers(), opt.rank);
  const int slots = opt.rule.slots();
  for (KeyId k = 0; k < layout.size(); ++k) {
    const KeySpec& spec = layout.key(k);
    const std::string p = (spec.sparse ? "sparse/" : "dense/") + spec.name;
    if (!spec.sparse) {
      ParamStore::Dense& d = store.dense(k);
      const SavedSlice s = read_slice(rd, spec, k, layout, opt.rank, slots);
      const size_t n = size_t(s.end - s.begin);
      if (n) std::memcpy(d.w.data(), s.w, n * 4);
      if (n > 0 && slots > 0) std::memcpy(d.state.data(), s.state, n * size_t(slots) * 4);
      d.t = rd.number(p + "/t");
      continue;
    }
    ParamStore::Sparse& sp = store.sparse(k);
    const SavedRows s = read_rows(rd, spec, layout, opt.rank, slots);
    const size_t n = s.ids.size(), width = size_t(spec.width);
    sp.index.clear();
    for (size_t i = 0; i < n; ++i) sp.index.emplace(s.ids[i], i);
    sp.w.assign(s.w, s.w + n * width);
    if (slots > 0) sp.state.assign(s.state, s.state + n * width * size_t(slots));
    else sp.state.clear();
    sp.t = rd.number(p + "/t");
  }
  store.updates_applied = rd.number("ps/updates_applied");
  return step;
}

namespace {

int64_t restore_resharded(ParamStore& store, const ServerOptions& opt,
                          const std::string& step_dir, int saved) {
  const Layout& layout = store.layout();
  // The layout that saved the files: the same keys over `saved` servers.
  Layout saver(saved);
  for (KeyId k = 0; k < layout.size(); ++k) {
    const KeySpec& spec = layout.key(k);
    if (spec.sparse) saver.add_sparse(spec.name, spec.rows, spec.width, spec.decay);
    else saver.add_dense(spec.name, spec.size, spec.decay);
  }
  const size_t slots = size_t(opt.rule.slots());
  for (KeyId k = 0; k < layout.size(); ++k) {
    store.sparse(k) = ParamStore::Sparse{};
    store.dense(k).t = 0;
  }
  int64_t step = -1, applied = 0;
  for (int o = 0; o < saved; ++o) {
    const std::string path = shard_file(step_dir, o);
    const Checkpoint ck = load_checkpoint(path);
    const Reader rd{ck, path};
    const int64_t at = check_saved(store, ck, path, saved, o);
    if (step >= 0 && at != step)
      rd.corrupt("saved at step " + std::to_string(at) + ", shard 0 at step " +
                 std::to_string(step));
    step = at;
    applied = std::max(applied, rd.number("ps/updates_applied"));
    for (KeyId k = 0; k < layout.size(); ++k) {
      const KeySpec& spec = layout.key(k);
      const std::string p = (spec.sparse ? "sparse/" : "dense/") + spec.name;
      if (!spec.sparse) {
        // The overlap of the saved slice and this shard's, each slot apart.
        ParamStore::Dense& d = store.dense(k);
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
      ParamStore::Sparse& sp = store.sparse(k);
      const SavedRows s = read_rows(rd, spec, saver, o, int(slots));
      const size_t width = size_t(spec.width);
      for (size_t i = 0; i < s.ids.size(); ++i) {
        if (layout.row_server(s.ids[i]) != opt.rank) continue;
        sp.index.emplace(s.ids[i], sp.index.size());
        sp.w.insert(sp.w.end(), s.w + i * width, s.w + (i + 1) * width);
        sp.state.insert(sp.state.end(), s.state + i * width * slots,
                        s.state + (i + 1) * width * slots);
      }
      sp.t = std::max(sp.t, rd.number(p + "/t"));
    }
  }
  store.updates_applied = applied;
  return step;
}

}  // namespace

}  // namespace braid::ps
