// The choice of policy and what every stage does around a unit; the
// stages themselves are in replicated.cc, zero1.cc, zero2.cc, zero3.cc.
#include "parallel/dp/zero_policy.h"

#include <string>

#include "braid/error.h"

namespace braid::parallel::dp {

std::unique_ptr<ZeroPolicy> ZeroPolicy::make(State& s) {
  std::unique_ptr<ZeroPolicy> p;
  switch (s.opts.zero) {
    case 0: p = std::make_unique<Replicated>(s); break;
    case 1: p = std::make_unique<Zero1>(s); break;
    case 2: p = std::make_unique<Zero2>(s); break;
    case 3: p = std::make_unique<Zero3>(s); break;
    default:
      throw Error(Errc::kInvalidArgument,
                  "DataParallel: ZeRO stage must be 0..3, got " + std::to_string(s.opts.zero));
  }
  // The plain scheme reduces every parameter's full gradient in place.
  BRAID_CHECK_ARG(s.opts.overlap || !p->shards_optimizer(),
                  "DataParallel: the plain (non-overlapped) scheme exists for ZeRO 0 only");
  return p;
}

void ZeroPolicy::before_forward(size_t unit) {
  s_.for_buckets_of(unit, [&](Bucket& b) { s_.wait_params(b); });
}

void ZeroPolicy::before_backward(size_t unit) {
  s_.for_buckets_of(unit, [&](Bucket& b) {
    s_.wait_params(b);
    s_.ensure_grads(b);
  });
}

}  // namespace braid::parallel::dp
