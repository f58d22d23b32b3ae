// braid::Tensor — a contiguous n-dimensional array.
//
// Compute is f32; bf16 is a storage/communication format (convert with
// `to(DType::kBF16)` / `to(DType::kF32)`); i32 holds token ids and labels.
// A tensor either owns its buffer (`Tensor(shape)`) or is a view of memory
// that someone else owns (`Tensor::view`); views never free anything.
//
// Buffers are reused: `resize(shape)` keeps the allocation when the new
// shape fits in the current capacity, so a training loop that sees the same
// shapes every step allocates nothing after the first step.
//
// Shape mismatches throw braid::Error(kInvalidArgument) whose message prints
// both shapes, e.g. "linear fc1: input [32, 700] vs expected [*, 784]".
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "braid/dtype.h"

namespace braid {

using Shape = std::vector<int64_t>;

// "[2, 3, 4]"
std::string shape_str(const Shape& s);
// Product of the dimensions (1 for a scalar shape []). Throws on negatives.
int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  // Owning, zero-filled. dtype: kF32, kBF16 or kI32.
  explicit Tensor(Shape shape, DType dtype = DType::kF32);
  Tensor(std::initializer_list<int64_t> shape, DType dtype = DType::kF32)
      : Tensor(Shape(shape), dtype) {}

  // A non-owning view of `data` (which must outlive the view).
  static Tensor view(void* data, Shape shape, DType dtype = DType::kF32);

  // Copies are deep (a copy of a view owns its data); moves are cheap.
  Tensor(const Tensor& o);
  Tensor& operator=(const Tensor& o);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const;  // negative i counts from the end
  int ndim() const { return int(shape_.size()); }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }
  bool empty() const { return numel_ == 0; }
  bool owning() const { return owned_ != nullptr; }

  // Typed access; throws when the dtype does not match.
  float* f32();
  const float* f32() const;
  uint16_t* bf16();
  const uint16_t* bf16() const;
  int32_t* i32();
  const int32_t* i32() const;
  void* raw() { return data_; }
  const void* raw() const { return data_; }

  // Changes the shape. Keeps the buffer (and its contents, reinterpreted)
  // when the new size fits in the capacity; otherwise allocates a new
  // zeroed one. Views may only shrink. Same dtype unless given.
  void resize(const Shape& shape);
  void resize(const Shape& shape, DType dtype);
  // Same data, new shape of the same numel (throws naming both shapes).
  void reshape(const Shape& shape);
  // Frees the buffer of an owning tensor (shape becomes [0]).
  void release();

  void zero();
  void fill(float v);
  // Copies values (same numel and dtype required; shapes may differ).
  void copy_from(const Tensor& src);
  // A converted copy: f32 <-> bf16 (round to nearest even); same dtype: copy.
  Tensor to(DType dtype) const;

  // Throws Error(kInvalidArgument) "<what>: got [..] vs expected [..]"
  // unless shapes are equal. A -1 in `expected` matches any size.
  void check_shape(const Shape& expected, const std::string& what) const;

 private:
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  void* data_ = nullptr;
  size_t capacity_ = 0;  // bytes, owning only
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> owned_;
};

// Tensor storage of this process, in bytes: allocated now, and the most at
// any moment since the start or the last reset_tensor_peak_bytes() (as
// torch.cuda.max_memory_allocated counts a device's). It is what a model's
// weights, gradients, optimizer state and activations take — what the
// planner's memory model predicts (braid/plan_cost.h) — without the
// program, the BLAS's buffers or communication rings. Thread-safe.
size_t tensor_bytes_in_use();
size_t tensor_peak_bytes();
void reset_tensor_peak_bytes();
// Freed buffers of 64 KiB and more that the process keeps for the next
// tensor of the same size (a step's tensors come back at the same sizes;
// handing them back to the kernel would fault every page in again). Not
// counted in use; cached and in use together stay within the peak above.
// Always 0 under AddressSanitizer and ThreadSanitizer, which see every
// buffer freed, and under BRAID_TENSOR_CACHE=0.
size_t tensor_cached_bytes();

// Storage a tensor views but that was not allocated as a tensor (data
// parallelism's gradient buckets in shared memory) counts in the figures
// above while a CountedStorage for its bytes lives. Move-only.
class CountedStorage {
 public:
  CountedStorage() = default;
  explicit CountedStorage(size_t bytes);
  CountedStorage(CountedStorage&& o) noexcept : bytes_(o.bytes_) { o.bytes_ = 0; }
  CountedStorage& operator=(CountedStorage&& o) noexcept;
  CountedStorage(const CountedStorage&) = delete;
  CountedStorage& operator=(const CountedStorage&) = delete;
  ~CountedStorage();

 private:
  size_t bytes_ = 0;
};

// Throws Error(kInvalidArgument) naming both shapes when a != b.
void check_same_shape(const Tensor& a, const Tensor& b, const std::string& what);

// The rows of x read as [rows, width]. Throws Error(kInvalidArgument)
// "<kind> <name>: input [..] vs expected [*, width]" when x's last
// dimension is not `width` (or x has none).
int64_t rows_of_width(const Tensor& x, int64_t width, const char* kind, const std::string& name);

}  // namespace braid
