// Does fusing the pre-norm block's residual add into its layer norm pay?
// Times one norm of a block, forward and backward, both ways: the add as
// its own pass (vadd h = x + a, then LayerNorm forward; backward, then
// vadd dx = res + the norm's gradient) against LayerNorm::forward_add and
// backward_add (one pass each way; src/nn/layernorm.cc). Under bf16 the
// norm's output is kept in bf16 and its dy arrives in bf16, as in the
// block. Prints the median ms per forward + backward over 15 runs and
// the ratio, at the thread count given.
//
//   cmake --build build --target micro_ln_residual
//   build/bench/micro/ln_residual [threads] [rows] [d_model]   (2 4096 512)
#include <cstdio>

#include "braid/kernels.h"
#include "braid/layers.h"
#include "braid/precision.h"
#include "kernel_bench.h"

using namespace braid;

int main(int argc, char** argv) {
  const auto [threads, rows, d] = kernel_shape(argc, argv);
  Tensor x({rows, d}), a({rows, d}), res({rows, d}), dy32({rows, d});
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.f32()[i] = float(i % 17) * 0.01f - 0.08f;
    a.f32()[i] = float(i % 11) * 0.02f - 0.1f;
    res.f32()[i] = float(i % 13) * 0.001f - 0.006f;
    dy32.f32()[i] = float(i % 7) * 0.001f - 0.003f;
  }
  nn::Context ctx;
  std::printf("residual add + LayerNorm(%lld), %lld rows, %d thread(s): ms per forward+backward "
              "(median of 15)\n",
              (long long)d, (long long)rows, threads);
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    set_compute_precision(p);
    const Tensor dy = p == Precision::kBF16 ? dy32.to(DType::kBF16) : dy32;
    nn::LayerNorm plain("plain", d), fused("fused", d);
    plain.set_bf16_output(true);
    fused.set_bf16_output(true);
    Tensor h({rows, d}), hf, dx({rows, d}), dxf;
    const double before = median_ms([&] {
      vadd(x.f32(), a.f32(), h.f32(), h.numel());
      plain.forward(h, ctx);
      const Tensor& g = plain.backward(dy, ctx);
      vadd(res.f32(), g.f32(), dx.f32(), dx.numel());
    });
    const double after = median_ms([&] {
      fused.forward_add(x, a, hf, ctx);
      fused.backward_add(dy, res, dxf, ctx);
    });
    std::printf("  %s: unfused %.2f ms, fused %.2f ms, fused/unfused %.3f\n", precision_name(p),
                before, after, after / before);
  }
  return 0;
}
