#include "dtype_map.h"

#include "braid/error.h"

namespace braid_torch {
namespace {

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNKNOWN";
  }
}

// The name Python users know the dtype by.
std::string torch_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return c10::toString(t);
  }
}

[[noreturn]] void refuse(at::ScalarType t, c10d::ReduceOp::RedOpType op, const char* collective,
                         const std::string& why) {
  throw braid::Error(braid::Errc::kNotSupported,
                     std::string("braid_torch ") + collective + ": cannot reduce dtype " +
                         torch_name(t) + " with " + op_name(op) + ": " + why);
}

}  // namespace

Reduction map_reduction(at::ScalarType t, const c10d::ReduceOp& rop, const char* collective) {
  using R = c10d::ReduceOp;
  const R::RedOpType op = rop.op_;
  braid::ReduceOp bop;
  switch (op) {
    case R::SUM: bop = braid::ReduceOp::kSum; break;
    case R::AVG: bop = braid::ReduceOp::kAvg; break;
    case R::PRODUCT: bop = braid::ReduceOp::kProd; break;
    case R::MIN: bop = braid::ReduceOp::kMin; break;
    case R::MAX: bop = braid::ReduceOp::kMax; break;
    case R::BAND: bop = braid::ReduceOp::kBand; break;
    case R::BOR: bop = braid::ReduceOp::kBor; break;
    case R::BXOR: bop = braid::ReduceOp::kBxor; break;
    default: refuse(t, op, collective, "braid has no such reduce op");
  }
  auto plain = [&](braid::DType d) {
    if (!braid::reduce_op_supported(bop, d))
      refuse(t, op, collective, "bitwise ops are defined on integer dtypes only");
    return Reduction{d, bop, 1};
  };
  switch (t) {
    case at::kFloat: return plain(braid::DType::kF32);
    case at::kDouble: return plain(braid::DType::kF64);
    case at::kHalf: return plain(braid::DType::kF16);
    case at::kBFloat16: return plain(braid::DType::kBF16);
    case at::kChar: return plain(braid::DType::kI8);
    case at::kByte: return plain(braid::DType::kU8);
    case at::kInt: return plain(braid::DType::kI32);
    case at::kLong: return plain(braid::DType::kI64);
    case at::kComplexFloat:
    case at::kComplexDouble:
      if (op != R::SUM && op != R::AVG)
        refuse(t, op, collective, "complex tensors reduce with SUM or AVG only");
      return Reduction{t == at::kComplexFloat ? braid::DType::kF32 : braid::DType::kF64, bop, 2};
    case at::kBool:
      switch (op) {
        case R::SUM: case R::MAX: case R::BOR:
          return Reduction{braid::DType::kU8, braid::ReduceOp::kBor, 1};
        case R::PRODUCT: case R::MIN: case R::BAND:
          return Reduction{braid::DType::kU8, braid::ReduceOp::kBand, 1};
        case R::BXOR:
          return Reduction{braid::DType::kU8, braid::ReduceOp::kBxor, 1};
        default:
          refuse(t, op, collective, "a bool has no average");
      }
    default:
      refuse(t, op, collective, "braid has no arithmetic for this dtype (int16 and the "
                                "quantized types are not among braid's dtypes)");
  }
}

void check_cpu_tensor(const at::Tensor& t, const std::string& what) {
  if (!t.defined())
    throw braid::Error(braid::Errc::kInvalidArgument, "braid_torch: " + what + " is undefined");
  if (!t.device().is_cpu())
    throw braid::Error(braid::Errc::kInvalidArgument,
                       "braid_torch: " + what + " is on " + t.device().str() +
                           "; the braid backend handles CPU tensors only");
  if (t.layout() != at::kStrided)
    throw braid::Error(braid::Errc::kInvalidArgument,
                       "braid_torch: " + what + " is sparse; the braid backend needs dense tensors");
}

}  // namespace braid_torch
