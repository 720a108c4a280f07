// The compute kernels behind every layer and optimizer, as one table of
// function pointers per target (ggml-backend style). kernels() picks the best
// table for this CPU at run time; reference_kernels() is the plain scalar
// code every fast path is tested against.
//
//   const auto& k = dnnlab::nn::kernels();
//   // Y[m,n] = relu(X[m,k] * W[k,n] + b[n])
//   dnnlab::nn::Epilogue ep{b, dnnlab::nn::Act::kRelu};
//   k.sgemm(Trans::kNo, Trans::kNo, m, n, kk, 1.f, X, kk, W, n, 0.f, Y, n, &ep);
//
//   // NCHW convolution: 64 images of 3x32x32, 32 filters of 5x5, padding 2.
//   dnnlab::nn::ConvShape cs{64, 3, 32, 32, 32, 5, 5, 1, 1, 2, 2};
//   k.conv2d_forward(cs, x, w, bias, Act::kRelu, 0.f, y);  // y: [64, 32, 32, 32]
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace dnnlab::nn {

// Activations that can be fused into a matrix multiply's epilogue. Their
// derivatives are computed from the output y alone, so backward needs no
// copy of the pre-activation.
enum class Act : uint8_t { kIdentity, kRelu, kLeakyRelu, kElu, kTanh, kSigmoid, kCount };
static_assert(static_cast<int>(Act::kCount) == 6, "update act_name() and every kernel table");
const char* act_name(Act a);

enum class Trans : uint8_t { kNo, kYes };

// Applied to C after C = alpha*op(A)*op(B) + beta*C: C[i,j] = act(C[i,j] + bias[j]).
struct Epilogue {
  const float* bias = nullptr;  // length n, or null
  Act act = Act::kIdentity;
  float alpha = 0.f;  // LeakyReLU slope / ELU alpha
};

// A sparse matrix as padded rows (ELLPACK-like): row r's nonzeros are
// val[r * stride + e] at columns idx[r * stride + e], e < nnz[r], columns
// ascending. Built by SparseBuffer (nn/sparse.hpp) with compress_rows below.
struct SparseRows {
  int rows = 0, cols = 0, stride = 0;
  const int32_t* nnz = nullptr;
  const int32_t* idx = nullptr;
  const float* val = nullptr;
};

struct SgdParams {
  float lr = 0.01f, momentum = 0.f, weight_decay = 0.f;
  bool nesterov = false;
};
struct AdamParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.f;
  bool decoupled = false;  // AdamW
  int64_t step = 1;        // 1-based step count, for bias correction
};

// NCHW convolution geometry (dilation 1, groups 1): x [n, c, h, w], filters
// w [k, c, kh, kw], y [n, k, out_h(), out_w()]. Padding is zeros.
struct ConvShape {
  int n = 1, c = 1, h = 1, w = 1;  // input batch, channels, height, width
  int k = 1;                       // output channels (filters)
  int kh = 1, kw = 1;              // kernel
  int sh = 1, sw = 1;              // stride
  int ph = 0, pw = 0;              // zero padding on each side
  int out_h() const { return (h + 2 * ph - kh) / sh + 1; }
  int out_w() const { return (w + 2 * pw - kw) / sw + 1; }
  // Rows of the im2col matrix: the fan-in of one output.
  int patch() const { return c * kh * kw; }
};

// NCHW pooling geometry: x [n, c, h, w] -> y [n, c, out_h(), out_w()].
// Padded positions never win a max; an average divides by kh * kw, padding
// included (PyTorch's count_include_pad default). GlobalAvgPool is kAvg with
// the window the whole plane.
enum class Pool : uint8_t { kMax, kAvg };
struct PoolShape {
  int n = 1, c = 1, h = 1, w = 1;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  int out_h() const { return (h + 2 * ph - kh) / sh + 1; }
  int out_w() const { return (w + 2 * pw - kw) / sw + 1; }
};

struct Kernels {
  const char* name;  // "avx512", "avx2", "wasm-simd128", "scalar"

