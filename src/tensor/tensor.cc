#include "braid/tensor.h"

#include <malloc.h>

#include <atomic>

#include <cstdlib>
#include <cstring>

#include "braid/error.h"

namespace braid {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += s[i] < 0 ? std::string("*") : std::to_string(s[i]);
  }
  return r + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) throw Error(Errc::kInvalidArgument, "negative dimension in shape " + shape_str(s));
    n *= d;
  }
  return n;
}

namespace {
std::atomic<size_t> g_in_use{0}, g_peak{0};

void count_alloc(size_t bytes) {
  const size_t now = g_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

size_t tensor_bytes_in_use() { return g_in_use.load(std::memory_order_relaxed); }
size_t tensor_peak_bytes() { return g_peak.load(std::memory_order_relaxed); }
void reset_tensor_peak_bytes() { g_peak.store(g_in_use.load(std::memory_order_relaxed)); }

CountedStorage::CountedStorage(size_t bytes) : bytes_(bytes) { count_alloc(bytes); }
CountedStorage& CountedStorage::operator=(CountedStorage&& o) noexcept {
  if (this != &o) {
    g_in_use.fetch_sub(bytes_, std::memory_order_relaxed);
    bytes_ = o.bytes_;
    o.bytes_ = 0;
  }
  return *this;
}
CountedStorage::~CountedStorage() { g_in_use.fetch_sub(bytes_, std::memory_order_relaxed); }

void Tensor::Free::operator()(void* p) const {
  g_in_use.fetch_sub(::malloc_usable_size(p), std::memory_order_relaxed);
  std::free(p);
}

namespace {
void check_dtype(DType t) {
  if (t != DType::kF32 && t != DType::kBF16 && t != DType::kI32)
    throw Error(Errc::kNotSupported, std::string("tensor dtype ") + dtype_name(t) +
                                         " (supported: f32, bf16, i32)");
}
// 64-byte alignment keeps rows of vectorised loops on cache lines.
void* alloc_zeroed(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw Error(Errc::kIo, "out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  count_alloc(::malloc_usable_size(p));
  return p;
}
}  // namespace

Tensor::Tensor(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  check_dtype(dtype);
  numel_ = shape_numel(shape_);
  capacity_ = nbytes();
  owned_.reset(alloc_zeroed(capacity_));
  data_ = owned_.get();
}

Tensor Tensor::view(void* data, Shape shape, DType dtype) {
  check_dtype(dtype);
  Tensor t;
  t.shape_ = std::move(shape);
  t.numel_ = shape_numel(t.shape_);
  t.dtype_ = dtype;
  t.data_ = data;
  t.capacity_ = t.nbytes();
  return t;
}

Tensor::Tensor(const Tensor& o) : shape_(o.shape_), numel_(o.numel_), dtype_(o.dtype_) {
  capacity_ = nbytes();
  owned_.reset(alloc_zeroed(capacity_));
  data_ = owned_.get();
  if (nbytes()) std::memcpy(data_, o.data_, nbytes());
}

Tensor& Tensor::operator=(const Tensor& o) {
  if (this != &o) {
    Tensor t(o);
    *this = std::move(t);
  }
  return *this;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0) i += n;
  if (i < 0 || i >= n)
    throw Error(Errc::kInvalidArgument,
                "dimension " + std::to_string(i) + " out of range for shape " + shape_str(shape_));
  return shape_[size_t(i)];
}

#define BRAID_TYPED(NAME, T, DT)                                                              \
  T* Tensor::NAME() {                                                                         \
    if (dtype_ != DT)                                                                         \
      throw Error(Errc::kInvalidArgument, std::string("tensor is ") + dtype_name(dtype_) +    \
                                              ", not " #NAME " (shape " + shape_str(shape_) + ")"); \
    return static_cast<T*>(data_);                                                            \
  }                                                                                           \
  const T* Tensor::NAME() const { return const_cast<Tensor*>(this)->NAME(); }
BRAID_TYPED(f32, float, DType::kF32)
BRAID_TYPED(bf16, uint16_t, DType::kBF16)
BRAID_TYPED(i32, int32_t, DType::kI32)
#undef BRAID_TYPED

void Tensor::resize(const Shape& shape) { resize(shape, dtype_); }

void Tensor::resize(const Shape& shape, DType dtype) {
  check_dtype(dtype);
  int64_t n = shape_numel(shape);
  size_t bytes = size_t(n) * dtype_size(dtype);
  if (bytes > capacity_) {
    if (data_ && !owned_)
      throw Error(Errc::kInvalidArgument, "cannot grow a view from " + shape_str(shape_) +
                                              " to " + shape_str(shape));
    owned_.reset(alloc_zeroed(bytes));
    data_ = owned_.get();
    capacity_ = bytes;
  }
  shape_ = shape;
  numel_ = n;
  dtype_ = dtype;
}

void Tensor::reshape(const Shape& shape) {
  if (shape_numel(shape) != numel_)
    throw Error(Errc::kInvalidArgument,
                "reshape: " + shape_str(shape_) + " cannot become " + shape_str(shape));
  shape_ = shape;
}

void Tensor::release() {
  if (!owned_) return;
  owned_.reset();
  data_ = nullptr;
  capacity_ = 0;
  shape_ = {0};
  numel_ = 0;
}

void Tensor::zero() {
  if (nbytes()) std::memset(data_, 0, nbytes());
}

void Tensor::fill(float v) {
  float* p = f32();
  for (int64_t i = 0; i < numel_; ++i) p[i] = v;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.numel_ != numel_ || src.dtype_ != dtype_)
    throw Error(Errc::kInvalidArgument, std::string("copy_from: ") + dtype_name(src.dtype_) + " " +
                                            shape_str(src.shape_) + " into " + dtype_name(dtype_) +
                                            " " + shape_str(shape_));
  if (nbytes()) std::memmove(data_, src.data_, nbytes());
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return Tensor(*this);
  Tensor out(shape_, dtype);
  if (dtype_ == DType::kF32 && dtype == DType::kBF16) {
    convert_f32_to_bf16(f32(), out.bf16(), size_t(numel_));
  } else if (dtype_ == DType::kBF16 && dtype == DType::kF32) {
    convert_bf16_to_f32(bf16(), out.f32(), size_t(numel_));
  } else {
    throw Error(Errc::kNotSupported, std::string("conversion ") + dtype_name(dtype_) + " -> " +
                                         dtype_name(dtype));
  }
  return out;
}

void Tensor::check_shape(const Shape& expected, const std::string& what) const {
  bool ok = expected.size() == shape_.size();
  for (size_t i = 0; ok && i < expected.size(); ++i)
    ok = expected[i] < 0 || expected[i] == shape_[i];
  if (!ok)
    throw Error(Errc::kInvalidArgument,
                what + ": got " + shape_str(shape_) + " vs expected " + shape_str(expected));
}

void check_same_shape(const Tensor& a, const Tensor& b, const std::string& what) {
  if (a.shape() != b.shape())
    throw Error(Errc::kInvalidArgument,
                what + ": shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                    " differ");
}

int64_t rows_of_width(const Tensor& x, int64_t width, const char* kind, const std::string& name) {
  if (x.ndim() < 1 || x.dim(-1) != width)
    throw Error(Errc::kInvalidArgument, std::string(kind) + " " + name + ": input " +
                                            shape_str(x.shape()) + " vs expected [*, " +
                                            std::to_string(width) + "]");
  return x.numel() / width;
}

}  // namespace braid
