#include <braid/comm.h>
#include <cstdio>
int main() {
  auto c = braid::Communicator::from_env();
  float x = float(c->rank() + 1);
  c->all_reduce(&x, &x, 1, braid::DType::kF32, braid::ReduceOp::kSum);
  std::printf("rank %d of %d: sum %g\n", c->rank(), c->size(), x);
}
