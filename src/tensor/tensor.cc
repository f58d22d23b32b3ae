#include "braid/tensor.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "braid/env.h"
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

namespace {
// Freed tensor buffers of 64 KiB and more are kept for the next request of
// the same size instead of going back to the C library, which returns
// large blocks to the kernel: the next step's tensors of the same shapes
// (recomputed activations, ZeRO-3's gathered units) would fault every page
// in again, and on this machine the faults cost a recomputing or ZeRO-3
// step 7-10% of its time in the kernel. What the cache holds and what is
// in use together never exceed the tensor peak (tensor_peak_bytes): a
// block that would is freed. Off under AddressSanitizer and
// ThreadSanitizer, so that they see every buffer's end, and under
// BRAID_TENSOR_CACHE=0.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kCache = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kCache = false;
#else
constexpr bool kCache = true;
#endif
#else
constexpr bool kCache = true;
#endif
constexpr size_t kCacheMin = size_t(64) << 10;
// kCache, unless BRAID_TENSOR_CACHE=0 (read once).
bool caching() {
  static const bool on = kCache && env_str("BRAID_TENSOR_CACHE").value_or("1") != "0";
  return on;
}

struct BlockCache {
  std::mutex mu;
  std::map<void*, size_t> requested;    // every live or cached block: its rounded request
  std::multimap<size_t, void*> blocks;  // cached: rounded request → block
  size_t bytes = 0;                     // cached blocks' usable sizes
};
// Never destroyed: tensors of static objects are freed after it would be.
BlockCache& block_cache() {
  static auto* c = new BlockCache;
  return *c;
}

// Frees cached blocks, largest first, until what is cached plus what is in
// use plus `more` fits under the peak (or nothing is cached).
void trim_cache_locked(BlockCache& c, size_t more) {
  while (!c.blocks.empty() && g_in_use.load(std::memory_order_relaxed) + c.bytes + more >
                                  g_peak.load(std::memory_order_relaxed)) {
    auto last = std::prev(c.blocks.end());
    c.bytes -= ::malloc_usable_size(last->second);
    c.requested.erase(last->second);
    std::free(last->second);
    c.blocks.erase(last);
  }
}
}  // namespace

size_t tensor_cached_bytes() {
  BlockCache& c = block_cache();
  std::lock_guard<std::mutex> l(c.mu);
  return c.bytes;
}

void Tensor::Free::operator()(void* p) const {
  const size_t usable = ::malloc_usable_size(p);
  g_in_use.fetch_sub(usable, std::memory_order_relaxed);
  if (caching() && usable >= kCacheMin) {
    BlockCache& c = block_cache();
    std::lock_guard<std::mutex> l(c.mu);
    auto it = c.requested.find(p);
    if (it != c.requested.end()) {
      if (g_in_use.load(std::memory_order_relaxed) + c.bytes + usable <=
          g_peak.load(std::memory_order_relaxed)) {
        c.blocks.emplace(it->second, p);
        c.bytes += usable;
        return;
      }
      c.requested.erase(it);
    }
  }
  std::free(p);
}

namespace {
void check_dtype(DType t) {
  if (t != DType::kF32 && t != DType::kBF16 && t != DType::kI32)
    throw Error(Errc::kNotSupported, std::string("tensor dtype ") + dtype_name(t) +
                                         " (supported: f32, bf16, i32)");
}
// 64-byte alignment keeps rows of vectorised loops on cache lines. Large
// blocks come from the cache when it has one of the size.
void* alloc_zeroed(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = nullptr;
  if (caching() && rounded >= kCacheMin) {
    BlockCache& c = block_cache();
    std::lock_guard<std::mutex> l(c.mu);
    auto it = c.blocks.find(rounded);
    if (it != c.blocks.end()) {
      p = it->second;
      c.blocks.erase(it);
      c.bytes -= ::malloc_usable_size(p);
    } else {
      trim_cache_locked(c, rounded);
      p = std::aligned_alloc(64, rounded);
      if (p) c.requested[p] = rounded;
    }
  } else {
    p = std::aligned_alloc(64, rounded);
  }
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
