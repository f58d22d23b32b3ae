// ParallelModel checkpoints in the serial format. Saving: DataParallel gathers
// the parameters and optimizer state over dp (under ZeRO-1 from the chunks
// of its buckets, under ZeRO-3 the parameters too) onto pipeline copy 0;
// then there each
// stage gathers its shards (and their optimizer state) over tp, then
// tp rank 0 of every stage sends its full tensors to world rank 0 over the
// pp group of (dp 0, tp 0), which writes the file. Loading: every rank
// reads the file and slices its shards, so the layout it was saved at does
// not matter.
#include <cstring>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "parallel/model/impl.h"

namespace braid::parallel {

namespace {

// This tp rank's slice of `key`, a tensor at the serial model's full shape
// in `ck` (`what` names the file in errors).
Tensor rank_slice(const Checkpoint& ck, const std::string& what, const std::string& key,
                  const tp::Sharded& s, int r, int n) {
  auto it = ck.tensors.find(key);
  if (it == ck.tensors.end()) throw Error(Errc::kCorrupt, what + " lacks " + key);
  if (it->second.shape() != s.full)
    throw Error(Errc::kCorrupt, what + ": " + key + " has shape " + shape_str(it->second.shape()) +
                                    ", the model's is " + shape_str(s.full));
  return tp::slice_shard(it->second, s.spec, r, n);
}

// Tags of the checkpoint's messages over the pp group; no pipeline
// transfer is in flight between steps.
constexpr uint32_t kHeaderTag = 1u << 29;
constexpr uint32_t kDataTag = kHeaderTag + 1;

// "optim/<name>/<slot>" keys of `ck` for parameter `name`, in key order.
std::vector<std::string> optim_keys(const Checkpoint& ck, const std::string& name) {
  std::vector<std::string> keys;
  const std::string prefix = "optim/" + name + "/";
  for (auto it = ck.tensors.lower_bound(prefix);
       it != ck.tensors.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    if (it->first.find('/', prefix.size()) == std::string::npos) keys.push_back(it->first);
  return keys;
}

// Header: per tensor "name\tdim dim …\n"; then one f32 payload.
void send_tensors(Communicator& pp, int peer, const std::map<std::string, Tensor>& tensors) {
  std::string header;
  int64_t floats = 0;
  for (const auto& [name, t] : tensors) {
    header += name + "\t";
    for (int d = 0; d < t.ndim(); ++d) {
      if (d) header += ' ';
      header += std::to_string(t.dim(d));
    }
    header += "\n";
    floats += t.numel();
  }
  int64_t sizes[2] = {int64_t(header.size()), floats};
  pp.send(sizes, 2, DType::kI64, peer, kHeaderTag);
  pp.send(header.data(), header.size(), DType::kU8, peer, kHeaderTag);
  std::vector<float> payload;
  payload.reserve(size_t(floats));
  for (const auto& [name, t] : tensors) payload.insert(payload.end(), t.f32(), t.f32() + t.numel());
  pp.send(payload.data(), payload.size(), DType::kF32, peer, kDataTag);
}

void recv_tensors(Communicator& pp, int peer, std::map<std::string, Tensor>& out) {
  int64_t sizes[2];
  pp.recv(sizes, 2, DType::kI64, peer, kHeaderTag);
  // Lengths bounded before anything is allocated for them.
  if (sizes[0] < 0 || sizes[1] < 0 || sizes[0] > (int64_t(1) << 30) ||
      sizes[1] > (int64_t(1) << 40))
    throw Error(Errc::kCorrupt, "checkpoint: stage " + std::to_string(peer) + " announced " +
                                    std::to_string(sizes[0]) + " header bytes and " +
                                    std::to_string(sizes[1]) + " floats");
  std::string header(size_t(sizes[0]), '\0');
  pp.recv(header.data(), header.size(), DType::kU8, peer, kHeaderTag);
  std::vector<float> payload(static_cast<size_t>(sizes[1]));
  pp.recv(payload.data(), payload.size(), DType::kF32, peer, kDataTag);
  size_t at = 0, pos = 0;
  while (pos < header.size()) {
    const size_t tab = header.find('\t', pos), nl = header.find('\n', pos);
    Shape shape;
    for (size_t b = tab + 1; b < nl;) {
      size_t e = header.find(' ', b);
      if (e == std::string::npos || e > nl) e = nl;
      shape.push_back(std::stoll(header.substr(b, e - b)));
      b = e + 1;
    }
    Tensor t(shape);
    std::memcpy(t.f32(), payload.data() + at, t.nbytes());
    at += size_t(t.numel());
    out.insert_or_assign(header.substr(pos, tab - pos), std::move(t));
    pos = nl + 1;
  }
}

}  // namespace

// Expert parallelism: every expert tensor (and its optimizer state) whole,
// gathered over the ep group along dimension 0 (collective over each ep
// group; every rank calls it); `keep`: put them into `local`.
static void gather_experts(const std::vector<tp::Sharded>& shards, Communicator& ep,
                           const nn::Optimizer& opt, Checkpoint& local, bool keep) {
  Checkpoint mine;
  opt.save_state(mine);
  const tp::ShardSpec rows{0, 1, false};
  for (const tp::Sharded& s : shards) {
    if (!s.expert) continue;
    Tensor full = tp::gather_shards(s.param->data, rows, s.full, ep);
    if (keep) local.tensors.insert_or_assign("model/" + s.param->name, std::move(full));
    for (const std::string& key : optim_keys(mine, s.param->name)) {
      Tensor t = tp::gather_shards(mine.tensors.at(key), rows, s.full, ep);
      if (keep) local.tensors.insert_or_assign(key, std::move(t));
    }
  }
}

// This ep rank's block of an expert tensor (dimension 0); others as they are.
static Tensor expert_block(Tensor t, const tp::Sharded& s, const nn::ExpertExchange* ep) {
  if (!s.expert || ep == nullptr || ep->size() == 1) return t;
  return tp::slice_shard(t, tp::ShardSpec{0, 1, false}, ep->rank(), ep->size());
}

void ParallelModel::save(const std::string& path, const nn::Optimizer& opt, int64_t step,
                         uint64_t seed, const std::map<std::string, std::string>& extra) {
  Impl& m = *impl_;
  const MeshCoord& c = mesh_.coord();
  // Optimizer state per whole parameter of this rank, complete on dp rank 0
  // (collective over dp).
  Checkpoint local;
  m.dp->add_state(local, opt);
  if (m.experts.ep > 1)
    gather_experts(m.model->shards(), *m.experts.ep_comm, opt, local, c.dp == 0);
  if (c.dp == 0) {
    // Full tensors of this stage, in shard order; the same keys on every
    // tp rank, so the gathers pair up.
    std::map<std::string, Tensor> full;
    for (const tp::Sharded& s : m.model->shards()) {
      // add_state's copy of the parameter: whole on dp rank 0 at every
      // ZeRO stage (ZeRO-3 gathers it for the occasion).
      const std::string key = "model/" + s.param->name;
      full.insert_or_assign(
          key, tp::gather_shards(local.tensors.at(key), s.spec, s.full, *mesh_.tp()));
      for (const std::string& key : optim_keys(local, s.param->name))
        full.insert_or_assign(
            key, tp::gather_shards(local.tensors.at(key), s.spec, s.full, *mesh_.tp()));
    }
    if (c.tp == 0) {
      Communicator& pp = *mesh_.pp();
      if (c.pp > 0) {
        send_tensors(pp, 0, full);
      } else {
        for (int s = 1; s < mesh_.pp_size(); ++s) recv_tensors(pp, s, full);
        Checkpoint ck;
        ck.tensors = std::move(full);
        ck.meta = local.meta;  // optim/kind, optim/steps
        for (const auto& [k, v] : extra) ck.meta[k] = v;
        ck.meta["step"] = std::to_string(step);
        ck.meta["seed"] = std::to_string(seed);
        ck.meta["rng"] = "counter-based: (seed, step)";
        save_checkpoint(path, ck);
      }
    }
  }
  // Nobody reads the file before it is whole; a failed write on world
  // rank 0 leaves the others here until their deadline.
  mesh_.world()->barrier();
}

void load_model_slices(const std::string& path, const std::vector<tp::Sharded>& shards, int r,
                       int n, const nn::ExpertExchange* ep) {
  const Checkpoint ck = load_checkpoint(path);
  for (const tp::Sharded& s : shards) {
    const std::string key = "model/" + s.param->name;
    s.param->data.copy_from(expert_block(rank_slice(ck, "--init-from " + path, key, s, r, n), s, ep));
  }
}

int64_t ParallelModel::load(const std::string& path, nn::Optimizer& opt, uint64_t seed,
                            std::map<std::string, std::string>* meta) {
  Impl& m = *impl_;
  const Checkpoint ck = load_checkpoint(path);
  const int r = mesh_.coord().tp, n = mesh_.tp_size();
  Checkpoint local;
  local.meta = ck.meta;
  for (const tp::Sharded& s : m.model->shards()) {
    auto slice = [&](const std::string& key) {
      return expert_block(rank_slice(ck, "checkpoint " + path, key, s, r, n), s, m.exchange.get());
    };
    local.tensors.insert_or_assign("model/" + s.param->name, slice("model/" + s.param->name));
    for (const std::string& key : optim_keys(ck, s.param->name))
      local.tensors.insert_or_assign(key, slice(key));
  }
  // This rank's tensors at their full (tp-sliced) shapes: DataParallel
  // keeps what it holds of them.
  m.dp->load_state(local, opt);
  const int64_t step = resume_step(ck, seed, path);
  if (meta) *meta = ck.meta;
  return step;
}

}  // namespace braid::parallel
