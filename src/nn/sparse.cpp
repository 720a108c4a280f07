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

// Both builders write every entry and advance only past nonzeros: no branch
// on the data, which for a ReLU's output would be a coin flip per element.
const SparseRows& SparseBuffer::from_rows(const float* a, int m, int k, int lda) {
  reserve(m, k);
  s_.rows = m;
  s_.cols = k;
  for (int i = 0; i < m; ++i) {
    const float* row = a + int64_t(i) * lda;
    int32_t* idx = idx_.data() + size_t(i) * k;
    float* val = val_.data() + size_t(i) * k;
    int c = 0;
    for (int p = 0; p < k; ++p) {
      idx[c] = p;
      val[c] = row[p];
      c += row[p] != 0.f;
    }
    nnz_[i] = c;
  }
  return s_;
}

const SparseRows& SparseBuffer::from_cols(const float* a, int m, int k, int lda) {
  reserve(k, m);
  s_.rows = k;
  s_.cols = m;
  // Column by column: the m rows' cache lines stay in L1 across the 16
  // columns each holds, and the writes are sequential.
  for (int p = 0; p < k; ++p) {
    int32_t* idx = idx_.data() + size_t(p) * m;
    float* val = val_.data() + size_t(p) * m;
    int c = 0;
    for (int i = 0; i < m; ++i) {
      const float x = a[int64_t(i) * lda + p];
      idx[c] = i;
      val[c] = x;
      c += x != 0.f;
    }
    nnz_[p] = c;
  }
  return s_;
}

}  // namespace dnnlab::nn
