#include "nn/sparse.hpp"

namespace dnnlab::nn {

bool sparser_than(const float* a, int m, int k, int lda, float max_density) {
  const int64_t limit = int64_t(double(max_density) * double(m) * double(k));
  int64_t nz = 0;
  for (int i = 0; i < m; ++i) {
    const float* row = a + int64_t(i) * lda;
    int c = 0;  // per row in int: the compiler vectorizes the count
    for (int p = 0; p < k; ++p) c += row[p] != 0.f;
    nz += c;
    if (nz > limit) return false;
  }
  return true;
}

void SparseBuffer::reserve(int rows, int stride) {
  const size_t cells = size_t(rows) * size_t(stride);
  if (nnz_.size() < size_t(rows)) nnz_.resize(rows);
  if (idx_.size() < cells) {
    idx_.resize(cells);
    val_.resize(cells);
  }
  s_.stride = stride;
  s_.nnz = nnz_.data();
  s_.idx = idx_.data();
  s_.val = val_.data();
}

const SparseRows& SparseBuffer::from_rows(const Kernels& kn, const float* a, int m, int k,
                                          int lda) {
  reserve(m, k);
  s_.rows = m;
  s_.cols = k;
  kn.compress_rows(a, m, k, lda, nnz_.data(), idx_.data(), val_.data(), k);
  return s_;
}

const SparseRows& SparseBuffer::from_cols(const Kernels& kn, const float* a, int m, int k,
                                          int lda) {
  if (at_.size() < size_t(m) * k) at_.resize(size_t(m) * k);
  kn.transpose(a, m, k, lda, at_.data(), m);
  reserve(k, m);
  s_.rows = k;
  s_.cols = m;
  kn.compress_rows(at_.data(), k, m, m, nnz_.data(), idx_.data(), val_.data(), m);
  return s_;
}

}  // namespace dnnlab::nn
