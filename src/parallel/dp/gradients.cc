// A bucket's gradient reduction, whatever the stage: when it starts (the
// grad-ready hook, or finish_gradients for buckets backward never
// completed), where it runs (worker thread or this one), the bf16 exchange,
// and when it is waited for. The collective itself is the policy's.
#include <cstring>

#include "braid/kernels.h"
#include "parallel/dp/state.h"
#include "parallel/dp/zero_policy.h"

namespace braid::parallel::dp {

void State::ensure_grads(Bucket& b) {
  if (b.grads_live) return;
  b.grad.resize({b.padded});
  b.grad.zero();
  track(b.padded * 4);
  b.point_grads();
  b.grads_live = true;
}

void State::release_grads(Bucket& b) {
  if (!b.grads_live) return;
  b.grad.release();
  track(-b.padded * 4);
  for (auto* p : b.params) p->grad = Tensor();
  b.grads_live = false;
}

void State::launch(Bucket& b) {
  if (b.launched) return;
  ensure_grads(b);  // a bucket whose parameters backward never touched
  b.launched = true;
  if (world == 1) {  // nothing to exchange
    policy->reduce_alone(b);
    return;
  }
  if (opts.bf16_grads) {
    // Every rank sends chunk j of its bf16 gradients to rank j, which sums
    // them in f32 (sum_bf16_chunk).
    b.send16.resize({b.padded}, DType::kBF16);
    b.recv16.resize({b.padded}, DType::kBF16);
    convert_f32_to_bf16(b.grad.f32(), b.send16.bf16(), size_t(b.padded));
    b.reduce_work =
        comm->all_to_all_async(b.send16.raw(), b.recv16.raw(), size_t(b.shard), DType::kBF16);
    return;
  }
  if (!background) {
    // Inline: the blocking call runs on this thread. Issued async and then
    // waited for, it would go to the communicator's worker thread, and the
    // hand-off (a futex wake each way) costs more than it saves when no
    // core is free for the worker anyway.
    waited([&] { policy->reduce(b); });
    return;
  }
  b.reduce_work = policy->reduce_async(b);
}

void State::complete(Bucket& b) {
  if (b.reduced) return;
  if (opts.bf16_grads && world > 1) {
    sum_bf16_chunk(b);
    if (!policy->shards_grads()) {
      wait(b.gather16_work);
      convert_bf16_to_f32(b.send16.bf16(), b.grad.f32(), size_t(b.padded));
    }
  } else {
    wait(b.reduce_work);
  }
  b.reduced = true;
  policy->reduced(b);
}

// bf16 phase 1: this rank's chunk summed in f32 from every rank's bf16
// contribution (one rounding per contribution, none per hop). Sharded
// gradients keep that sum as the chunk; replicated ones round it to bf16
// once more and all_gather it, and every rank widens the same bf16 values,
// so the replicas stay equal.
void State::sum_bf16_chunk(Bucket& b) {
  if (b.summed) return;
  wait(b.reduce_work);
  b.summed = true;
  float* out = b.shard_grads_ptr(rank);
  const uint16_t* in = b.recv16.bf16();
  convert_bf16_to_f32(in, out, size_t(b.shard));
  for (int r = 1; r < world; ++r) {
    const uint16_t* src = in + int64_t(r) * b.shard;
    for (int64_t i = 0; i < b.shard; ++i) out[i] += bf16_to_f32(src[i]);
  }
  if (!policy->shards_grads()) {
    uint16_t* mine = b.send16.bf16() + int64_t(rank) * b.shard;
    convert_f32_to_bf16(out, mine, size_t(b.shard));
    b.gather16_work = comm->all_gather_async(mine, b.send16.raw(), size_t(b.shard), DType::kBF16);
  }
}

void State::poll_done() {
  // Only completions that start no new collective: whether test() says done
  // differs between ranks, and collectives must be issued in the same order
  // everywhere.
  for (auto& b : buckets)
    if (b->launched && !b->reduced && b->reduce_work.valid() && b->reduce_work.test()) complete(*b);
}

void State::bound_in_flight(int n) {
  int live = 0;
  for (auto& b : buckets) live += b->launched && !b->reduced;
  for (auto& b : buckets) {
    if (live <= n) break;
    if (b->launched && !b->reduced) {
      complete(*b);
      --live;
    }
  }
}

void State::finish_gradients() {
  if (!opts.overlap && world > 1) {
    // The plain scheme: one blocking all_reduce per parameter, in
    // grad-ready order, after the whole backward.
    waited([&] {
      for (auto& b : buckets)
        for (auto* p : b->params)
          comm->all_reduce(p->grad.f32(), p->grad.f32(), size_t(p->size()), DType::kF32,
                           ReduceOp::kSum);
    });
    for (auto& b : buckets) b->reduced = true;
    return;
  }
  for (auto& b : buckets) launch(*b);  // buckets the hook did not complete
  if (opts.bf16_grads && world > 1)
    for (auto& b : buckets) sum_bf16_chunk(*b);  // start every all_gather before waiting
  for (auto& b : buckets) complete(*b);
}

}  // namespace braid::parallel::dp
