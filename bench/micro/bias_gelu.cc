// Does fusing bias + GELU into Linear pay? Times the MLP's first half,
// fc (d_model → 4·d_model) then GELU, forward and backward, both ways:
// Linear then GELU (the bias written before the GEMM, GELU a second pass,
// the bias gradient a column sum over GELU's gradient) against Linear with
// Activation::kGelu (one pass each way; src/nn/bias_gelu.h). Prints the
// median ms per forward + backward over 15 runs and the ratio, for fp32
// and bf16 compute, at the thread count given.
//
//   cmake --build build --target micro_bias_gelu
//   build/bench/micro/bias_gelu [threads] [rows] [d_model]   (2 4096 512)
#include <cstdio>

#include "braid/layers.h"
#include "braid/precision.h"
#include "kernel_bench.h"

using namespace braid;

int main(int argc, char** argv) {
  const auto [threads, rows, d] = kernel_shape(argc, argv);
  Tensor x({rows, d}), dy({rows, 4 * d});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float(i % 17) * 0.01f - 0.08f;
  for (int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = float(i % 13) * 0.001f - 0.006f;
  nn::Context ctx;
  std::printf("fc %lld→%lld + GELU, %lld rows, %d thread(s): ms per forward+backward (median of 15)\n",
              (long long)d, (long long)(4 * d), (long long)rows, threads);
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    set_compute_precision(p);
    nn::Linear plain("plain", d, 4 * d), fused("fused", d, 4 * d);
    nn::GELU act("act");
    fused.set_activation(nn::Linear::Activation::kGelu);
    const double before = median_ms([&] {
      act.forward(plain.forward(x, ctx), ctx);
      plain.backward(act.backward(dy, ctx), ctx);
    });
    const double after = median_ms([&] {
      fused.forward(x, ctx);
      fused.backward(dy, ctx);
    });
    std::printf("  %s: unfused %.2f ms, fused %.2f ms, fused/unfused %.3f\n", precision_name(p),
                before, after, after / before);
  }
  return 0;
}
