// Sparse operands for Kernels::spmm: a matrix with many zeros (a ReLU's
// output, the gradient a ReLU masked, a Fashion-MNIST image batch) packed as
// SparseRows so the multiply does work only for its nonzeros.
//
//   const Kernels& kn = kernels();
//   SparseBuffer s;
//   if (use_spmm(kn, x, m, k, k, n))
//     kn.spmm(s.from_rows(kn, x, m, k, k), n, w, n, 0.f, y, n, &ep);
#pragma once
#include <cstdint>
#include <vector>

#include "nn/kernels.hpp"

namespace dnnlab::nn {

// Whether the row-major m x k matrix a (row stride lda) has at most
// max_density * m * k nonzeros. Stops counting once it has more.
bool sparser_than(const float* a, int m, int k, int lda, float max_density);

// Whether spmm should replace sgemm on this kernel table for a product whose
// sparse operand would be a, with n columns of output. Below kSpmmMinN
// columns (a classifier's output layer) the product is too small to repay
// building the sparse form.
constexpr int kSpmmMinN = 32;
inline bool use_spmm(const Kernels& kn, const float* a, int m, int k, int lda, int n) {
  return kn.spmm_max_density > 0.f && n >= kSpmmMinN && m > 0 && k > 0 &&
         sparser_than(a, m, k, lda, kn.spmm_max_density);
}

// Owns the arrays of one SparseRows, reused from call to call.
class SparseBuffer {
 public:
  // S = A, the m x k row-major matrix a, without its zeros (-0 included),
  // built with kn's compress_rows.
  const SparseRows& from_rows(const Kernels& kn, const float* a, int m, int k, int lda);
  // S = A^T: row p of S holds the nonzeros of column p of A (A is
  // transposed with kn, then compressed by rows).
  const SparseRows& from_cols(const Kernels& kn, const float* a, int m, int k, int lda);

 private:
  void reserve(int rows, int stride);
  std::vector<int32_t> nnz_, idx_;
  std::vector<float> val_, at_;
  SparseRows s_;
};

}  // namespace dnnlab::nn
