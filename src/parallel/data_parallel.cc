// DataParallel: bucket layout, overlapped reductions and ZeRO sharding.
// The contract is in include/braid/data_parallel.h; this file says why.
#include "braid/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "braid/checkpoint.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/trainer.h"
#include "parallel/bucket.h"

namespace braid::parallel {

namespace {
int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
}  // namespace

DataParallel::DataParallel(std::shared_ptr<Communicator> comm, nn::Module& model, DpOptions opts)
    : comm_(std::move(comm)), opts_(opts) {
  BRAID_CHECK_ARG(comm_ != nullptr, "DataParallel: null communicator");
  BRAID_CHECK_ARG(opts_.zero >= 0 && opts_.zero <= 3,
                  "DataParallel: ZeRO stage must be 0..3, got " + std::to_string(opts_.zero));
  BRAID_CHECK_ARG(opts_.overlap || opts_.zero == 0,
                  "DataParallel: the plain (non-overlapped) scheme exists for ZeRO 0 only");
  BRAID_CHECK_ARG(opts_.bucket_bytes >= 4 && opts_.first_bucket_bytes >= 4,
                  "DataParallel: bucket sizes must be at least one element");
  rank_ = comm_->rank();
  world_ = comm_->size();
  background_ = opts_.reduce == DpOptions::Reduce::kBackground ||
                (opts_.reduce == DpOptions::Reduce::kAuto &&
                 usable_cores() > comm_->host_size() * num_threads());
  params_ = model.parameters();
  BRAID_CHECK_ARG(!params_.empty(), "DataParallel: the model has no parameters");

  if (auto* seq = dynamic_cast<nn::Sequential*>(&model)) {
    for (size_t i = 0; i < seq->size(); ++i) units_.push_back(&seq->child(i));
  } else {
    units_.push_back(&model);
  }
  std::unordered_map<const nn::Parameter*, size_t> unit_of;
  std::vector<std::vector<nn::Parameter*>> unit_params(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    unit_params[u] = units_[u]->parameters();
    for (auto* p : unit_params[u]) unit_of[p] = u;
  }

  // Buckets in grad-ready order (reverse forward order). ZeRO-3 gathers and
  // frees whole units, so there a bucket is exactly one unit.
  auto new_bucket = [&] {
    buckets_.push_back(std::make_unique<Bucket>());
    buckets_.back()->index = buckets_.size() - 1;
    return buckets_.back().get();
  };
  if (opts_.zero == 3) {
    for (size_t u = units_.size(); u-- > 0;) {
      if (unit_params[u].empty()) continue;
      Bucket* b = new_bucket();
      for (size_t k = unit_params[u].size(); k-- > 0;) b->params.push_back(unit_params[u][k]);
    }
  } else {
    Bucket* b = nullptr;
    size_t bytes = 0;
    for (size_t k = params_.size(); k-- > 0;) {
      size_t cap = (b != nullptr && b->index == 0) ? opts_.first_bucket_bytes : opts_.bucket_bytes;
      if (b == nullptr || bytes >= cap) {
        b = new_bucket();
        bytes = 0;
      }
      b->params.push_back(params_[k]);
      bytes += size_t(params_[k]->size()) * 4;
    }
  }

  unit_buckets_.resize(units_.size());
  for (auto& bp : buckets_) {
    Bucket& b = *bp;
    for (auto* p : b.params) {
      BRAID_CHECK_ARG(bucket_of_.count(p) == 0,
                      "DataParallel: parameter " + p->name + " appears twice in the model");
      bucket_of_[p] = b.index;
      b.shapes.push_back(p->data.shape());
      b.offsets.push_back(b.numel);
      b.numel += p->size();
      auto& ub = unit_buckets_[unit_of.at(p)];
      if (std::find(ub.begin(), ub.end(), b.index) == ub.end()) ub.push_back(b.index);
    }
    b.padded = round_up(std::max<int64_t>(b.numel, 1), world_);
    b.shard = b.padded / world_;

    // Flat parameters, rank 0's values everywhere.
    Tensor full({b.padded});
    for (size_t i = 0; i < b.params.size(); ++i)
      std::memcpy(full.f32() + b.offsets[i], b.params[i]->data.f32(),
                  size_t(b.params[i]->size()) * 4);
    comm_->broadcast(full.f32(), size_t(b.padded), DType::kF32, 0);
    if (opts_.zero == 3) {
      b.param_shard = Tensor({b.shard});
      std::memcpy(b.param_shard.f32(), full.f32() + int64_t(rank_) * b.shard,
                  size_t(b.shard) * 4);
      b.params_live = false;
      for (auto* p : b.params) p->data = Tensor();
    } else {
      b.param = std::move(full);
      point_params(b);
    }
    if (opts_.zero >= 2) {
      b.grad_shard = Tensor({b.shard});
      b.grads_live = false;
      for (auto* p : b.params) p->grad = Tensor();
    } else {
      if (opts_.shared_buckets && !opts_.bf16_grads && world_ > 1) {
        b.grad_mem = comm_->alloc_shared(size_t(b.padded) * 4);
        b.grad = Tensor::view(b.grad_mem.data(), {b.padded});
      } else {
        b.grad = Tensor({b.padded});
      }
      point_grads(b);
    }

    // This rank's chunk [c0, c1) of the bucket, cut at parameter borders.
    const int64_t c0 = int64_t(rank_) * b.shard, c1 = c0 + b.shard;
    for (size_t i = 0; i < b.params.size(); ++i) {
      int64_t lo = std::max(c0, b.offsets[i]);
      int64_t hi = std::min(c1, b.offsets[i] + shape_numel(b.shapes[i]));
      if (lo < hi) b.slices.push_back({i, lo - b.offsets[i], hi - lo, lo - c0});
    }
  }

  if (opts_.zero >= 1) {
    for (auto& bp : buckets_) {
      Bucket& b = *bp;
      for (auto& s : b.slices) {
        nn::Parameter* p = b.params[s.i];
        auto sp = std::make_unique<nn::Parameter>(p->name, Shape{0}, p->decay);
        sp->data = Tensor::view(b.shard_params_ptr(rank_) + s.at, {s.count});
        sp->grad = Tensor::view(b.shard_grads_ptr(rank_) + s.at, {s.count});
        shard_param_ptrs_.push_back(sp.get());
        shard_params_.push_back(std::move(sp));
      }
    }
  }
}

DataParallel::~DataParallel() {
  // Async work may still reference our buffers (after an error, say): let it
  // end before they are freed. Errors here were already reported.
  for (auto& b : buckets_) {
    for (Work* w : {&b->reduce_work, &b->gather_work, &b->gather16_work}) {
      if (!w->valid()) continue;
      try {
        w->wait();
      } catch (...) {
      }
    }
  }
  // The model outlives this object: every parameter and gradient that is a
  // view into a bucket gets memory of its own with the same values, so that
  // nothing points into the buckets freed next. (ZeRO-3's parameters are
  // released between uses: those stay empty.)
  for (auto& b : buckets_)
    for (nn::Parameter* p : b->params) {
      if (!p->data.empty()) p->data = Tensor(p->data);
      if (!p->grad.empty()) p->grad = Tensor(p->grad);
    }
}

std::vector<int64_t> DataParallel::bucket_sizes() const {
  std::vector<int64_t> v;
  for (auto& b : buckets_) v.push_back(b->numel);
  return v;
}

void DataParallel::point_params(Bucket& b) {
  for (size_t i = 0; i < b.params.size(); ++i)
    b.params[i]->data = Tensor::view(b.param.f32() + b.offsets[i], b.shapes[i]);
}

void DataParallel::point_grads(Bucket& b) {
  for (size_t i = 0; i < b.params.size(); ++i)
    b.params[i]->grad = Tensor::view(b.grad.f32() + b.offsets[i], b.shapes[i]);
}

void DataParallel::track(int64_t delta) {
  transient_bytes_ += delta;
  peak_transient_bytes_ = std::max(peak_transient_bytes_, transient_bytes_);
}

template <class F>
void DataParallel::waited(F&& call) {
  double t0 = now_s();
  call();
  comm_wait_s_ += now_s() - t0;
}

void DataParallel::wait(Work& w) {
  if (!w.valid()) return;
  waited([&] { w.wait(); });
  w = Work();
}

double DataParallel::take_comm_wait_s() {
  double s = comm_wait_s_;
  comm_wait_s_ = 0;
  return s;
}

nn::GradReadyHook DataParallel::hook() {
  return [this](nn::Parameter& p) {
    auto it = bucket_of_.find(&p);
    if (it == bucket_of_.end()) return;  // not ours (a frozen extra, say)
    Bucket& b = *buckets_[it->second];
    if (++b.ready != b.params.size() || !opts_.overlap) return;
    launch(b);
    if (!background_) complete(b);  // Work::wait runs it on this thread
  };
}

void DataParallel::attach(nn::Trainer& trainer) {
  BRAID_CHECK_ARG(opts_.zero == 0, "DataParallel::attach: nn::Trainer runs ZeRO 0 only; use "
                                   "DpTrainer for ZeRO " + std::to_string(opts_.zero));
  BRAID_CHECK_ARG(trainer.options().rank == rank_ && trainer.options().world == world_,
                  "DataParallel::attach: the trainer was built for rank " +
                      std::to_string(trainer.options().rank) + " of " +
                      std::to_string(trainer.options().world) + ", the communicator is rank " +
                      std::to_string(rank_) + " of " + std::to_string(world_));
  auto& h = trainer.hooks();
  h.grad_ready = hook();
  h.reduce_gradients = [this](const std::vector<nn::Parameter*>&) {
    finish_gradients();
    for (auto& b : buckets_) {  // the trainer zeroes the gradients itself
      b->ready = 0;
      b->launched = b->reduced = b->summed = false;
    }
  };
  h.reduce_sums = [this](double* v, int n) {
    if (world_ == 1) return;
    waited([&] { comm_->all_reduce(v, v, size_t(n), DType::kF64, ReduceOp::kSum); });
  };
}

void DataParallel::begin_step() {
  for (auto& b : buckets_) {
    b->ready = 0;
    b->launched = b->reduced = b->summed = false;
    if (opts_.zero <= 1) b->grad.zero();
  }
}

// ---- parameters (ZeRO 1/2: re-gathered after the sharded update; ZeRO 3:
// gathered before use and freed after) ----

void DataParallel::gather_params_async(Bucket& b) {
  if (b.gather_pending || (opts_.zero == 3 && b.params_live)) return;
  if (world_ == 1) {  // the shard is the whole bucket
    if (opts_.zero == 3) {
      b.param.resize({b.padded});
      track(b.padded * 4);
      point_params(b);
      std::memcpy(b.param.f32(), b.param_shard.f32(), size_t(b.padded) * 4);
      b.params_live = true;
    }
    return;
  }
  if (opts_.zero == 3) {
    b.param.resize({b.padded});
    track(b.padded * 4);
    point_params(b);
    b.gather_work = comm_->all_gather_async(b.param_shard.f32(), b.param.f32(), size_t(b.shard),
                                            DType::kF32);
  } else {
    float* full = b.param.f32();
    b.gather_work = comm_->all_gather_async(full + int64_t(rank_) * b.shard, full,
                                            size_t(b.shard), DType::kF32);
  }
  b.gather_pending = true;
}

void DataParallel::wait_params(Bucket& b) {
  if (opts_.zero == 3 && !b.params_live && !b.gather_pending) gather_params_async(b);
  if (b.gather_pending) {
    wait(b.gather_work);
    b.gather_pending = false;
    b.params_live = true;
  }
}

void DataParallel::release_params(Bucket& b) {
  if (opts_.zero != 3 || !b.params_live || b.gather_pending) return;
  b.param.release();
  track(-b.padded * 4);
  for (auto* p : b.params) p->data = Tensor();
  b.params_live = false;
}

void DataParallel::before_forward(size_t u) {
  for (size_t bi : unit_buckets_[u]) wait_params(*buckets_[bi]);
  if (opts_.zero == 3) {  // prefetch the next unit that has parameters
    for (size_t v = u + 1; v < units_.size(); ++v)
      if (!unit_buckets_[v].empty()) {
        for (size_t bi : unit_buckets_[v]) gather_params_async(*buckets_[bi]);
        break;
      }
  }
}

void DataParallel::after_forward(size_t u) {
  if (opts_.zero != 3) return;
  // The last unit with parameters runs backward next: keep it.
  for (size_t v = u + 1; v < units_.size(); ++v)
    if (!unit_buckets_[v].empty()) {
      for (size_t bi : unit_buckets_[u]) release_params(*buckets_[bi]);
      return;
    }
}

void DataParallel::before_backward(size_t u) {
  for (size_t bi : unit_buckets_[u]) {
    wait_params(*buckets_[bi]);
    ensure_grads(*buckets_[bi]);
  }
  if (opts_.zero == 3) {
    for (size_t v = u; v-- > 0;)
      if (!unit_buckets_[v].empty()) {
        for (size_t bi : unit_buckets_[v]) gather_params_async(*buckets_[bi]);
        break;
      }
  }
}

void DataParallel::after_backward(size_t u) {
  if (opts_.zero == 3)
    for (size_t bi : unit_buckets_[u]) release_params(*buckets_[bi]);
  if (opts_.zero >= 2) {
    poll_done();
    // Bound the full-size gradient buffers still waiting for their
    // reduce_scatter: beyond two, wait for the oldest (that is the memory
    // ZeRO 2/3 exist to save; waiting issues nothing, so ranks stay in step).
    int live = 0;
    for (auto& b : buckets_) live += b->launched && !b->reduced;
    for (auto& b : buckets_) {
      if (live <= 2) break;
      if (b->launched && !b->reduced) {
        complete(*b);
        --live;
      }
    }
  }
}

void DataParallel::gather_all_params() {
  for (auto& b : buckets_) gather_params_async(*b);
  for (auto& b : buckets_) wait_params(*b);
}

void DataParallel::release_all_params() {
  for (auto& b : buckets_) release_params(*b);
}

// ---- gradients ----

void DataParallel::ensure_grads(Bucket& b) {
  if (b.grads_live) return;
  b.grad.resize({b.padded});
  b.grad.zero();
  track(b.padded * 4);
  point_grads(b);
  b.grads_live = true;
}

void DataParallel::release_grads(Bucket& b) {
  if (opts_.zero < 2 || !b.grads_live) return;
  b.grad.release();
  track(-b.padded * 4);
  for (auto* p : b.params) p->grad = Tensor();
  b.grads_live = false;
}

void DataParallel::launch(Bucket& b) {
  if (b.launched) return;
  ensure_grads(b);  // a bucket whose parameters backward never touched
  b.launched = true;
  if (world_ == 1) {  // nothing to exchange: the shard is the whole bucket
    if (opts_.zero >= 2) std::memcpy(b.grad_shard.f32(), b.grad.f32(), size_t(b.padded) * 4);
    return;
  }
  const size_t n = size_t(b.padded), shard = size_t(b.shard);
  if (opts_.bf16_grads) {
    // Every rank sends chunk j of its bf16 gradients to rank j, which sums
    // them in f32 (complete()); ZeRO 0/1 then all_gather the bf16 sums.
    b.send16.resize({b.padded}, DType::kBF16);
    b.recv16.resize({b.padded}, DType::kBF16);
    convert_f32_to_bf16(b.grad.f32(), b.send16.bf16(), n);
    b.reduce_work = comm_->all_to_all_async(b.send16.raw(), b.recv16.raw(), shard, DType::kBF16);
    return;
  }
  if (!background_) {
    // Inline: the blocking call runs on this thread. Issued async and then
    // waited for, it would go to the communicator's worker thread, and the
    // hand-off (a futex wake each way) costs more than it saves when no
    // core is free for the worker anyway.
    waited([&] {
      if (opts_.zero <= 1)
        comm_->all_reduce(b.grad.f32(), b.grad.f32(), n, DType::kF32, ReduceOp::kSum);
      else
        comm_->reduce_scatter(b.grad.f32(), b.grad_shard.f32(), shard, DType::kF32,
                              ReduceOp::kSum);
    });
    return;
  }
  if (opts_.zero <= 1)
    b.reduce_work = comm_->all_reduce_async(b.grad.f32(), b.grad.f32(), n, DType::kF32,
                                            ReduceOp::kSum);
  else
    b.reduce_work = comm_->reduce_scatter_async(b.grad.f32(), b.grad_shard.f32(), shard,
                                                DType::kF32, ReduceOp::kSum);
}

void DataParallel::complete(Bucket& b) {
  if (b.reduced) return;
  if (opts_.bf16_grads && world_ > 1) {
    sum_bf16_chunk(b);
    if (opts_.zero <= 1) {
      wait(b.gather16_work);
      convert_bf16_to_f32(b.send16.bf16(), b.grad.f32(), size_t(b.padded));
    }
  } else {
    wait(b.reduce_work);
  }
  b.reduced = true;
  release_grads(b);
}

// bf16 phase 1: this rank's chunk summed in f32 from every rank's bf16
// contribution; for ZeRO 0/1 also starts the all_gather of the bf16 sums
// (every rank then widens the same bf16 values, so replicas stay equal).
void DataParallel::sum_bf16_chunk(Bucket& b) {
  if (b.summed) return;
  wait(b.reduce_work);
  b.summed = true;
  float* out = b.shard_grads_ptr(rank_);
  const uint16_t* in = b.recv16.bf16();
  convert_bf16_to_f32(in, out, size_t(b.shard));
  for (int r = 1; r < world_; ++r) {
    const uint16_t* src = in + int64_t(r) * b.shard;
    for (int64_t i = 0; i < b.shard; ++i) out[i] += bf16_to_f32(src[i]);
  }
  if (opts_.zero <= 1) {
    uint16_t* mine = b.send16.bf16() + int64_t(rank_) * b.shard;
    convert_f32_to_bf16(out, mine, size_t(b.shard));
    b.gather16_work = comm_->all_gather_async(mine, b.send16.raw(), size_t(b.shard), DType::kBF16);
  }
}

void DataParallel::poll_done() {
  // Only completions that start no new collective: whether test() says done
  // differs between ranks, and collectives must be issued in the same order
  // everywhere.
  if (opts_.zero < 2) return;
  for (auto& b : buckets_)
    if (b->launched && !b->reduced && b->reduce_work.valid() && b->reduce_work.test()) complete(*b);
}

void DataParallel::finish_gradients() {
  if (!opts_.overlap && world_ > 1) {
    // The plain scheme: one blocking all_reduce per parameter, in
    // grad-ready order, after the whole backward.
    waited([&] {
      for (auto& b : buckets_)
        for (auto* p : b->params)
          comm_->all_reduce(p->grad.f32(), p->grad.f32(), size_t(p->size()), DType::kF32,
                            ReduceOp::kSum);
    });
    for (auto& b : buckets_) b->reduced = true;
    return;
  }
  for (auto& b : buckets_) launch(*b);  // buckets the hook did not complete
  if (opts_.bf16_grads && world_ > 1)
    for (auto& b : buckets_) sum_bf16_chunk(*b);  // start every all_gather before waiting
  for (auto& b : buckets_) complete(*b);
}

double DataParallel::clip_grad_norm(double max_norm) {
  if (opts_.zero == 0) return nn::clip_grad_norm(params_, max_norm);
  double ss = 0;
  for (auto& b : buckets_) ss += sum_squares(b->shard_grads_ptr(rank_), b->shard);
  if (world_ > 1) waited([&] { comm_->all_reduce(&ss, &ss, 1, DType::kF64, ReduceOp::kSum); });
  double norm = std::sqrt(ss);
  if (max_norm > 0 && norm > max_norm) {
    float s = float(max_norm / (norm + 1e-6));
    for (auto& b : buckets_) {
      float* g = b->shard_grads_ptr(rank_);
      for (int64_t i = 0; i < b->shard; ++i) g[i] *= s;
    }
  }
  return norm;
}

std::vector<nn::Parameter*>& DataParallel::shard_params() { return shard_param_ptrs_; }

void DataParallel::optimizer_step(nn::Optimizer& opt, float lr) {
  if (opts_.zero == 0) {
    opt.step(params_, lr);
    return;
  }
  opt.step(shard_params(), lr);
  if (opts_.zero <= 2) {
    for (auto& b : buckets_) gather_params_async(*b);
  } else {
    for (size_t u = 0; u < units_.size(); ++u)  // prefetch the first unit of the next step
      if (!unit_buckets_[u].empty()) {
        for (size_t bi : unit_buckets_[u]) gather_params_async(*buckets_[bi]);
        break;
      }
  }
}

DpMemory DataParallel::memory(const nn::Optimizer& opt) const {
  DpMemory m;
  for (auto& b : buckets_) {
    m.param_bytes += (opts_.zero == 3 ? b->shard : b->padded) * 4;
    m.grad_bytes += (opts_.zero >= 2 ? b->shard : b->padded) * 4;
  }
  Checkpoint ck;
  opt.save_state(ck);
  for (auto& [k, t] : ck.tensors) m.optim_bytes += int64_t(t.nbytes());
  m.peak_transient_bytes = peak_transient_bytes_;
  return m;
}

}  // namespace braid::parallel
