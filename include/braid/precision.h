// Compute precision: the number format the GEMMs of training run in.
//
// braid keeps every parameter, gradient and optimizer state in f32 (the
// "master" copy) whatever the precision; what changes is the GEMMs of the
// layers (Linear, the attention's matmuls, and through them every
// tensor- and pipeline-parallel layer): their operands are rounded to the
// compute format just before the product, and the product is accumulated
// and returned in f32. Softmax, layer norm, losses, reductions and the
// optimizer stay f32. Under kBF16 the transformer layers also keep the
// activations they hold for backward in bf16 (activation_dtype() below):
// half the bytes, and operands the GEMMs take without rounding again.
//   kF32   sgemm (OpenBLAS), as without this header.
//   kBF16  operands rounded to bf16 (nearest even), gemm_bf16 (oneDNN,
//          kernels.h): 8 bits of mantissa, f32's range.
//   kF16   operands rounded to IEEE half (nearest even; beyond ±65504 they
//          become ±inf), products in f32: the numerics of f16 with f32
//          accumulate. This CPU has no f16 GEMM, so it runs at f32's
//          speed; f16's narrow range is why it needs loss scaling
//          (loss_scaler.h).
// The weight is rounded where it is used (per GEMM call), not cached: one
// O(weight) pass per O(rows · weight) product, and no copy to keep in step
// with the master under ZeRO's gathers or after the optimizer's update.
//
// The precision is process-wide, like the thread count (threads.h): every
// rank of a job sets the same one before training. Not to be changed
// while a forward or backward runs.
#pragma once

#include <cstdint>
#include <string>

#include "braid/dtype.h"

namespace braid {

enum class Precision { kF32, kBF16, kF16 };

// "fp32", "bf16", "fp16".
const char* precision_name(Precision p);
// Parses "fp32" | "bf16" | "fp16" (also "f32", "f16"); anything else throws
// Error(kInvalidArgument) naming the value and the choices.
Precision parse_precision(const std::string& s);

void set_compute_precision(Precision p);
Precision compute_precision();

// gemm (kernels.h) with f32 operands, in the compute precision: the
// operands rounded to it (into per-thread scratch buffers), the product
// accumulated in f32. Same arguments and semantics as gemm.
void gemm_compute(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc);

// An operand of the gemm_compute below: f32 values (rounded to the
// compute precision per call, as above) or bf16 bit patterns already
// rounded (stored activations, activation_dtype()): under kBF16 these go
// to the GEMM as they are, with no copy; under kF32 and kF16 they are
// widened to f32 (exactly) and treated as f32 operands. `ld` is the row
// stride in elements of the operand as stored (before op()).
struct GemmOperand {
  const void* data;
  DType dtype;  // kF32 or kBF16; anything else throws Error(kInvalidArgument)
  int64_t ld;
};
inline GemmOperand gemm_operand(const float* p, int64_t ld) { return {p, DType::kF32, ld}; }

// gemm_compute over operands that may already be bf16; with two f32
// operands, the same products bit for bit as the overload above.
void gemm_compute(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc);

// The dtype layers store the activations they keep only for GEMMs in:
// kBF16 under Precision::kBF16 (the rounding gemm_compute would apply to
// them anyway, so results are unchanged, at half the bytes), else kF32.
// set_bf16_activations(false) keeps them f32 under kBF16 too (the same
// results at f32's memory: the reference the tests compare with).
// Process-wide like the precision; on by default.
DType activation_dtype();
void set_bf16_activations(bool on);

// Rounds the [rows, cols] block at src (row stride ld) to bf16 into dst
// (row stride ld_dst): bit for bit the rounding gemm_compute applies to an
// f32 operand under kBF16 (AVX512-BF16's where the CPU has it).
void round_rows_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst,
                        int64_t ld_dst);

// Rounds n values in place to the format (bf16 or f16, nearest even) and
// back to f32; kF32 leaves them. For tests and reference paths.
void round_to_precision(float* x, int64_t n, Precision p);

}  // namespace braid
