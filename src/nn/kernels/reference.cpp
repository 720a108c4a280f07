// The scalar reference kernels: plain, obviously-correct loops that every
// SIMD target is tested against. Speed does not matter here; clarity does.
#include <cmath>

#include "nn/kernels.hpp"
#include "nn/kernels/targets.hpp"

namespace dnnlab::nn {

const char* act_name(Act a) {
  switch (a) {
    case Act::kIdentity:
      return "identity";
    case Act::kRelu:
      return "relu";
    case Act::kLeakyRelu:
      return "leaky_relu";
    case Act::kElu:
      return "elu";
    case Act::kTanh:
      return "tanh";
    case Act::kSigmoid:
      return "sigmoid";
    case Act::kCount:
      break;
  }
  return "unknown";
}

namespace kernels_detail {

float ref_act(Act act, float alpha, float x) {
  switch (act) {
    case Act::kIdentity:
      return x;
    case Act::kRelu:
      return x > 0.f ? x : 0.f;
    case Act::kLeakyRelu:
      return x > 0.f ? x : alpha * x;
    case Act::kElu:
      return x > 0.f ? x : alpha * std::expm1(x);
    case Act::kTanh:
      return std::tanh(x);
    case Act::kSigmoid:
      return 1.f / (1.f + std::exp(-x));
    case Act::kCount:
      break;
  }
  return x;
}

// The derivative expressed through the output y = act(x).
float ref_act_grad(Act act, float alpha, float y) {
  switch (act) {
    case Act::kIdentity:
      return 1.f;
    case Act::kRelu:
      return y > 0.f ? 1.f : 0.f;
    case Act::kLeakyRelu:
      return y > 0.f ? 1.f : alpha;
    case Act::kElu:
      return y > 0.f ? 1.f : y + alpha;
    case Act::kTanh:
      return 1.f - y * y;
    case Act::kSigmoid:
      return y * (1.f - y);
    case Act::kCount:
      break;
  }
  return 1.f;
}

namespace {

void ref_sgemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc, const Epilogue* ep) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      // Accumulate in double so the reference is more accurate than any
      // target it judges.
      double acc = 0.0;
      for (int p = 0; p < k; ++p) {
        float av = ta == Trans::kNo ? a[size_t(i) * lda + p] : a[size_t(p) * lda + i];
        float bv = tb == Trans::kNo ? b[size_t(p) * ldb + j] : b[size_t(j) * ldb + p];
        acc += double(av) * double(bv);
      }
      float& cij = c[size_t(i) * ldc + j];
      // beta == 0 must not read C: it may hold NaN from an uninitialized buffer.
      float v = alpha * float(acc) + (beta == 0.f ? 0.f : beta * cij);
      if (ep) {
        if (ep->bias) v += ep->bias[j];
        v = ref_act(ep->act, ep->alpha, v);
      }
      cij = v;
    }
  }
}

void ref_spmm(const SparseRows& s, int n, const float* b, int ldb, float beta, float* c, int ldc,
              const Epilogue* ep) {
  for (int i = 0; i < s.rows; ++i) {
    const size_t row = size_t(i) * s.stride;
    for (int j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int e = 0; e < s.nnz[i]; ++e)
        acc += double(s.val[row + e]) * double(b[size_t(s.idx[row + e]) * ldb + j]);
      float& cij = c[size_t(i) * ldc + j];
      float v = float(acc) + (beta == 0.f ? 0.f : beta * cij);
      if (ep) {
        if (ep->bias) v += ep->bias[j];
        v = ref_act(ep->act, ep->alpha, v);
      }
      cij = v;
    }
  }
}

}  // namespace

// Branch-free: every entry is written and the count advances past nonzeros
// only (for a ReLU's output a branch would be a coin flip per element).
void compress_rows_scalar(const float* a, int m, int k, int lda, int32_t* nnz, int32_t* idx,
                          float* val, int stride) {
  for (int i = 0; i < m; ++i) {
    const float* row = a + size_t(i) * lda;
    int32_t* ri = idx + size_t(i) * stride;
    float* rv = val + size_t(i) * stride;
    int c = 0;
    for (int p = 0; p < k; ++p) {
      ri[c] = p;
      rv[c] = row[p];
      c += row[p] != 0.f;
    }
    nnz[i] = c;
  }
}

namespace {

void ref_transpose(const float* a, int rows, int cols, int lda, float* out, int ldo) {
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) out[size_t(j) * ldo + i] = a[size_t(i) * lda + j];
  }
}

void ref_act_forward(Act act, float alpha, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = ref_act(act, alpha, x[i]);
}

void ref_act_backward(Act act, float alpha, const float* y, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = dy[i] * ref_act_grad(act, alpha, y[i]);
}

void ref_col_sum(const float* a, int m, int n, int lda, float* out, bool accumulate) {
  for (int j = 0; j < n; ++j) {
    float s = accumulate ? out[j] : 0.f;
    for (int i = 0; i < m; ++i) s += a[size_t(i) * lda + j];
    out[j] = s;
  }
}

void ref_sgd_step(float* w, const float* g, float* v, size_t n, const SgdParams& p) {
  for (size_t i = 0; i < n; ++i) {
    float gi = g[i] + p.weight_decay * w[i];
    float d = gi;
    if (p.momentum != 0.f) {
      v[i] = p.momentum * v[i] + gi;
      d = p.nesterov ? gi + p.momentum * v[i] : v[i];
    }
    w[i] -= p.lr * d;
  }
}

void ref_adam_step(float* w, const float* g, float* m, float* v, size_t n, const AdamParams& p) {
  const double t = double(p.step);
  const float bc1 = float(1.0 - std::pow(double(p.beta1), t));
  const float bc2 = float(1.0 - std::pow(double(p.beta2), t));
  for (size_t i = 0; i < n; ++i) {
    float gi = g[i];
    if (p.decoupled) {
      w[i] -= p.lr * p.weight_decay * w[i];
    } else {
      gi += p.weight_decay * w[i];
    }
    m[i] = p.beta1 * m[i] + (1.f - p.beta1) * gi;
    v[i] = p.beta2 * v[i] + (1.f - p.beta2) * gi * gi;
    float mhat = m[i] / bc1;
    float vhat = v[i] / bc2;
    w[i] -= p.lr * mhat / (std::sqrt(vhat) + p.eps);
  }
}

}  // namespace

// spmm_max_density 0: layers on the reference table always run sgemm, so
// tests comparing a target with it compare the sparse path with the dense.
const Kernels kScalarKernels = {
    "scalar",      ref_sgemm,       ref_spmm,         0.f,         compress_rows_scalar,
    ref_transpose, ref_act_forward, ref_act_backward, ref_col_sum, ref_sgd_step,
    ref_adam_step};

}  // namespace kernels_detail

const Kernels& reference_kernels() {
  return kernels_detail::kScalarKernels;
}

}  // namespace dnnlab::nn