  // Row-major C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, then the
  // epilogue (if not null). lda/ldb/ldc are row strides of A, B, C as stored.
  void (*sgemm)(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc, const Epilogue* ep);

  // Row-major C[m,n] = S[m,k] * B[k,n] + beta * C, then the epilogue, with S
  // sparse (m = s.rows, k = s.cols): the work is nnz * n multiply-adds, not
  // m * k * n. Each output is summed over S's nonzeros in column order; the
  // result may round differently from sgemm on the same matrix made dense.
  void (*spmm)(const SparseRows& s, int n, const float* b, int ldb, float beta, float* c, int ldc,
               const Epilogue* ep);
  // The density (nonzeros / elements) below which spmm beats sgemm on this
  // target; 0 where sgemm is always used.
  float spmm_max_density;

  // The nonzeros of each row of the m x k matrix a, in column order:
  // row i's go to val/idx[i * stride ..], their count to nnz[i] (stride >= k;
  // entries past the count may be overwritten). -0 counts as zero, NaN not.
  void (*compress_rows)(const float* a, int m, int k, int lda, int32_t* nnz, int32_t* idx,
                        float* val, int stride);
  // out[j * ldo + i] = a[i * lda + j] for i < rows, j < cols.
  void (*transpose)(const float* a, int rows, int cols, int lda, float* out, int ldo);

  // y = act(x), elementwise (x may equal y).
  void (*act_forward)(Act act, float alpha, const float* x, float* y, size_t n);
  // dx = dy * act'(.) computed from the output y (dx may equal dy).
  void (*act_backward)(Act act, float alpha, const float* y, const float* dy, float* dx, size_t n);
  // out[j] (+)= sum_i a[i*lda + j] for i < m, j < n: the bias gradient.
  void (*col_sum)(const float* a, int m, int n, int lda, float* out, bool accumulate);

  // One fused optimizer step over n parameters. v / m are optimizer state.
  void (*sgd_step)(float* w, const float* g, float* v, size_t n, const SgdParams& p);
  void (*adam_step)(float* w, const float* g, float* m, float* v, size_t n, const AdamParams& p);

  // Convolution (see ConvShape). Work is split over images (and, for the
  // filter gradient, fixed image chunks) through nn::parallel_for
  // (nn/parallel.hpp); the split never depends on the thread count, so the
  // results are the same bits for any number of threads.
  // y = act(conv(x, w) + bias[k]); bias may be null.
  void (*conv2d_forward)(const ConvShape& s, const float* x, const float* w, const float* bias,
                         Act act, float alpha, float* y);
  // dx = the gradient of the input given dy (already through the activation).
  void (*conv2d_backward_data)(const ConvShape& s, const float* w, const float* dy, float* dx);
  // dw (+)= the filter gradient, db (+)= sum of dy per channel (db may be null).
  void (*conv2d_backward_filter)(const ConvShape& s, const float* x, const float* dy, float* dw,
                                 float* db, bool accumulate);
  // Pooling (see PoolShape). A max pool writes each output's winning input
  // index within its plane (h * w + col) to argmax; an average pool ignores it.
  void (*pool2d_forward)(Pool kind, const PoolShape& s, const float* x, float* y, int32_t* argmax);
  // dx = the input gradient (overwritten), from dy and the forward's argmax.
  void (*pool2d_backward)(Pool kind, const PoolShape& s, const float* dy, const int32_t* argmax,
                          float* dx);
  // The packing buffer sgemm keeps per thread (its block sizes), in floats:
  // memory a training process holds whatever its model (Model::estimate_memory).
  size_t gemm_scratch_floats;
};

// The best table this CPU supports (or the one named by select_kernels()).
const Kernels& kernels();
const Kernels& reference_kernels();
// Forces a target by name ("scalar", "avx2", "avx512", "auto"); returns false
// if it is unknown or unsupported here. For tests and benchmarks.
bool select_kernels(std::string_view name);
// The targets select_kernels() accepts in this build on this CPU, best
// first, "auto" not included: {"avx512", "avx2", "scalar"} on a Zen 4.
std::vector<std::string_view> kernel_targets();

}  // namespace dnnlab::nn
