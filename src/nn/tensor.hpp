// Tensor: owning, float32, 64-byte aligned, up to 4 dimensions, row-major.
// TensorView: a non-owning window (e.g. a batch of rows) over the same memory.
#pragma once
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>

namespace dnnlab::nn {

inline constexpr int kMaxRank = 4;
inline constexpr size_t kAlign = 64;

// Dimensions of a tensor. The first dimension of an activation is the batch.
struct Shape {
  std::array<int64_t, kMaxRank> d{0, 0, 0, 0};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    assert(dims.size() <= kMaxRank);
    for (int64_t x : dims) d[rank++] = x;
  }
  int64_t operator[](int i) const { return d[i]; }
  int64_t& operator[](int i) { return d[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= d[i];
    return rank == 0 ? 0 : n;
  }
  // Elements per item of the leading (batch) dimension.
  int64_t row_size() const {
    int64_t n = 1;
    for (int i = 1; i < rank; ++i) n *= d[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank; ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "]";
  }
};

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

class TensorView {
 public:
  TensorView() = default;
  TensorView(float* data, Shape shape) : data_(data), shape_(shape) {}
  float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  int64_t rows() const { return shape_.rank ? shape_[0] : 0; }
  int64_t cols() const { return shape_.row_size(); }
  float& operator[](int64_t i) const { return data_[i]; }
  // Rows [begin, begin+count) of the leading dimension; no copy.
  TensorView rows(int64_t begin, int64_t count) const {
    Shape s = shape_;
    s[0] = count;
    return TensorView(data_ + begin * shape_.row_size(), s);
  }
  TensorView reshaped(Shape s) const {
    assert(s.numel() == numel());
    return TensorView(data_, s);
  }
  void fill(float v) const {
    for (int64_t i = 0, n = numel(); i < n; ++i) data_[i] = v;
  }

 private:
  float* data_ = nullptr;
  Shape shape_;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape) { resize(shape); }
  // A tensor whose values the caller is about to write, every one of them:
  // not zeroed first (a frame decoded, a copy). Only the alignment padding
  // past the last value is zeroed.
  static Tensor uninitialized(Shape shape) {
    Tensor t;
    t.grow(shape.numel(), /*zero=*/false);
    t.shape_ = shape;
    return t;
  }
  Tensor(const Tensor& o) {
    grow(o.numel(), /*zero=*/false);
    shape_ = o.shape_;
    if (numel()) std::memcpy(data(), o.data(), sizeof(float) * numel());
  }
  Tensor& operator=(const Tensor& o) {
    if (this != &o) {
      resize(o.shape_);
      if (numel()) std::memcpy(data(), o.data(), sizeof(float) * numel());
    }
    return *this;
  }
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  // Reallocates only when the capacity is too small; contents are zeroed on growth.
  void resize(Shape shape) {
    grow(shape.numel(), /*zero=*/true);
    shape_ = shape;
  }
  float* data() { return buf_.get(); }
  const float* data() const { return buf_.get(); }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  float& operator[](int64_t i) { return buf_.get()[i]; }
  float operator[](int64_t i) const { return buf_.get()[i]; }
  TensorView view() const { return TensorView(buf_.get(), shape_); }
  operator TensorView() const { return view(); }
  void zero() {
    if (numel()) std::memset(data(), 0, sizeof(float) * numel());
  }

 private:
  // Room for n values; on growth, zeroed (or only its padding past n).
  void grow(int64_t n, bool zero) {
    if (n <= capacity_) return;
    const size_t used = sizeof(float) * static_cast<size_t>(n);
    const size_t bytes = (used + kAlign - 1) / kAlign * kAlign;
    float* p = static_cast<float*>(std::aligned_alloc(kAlign, bytes));
    if (!p) throw std::bad_alloc();
    if (zero)
      std::memset(p, 0, bytes);
    else
      std::memset(reinterpret_cast<char*>(p) + used, 0, bytes - used);
    buf_.reset(p);
    capacity_ = n;
  }

  std::unique_ptr<float, AlignedFree> buf_;
  int64_t capacity_ = 0;
  Shape shape_;
};

}  // namespace dnnlab::nn
