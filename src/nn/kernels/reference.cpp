// The scalar reference kernels: plain, obviously-correct loops that every
// SIMD target is tested against. Speed does not matter here; clarity does.
#include <algorithm>
#include <cmath>
#include <vector>

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

// Convolution and pooling as direct loops over the definition, accumulating
// in double: no im2col, no GEMM, so a bug in either shows as a mismatch.
void ref_conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias,
                        Act act, float alpha, float* y) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  for (int n = 0; n < s.n; ++n) {
    for (int o = 0; o < s.k; ++o) {
      for (int oh = 0; oh < oh_n; ++oh) {
        for (int ow = 0; ow < ow_n; ++ow) {
          double acc = bias ? double(bias[o]) : 0.0;
          for (int c = 0; c < s.c; ++c) {
            for (int i = 0; i < s.kh; ++i) {
              const int ih = oh * s.sh - s.ph + i;
              if (ih < 0 || ih >= s.h) continue;
              for (int j = 0; j < s.kw; ++j) {
                const int iw = ow * s.sw - s.pw + j;
                if (iw < 0 || iw >= s.w) continue;
                acc += double(w[((size_t(o) * s.c + c) * s.kh + i) * s.kw + j]) *
                       double(x[((size_t(n) * s.c + c) * s.h + ih) * s.w + iw]);
              }
            }
          }
          y[((size_t(n) * s.k + o) * oh_n + oh) * ow_n + ow] = ref_act(act, alpha, float(acc));
        }
      }
    }
  }
}

void ref_conv2d_backward_data(const ConvShape& s, const float* w, const float* dy, float* dx) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  std::vector<double> acc(size_t(s.n) * s.c * s.h * s.w, 0.0);
  for (int n = 0; n < s.n; ++n) {
    for (int o = 0; o < s.k; ++o) {
      for (int oh = 0; oh < oh_n; ++oh) {
        for (int ow = 0; ow < ow_n; ++ow) {
          const double g = dy[((size_t(n) * s.k + o) * oh_n + oh) * ow_n + ow];
          for (int c = 0; c < s.c; ++c) {
            for (int i = 0; i < s.kh; ++i) {
              const int ih = oh * s.sh - s.ph + i;
              if (ih < 0 || ih >= s.h) continue;
              for (int j = 0; j < s.kw; ++j) {
                const int iw = ow * s.sw - s.pw + j;
                if (iw < 0 || iw >= s.w) continue;
                acc[((size_t(n) * s.c + c) * s.h + ih) * s.w + iw] +=
                    g * double(w[((size_t(o) * s.c + c) * s.kh + i) * s.kw + j]);
              }
            }
          }
        }
      }
    }
  }
  for (size_t q = 0; q < acc.size(); ++q) dx[q] = float(acc[q]);
}

void ref_conv2d_backward_filter(const ConvShape& s, const float* x, const float* dy, float* dw,
                                float* db, bool accumulate) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  for (int o = 0; o < s.k; ++o) {
    for (int c = 0; c < s.c; ++c) {
      for (int i = 0; i < s.kh; ++i) {
        for (int j = 0; j < s.kw; ++j) {
          double acc = 0.0;
          for (int n = 0; n < s.n; ++n) {
            for (int oh = 0; oh < oh_n; ++oh) {
              const int ih = oh * s.sh - s.ph + i;
              if (ih < 0 || ih >= s.h) continue;
              for (int ow = 0; ow < ow_n; ++ow) {
                const int iw = ow * s.sw - s.pw + j;
                if (iw < 0 || iw >= s.w) continue;
                acc += double(dy[((size_t(n) * s.k + o) * oh_n + oh) * ow_n + ow]) *
                       double(x[((size_t(n) * s.c + c) * s.h + ih) * s.w + iw]);
              }
            }
          }
          float& out = dw[((size_t(o) * s.c + c) * s.kh + i) * s.kw + j];
          out = accumulate ? out + float(acc) : float(acc);
        }
      }
    }
    if (db) {
      double acc = 0.0;
      for (int n = 0; n < s.n; ++n) {
        for (int q = 0; q < oh_n * ow_n; ++q) acc += dy[(size_t(n) * s.k + o) * oh_n * ow_n + q];
      }
      db[o] = accumulate ? db[o] + float(acc) : float(acc);
    }
  }
}

void ref_pool2d_forward(Pool kind, const PoolShape& s, const float* x, float* y, int32_t* argmax) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane) {
    const float* xp = x + plane * s.h * s.w;
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        double sum = 0.0;
        int best = -1;
        for (int i = 0; i < s.kh; ++i) {
          for (int j = 0; j < s.kw; ++j) {
            const int ih = oh * s.sh - s.ph + i, iw = ow * s.sw - s.pw + j;
            if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
            const int q = ih * s.w + iw;
            sum += xp[q];
            if (best < 0 || xp[q] > xp[best]) best = q;  // the first of equals wins
          }
        }
        const size_t out = plane * oh_n * ow_n + size_t(oh) * ow_n + ow;
        if (kind == Pool::kMax) {
          y[out] = xp[best];
          argmax[out] = best;
        } else {
          y[out] = float(sum / (s.kh * s.kw));
        }
      }
    }
  }
}

void ref_pool2d_backward(Pool kind, const PoolShape& s, const float* dy, const int32_t* argmax,
                         float* dx) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  std::vector<double> acc(size_t(s.h) * s.w);
  for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        const size_t out = plane * oh_n * ow_n + size_t(oh) * ow_n + ow;
        if (kind == Pool::kMax) {
          acc[argmax[out]] += dy[out];
          continue;
        }
        for (int i = 0; i < s.kh; ++i) {
          for (int j = 0; j < s.kw; ++j) {
            const int ih = oh * s.sh - s.ph + i, iw = ow * s.sw - s.pw + j;
            if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
            acc[size_t(ih) * s.w + iw] += double(dy[out]) / (s.kh * s.kw);
          }
        }
      }
    }
    for (size_t q = 0; q < acc.size(); ++q) dx[plane * s.h * s.w + q] = float(acc[q]);
  }
}

}  // namespace

// spmm_max_density 0: layers on the reference table always run sgemm, so
// tests comparing a target with it compare the sparse path with the dense.
const Kernels kScalarKernels = {"scalar",
                                ref_sgemm,
                                ref_spmm,
                                0.f,
                                compress_rows_scalar,
                                ref_transpose,
                                ref_act_forward,
                                ref_act_backward,
                                ref_col_sum,
                                ref_sgd_step,
                                ref_adam_step,
                                ref_conv2d_forward,
                                ref_conv2d_backward_data,
                                ref_conv2d_backward_filter,
                                ref_pool2d_forward,
                                ref_pool2d_backward,
                                0};  // the reference kernels pack nothing

}  // namespace kernels_detail

const Kernels& reference_kernels() {
  return kernels_detail::kScalarKernels;
}

}  // namespace dnnlab::nn
