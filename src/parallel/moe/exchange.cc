// ExpertExchange over a Communicator: the MoE layer's token exchange as
// all_to_all (counts) and all_to_all_v (rows).
#include "braid/expert_parallel.h"

namespace braid::parallel {

namespace {

class CommExchange : public nn::ExpertExchange {
 public:
  explicit CommExchange(std::shared_ptr<Communicator> c) : c_(std::move(c)) {}
  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  void counts(const int64_t* send, int64_t* recv, size_t n) override {
    c_->all_to_all(send, recv, n, DType::kI64);
  }
  void rows(const float* send, const std::vector<size_t>& send_counts, float* recv,
            const std::vector<size_t>& recv_counts) override {
    std::vector<size_t> sd(send_counts.size()), rd(recv_counts.size());
    for (size_t r = 1; r < sd.size(); ++r) sd[r] = sd[r - 1] + send_counts[r - 1];
    for (size_t r = 1; r < rd.size(); ++r) rd[r] = rd[r - 1] + recv_counts[r - 1];
    // The buffers may be empty (no rows either way): all_to_all_v wants
    // real pointers.
    float dummy = 0;
    c_->all_to_all_v(send ? send : &dummy, send_counts, sd, recv ? recv : &dummy, recv_counts, rd,
                     DType::kF32);
  }

 private:
  std::shared_ptr<Communicator> c_;
};

}  // namespace

std::shared_ptr<nn::ExpertExchange> expert_exchange(std::shared_ptr<Communicator> ep) {
  return std::make_shared<CommExchange>(std::move(ep));
}

}  // namespace braid::parallel
