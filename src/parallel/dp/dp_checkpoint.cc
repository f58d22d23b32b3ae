// Consolidated checkpoints for DataParallel at any ZeRO stage.
//
// Why consolidated: a checkpoint holds every tensor at its full shape under
// the names nn::Trainer uses, so one file loads at any world size and stage
// (and into a single process) by slicing — resharding is just "take my
// chunk". Saving gathers shards bucket by bucket, so the transient extra
// memory is one bucket per optimizer slot plus rank 0's copy of the file.
#include <algorithm>
#include <cstring>
#include <set>

#include "braid/checkpoint.h"
#include "braid/data_parallel.h"
#include "braid/error.h"
#include "parallel/dp/state.h"
#include "parallel/dp/zero_policy.h"

namespace braid::parallel {

namespace {
// The optimizer's slot names ("m", "v", "momentum") as seen on this rank.
std::set<std::string> local_slots(const Checkpoint& ck) {
  std::set<std::string> s;
  for (auto& [k, t] : ck.tensors) {
    auto pos = k.rfind('/');
    if (k.rfind("optim/", 0) == 0 && pos != std::string::npos) s.insert(k.substr(pos + 1));
  }
  return s;
}
}  // namespace

void DataParallel::add_state(Checkpoint& ck, const nn::Optimizer& opt) {
  const int world = s_->world;
  const bool root = s_->rank == 0;
  // Parameters: full everywhere (ZeRO-3 gathers them for the occasion).
  gather_all_params();
  if (root)
    for (auto* p : s_->params) ck.tensors.insert_or_assign("model/" + p->name, Tensor(p->data));
  release_all_params();

  Checkpoint local;
  opt.save_state(local);
  ck.meta["optim/kind"] = opt.kind();
  ck.meta["optim/steps"] = std::to_string(opt.steps());
  if (!policy_->shards_optimizer()) {
    if (root)
      for (auto& [k, t] : local.tensors) ck.tensors.insert_or_assign(k, Tensor(t));
    return;
  }

  // Which slots exist: ranks whose chunk is empty have none, so agree on
  // the union (a fixed-size text record per rank).
  constexpr size_t kRec = 256;
  std::string mine;
  for (auto& s : local_slots(local)) mine += s + "\n";
  BRAID_CHECK_ARG(mine.size() < kRec, "DataParallel: optimizer slot names too long");
  std::vector<uint8_t> rec(kRec, 0), all(kRec * size_t(world));
  std::memcpy(rec.data(), mine.data(), mine.size());
  s_->comm->all_gather(rec.data(), all.data(), kRec, DType::kU8);
  std::set<std::string> slots;
  for (int r = 0; r < world; ++r) {
    std::string t(reinterpret_cast<const char*>(all.data() + size_t(r) * kRec));
    size_t a = 0, e;
    while ((e = t.find('\n', a)) != std::string::npos) {
      slots.insert(t.substr(a, e - a));
      a = e + 1;
    }
  }

  for (auto& bp : s_->buckets) {
    dp::Bucket& b = *bp;
    for (const std::string& slot : slots) {
      Tensor chunk({b.shard}), full({b.padded});
      for (auto& s : b.slices) {
        auto it = local.tensors.find("optim/" + b.params[s.i]->name + "/" + slot);
        if (it == local.tensors.end()) continue;
        std::memcpy(chunk.f32() + s.at, it->second.f32(), size_t(s.count) * 4);
      }
      s_->comm->all_gather(chunk.f32(), full.f32(), size_t(b.shard), DType::kF32);
      if (!root) continue;
      for (size_t i = 0; i < b.params.size(); ++i) {
        Tensor t(b.shapes[i]);
        std::memcpy(t.f32(), full.f32() + b.offsets[i], t.nbytes());
        ck.tensors.insert_or_assign("optim/" + b.params[i]->name + "/" + slot, std::move(t));
      }
    }
  }
}

void DataParallel::load_state(const Checkpoint& ck, nn::Optimizer& opt) {
  // Pending gathers would overwrite what we load.
  for (auto& b : s_->buckets) s_->wait_params(*b);
  release_all_params();
  if (!policy_->shards_params()) {
    load_parameters(ck, s_->params);
  } else {
    for (auto& bp : s_->buckets) {
      dp::Bucket& b = *bp;
      for (auto& s : b.slices) {
        const std::string key = "model/" + b.params[s.i]->name;
        auto it = ck.tensors.find(key);
        if (it == ck.tensors.end()) throw Error(Errc::kCorrupt, "checkpoint lacks " + key);
        if (it->second.shape() != b.shapes[s.i])
          throw Error(Errc::kCorrupt, "checkpoint " + key + " has shape " +
                                          shape_str(it->second.shape()) + " vs parameter " +
                                          shape_str(b.shapes[s.i]));
        std::memcpy(b.param_shard.f32() + s.at, it->second.f32() + s.begin,
                    size_t(s.count) * 4);
      }
    }
  }
  if (!policy_->shards_optimizer()) {
    opt.load_state(ck, s_->params);
    return;
  }
  // This rank's slices of every optimizer tensor, under the shard
  // parameters' names and shapes.
  Checkpoint sub;
  for (const char* k : {"optim/kind", "optim/steps"}) {
    auto it = ck.meta.find(k);
    if (it != ck.meta.end()) sub.meta[k] = it->second;
  }
  for (auto& bp : s_->buckets) {
    dp::Bucket& b = *bp;
    for (auto& s : b.slices) {
      const nn::Parameter* p = b.params[s.i];
      const std::string prefix = "optim/" + p->name + "/";
      for (auto it = ck.tensors.lower_bound(prefix);
           it != ck.tensors.end() && it->first.rfind(prefix, 0) == 0; ++it) {
        if (it->second.numel() != shape_numel(b.shapes[s.i]) || it->second.dtype() != DType::kF32)
          throw Error(Errc::kCorrupt, "checkpoint " + it->first + " has shape " +
                                          shape_str(it->second.shape()) + " vs parameter " +
                                          shape_str(b.shapes[s.i]));
        float* src = const_cast<float*>(it->second.f32()) + s.begin;
        sub.tensors.insert_or_assign(it->first, Tensor::view(src, {s.count}));
      }
    }
  }
  opt.load_state(sub, s_->shard_params);
}

}  // namespace braid::parallel
