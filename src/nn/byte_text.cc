// Byte-level text data set: every window of T+1 bytes is a sample.
#include "braid/data.h"
#include "braid/error.h"
#include "gunzip.h"

namespace braid::nn {

ByteText::ByteText(const std::string& path, int64_t context)
    : ByteText(read_file_maybe_gz(path), context, path) {}

ByteText::ByteText(std::vector<uint8_t> bytes, int64_t context, std::string name)
    : bytes_(std::move(bytes)), context_(context), name_(std::move(name)) {
  BRAID_CHECK_ARG(context > 0, "text context must be positive");
  if (int64_t(bytes_.size()) < context + 1)
    throw Error(Errc::kInvalidArgument, "text " + name_ + " has " + std::to_string(bytes_.size()) +
                                            " bytes; context " + std::to_string(context) +
                                            " needs at least " + std::to_string(context + 1));
}

std::string ByteText::default_path() { return "/usr/share/common-licenses/GPL-3"; }

void ByteText::gather(const int64_t* idx, int64_t n, Tensor& x, Tensor& y) const {
  const int64_t T = context_;
  x.resize({n, T}, DType::kI32);
  y.resize({n, T}, DType::kI32);
  int32_t* xp = x.i32();
  int32_t* yp = y.i32();
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = idx[i];
    BRAID_CHECK_ARG(k >= 0 && k < size(), "text index " + std::to_string(k) + " out of range");
    const uint8_t* src = bytes_.data() + k;
    for (int64_t t = 0; t < T; ++t) {
      xp[i * T + t] = src[t];
      yp[i * T + t] = src[t + 1];
    }
  }
}

}  // namespace braid::nn
