// Every kernel of every target this CPU supports, against the scalar
// reference, on awkward shapes (1, 7, 33, 257, padded strides, all transposes).
#include "nn/kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "nn/sparse.hpp"

namespace dnnlab::nn {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

constexpr Act kAllActs[] = {Act::kIdentity, Act::kRelu, Act::kLeakyRelu,
                            Act::kElu,      Act::kTanh, Act::kSigmoid};
static_assert(std::size(kAllActs) == size_t(Act::kCount));

float act_alpha(Act a) {
  return a == Act::kLeakyRelu ? 0.1f : a == Act::kElu ? 1.3f : 0.f;
}

// Parameterized by target name; a target this CPU lacks is skipped.
class KernelTarget : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!select_kernels(GetParam())) GTEST_SKIP() << GetParam() << " not supported here";
    k_ = &kernels();
    select_kernels("auto");
  }
  const Kernels* k_ = nullptr;
  const Kernels& ref_ = reference_kernels();
};

struct GemmCase {
  int m, n, k;
};

void check_gemm(const Kernels& fast, const Kernels& ref, Trans ta, Trans tb, GemmCase s,
                float alpha, float beta, const Epilogue* ep, std::mt19937& rng) {
  const int pad = 3;  // leading dimensions larger than the rows they hold
  const int a_rows = ta == Trans::kNo ? s.m : s.k, a_cols = ta == Trans::kNo ? s.k : s.m;
  const int b_rows = tb == Trans::kNo ? s.k : s.n, b_cols = tb == Trans::kNo ? s.n : s.k;
  const int lda = a_cols + pad, ldb = b_cols + pad, ldc = s.n + pad;
  auto a = random_vec(size_t(a_rows) * lda, rng);
  auto b = random_vec(size_t(b_rows) * ldb, rng);
  auto c0 = random_vec(size_t(s.m) * ldc, rng);
  // beta == 0 must not read C: poison it.
  if (beta == 0.f) std::fill(c0.begin(), c0.end(), std::numeric_limits<float>::quiet_NaN());
  auto c_ref = c0, c_got = c0;
  ref.sgemm(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, c_ref.data(), ldc,
            ep);
  fast.sgemm(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, c_got.data(), ldc,
             ep);
  // Rounding grows with k; the reference accumulates in double.
  const float tol = 2e-7f * float(s.k + 16);
  int bad = 0;
  for (int i = 0; i < s.m; ++i) {
    for (int j = 0; j < ldc; ++j) {
      const float r = c_ref[size_t(i) * ldc + j], g = c_got[size_t(i) * ldc + j];
      if (j >= s.n) {  // padding must be untouched
        if (!(std::isnan(r) && std::isnan(g)) && r != g) ++bad;
        continue;
      }
      if (!(std::fabs(r - g) <= tol * (1.f + std::fabs(r))) && bad++ < 3) {
        ADD_FAILURE() << fast.name << " ta=" << int(ta) << " tb=" << int(tb) << " m=" << s.m
                      << " n=" << s.n << " k=" << s.k << " beta=" << beta
                      << " act=" << (ep ? act_name(ep->act) : "none") << " at (" << i << "," << j
                      << "): ref " << r << " got " << g;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_P(KernelTarget, SgemmAllTransposesSmallShapes) {
  std::mt19937 rng(1);
  const int dims[] = {1, 7, 33};
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (int m : dims) {
        for (int n : dims) {
          for (int k : dims) {
            for (float beta : {0.f, 1.f}) {
              check_gemm(*k_, ref_, ta, tb, {m, n, k}, 1.f, beta, nullptr, rng);
            }
          }
        }
      }
    }
  }
}

TEST_P(KernelTarget, SgemmLargerAndMixedShapes) {
  std::mt19937 rng(2);
  const GemmCase cases[] = {{257, 33, 7},   {7, 257, 33},  {33, 7, 257},  {257, 257, 33},
                            {33, 257, 257}, {1, 257, 300}, {300, 1, 33},  {15, 65, 513},
                            {29, 96, 17},   {2, 784, 32},  {4, 100, 600}, {5, 40, 3},
                            {33, 40, 2},    {16, 33, 4},   {70, 65, 5},   {64, 64, 64}};
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (const GemmCase& s : cases) {
        for (float beta : {0.f, 1.f}) {
          check_gemm(*k_, ref_, ta, tb, s, beta == 0.f ? 1.f : 0.7f, beta, nullptr, rng);
        }
      }
    }
  }
}

TEST_P(KernelTarget, SgemmEpilogueEveryAct) {
  std::mt19937 rng(3);
  auto bias = random_vec(600, rng);
  const GemmCase cases[] = {{1, 7, 33},   {7, 33, 1},  {33, 257, 7}, {17, 40, 300},
                            {1, 33, 784}, {20, 17, 2}, {3, 50, 20}};
  for (Act act : kAllActs) {
    for (bool with_bias : {false, true}) {
      Epilogue ep{with_bias ? bias.data() : nullptr, act, act_alpha(act)};
      for (Trans ta : {Trans::kNo, Trans::kYes}) {
        for (Trans tb : {Trans::kNo, Trans::kYes}) {
          for (const GemmCase& s : cases) {
            for (float beta : {0.f, 1.f}) {
              check_gemm(*k_, ref_, ta, tb, s, 1.f, beta, &ep, rng);
            }
          }
        }
      }
    }
  }
}

TEST_P(KernelTarget, SgemmTrainingShapes) {
  std::mt19937 rng(4);
  std::vector<float> bias = random_vec(1024, rng);
  Epilogue relu{bias.data(), Act::kRelu, 0.f};
  // Batch-64 MLP 784-256-10: forward, dX = dY W^T, dW = X^T dY.
  check_gemm(*k_, ref_, Trans::kNo, Trans::kNo, {64, 256, 784}, 1.f, 0.f, &relu, rng);
  check_gemm(*k_, ref_, Trans::kNo, Trans::kYes, {64, 784, 256}, 1.f, 0.f, nullptr, rng);
  check_gemm(*k_, ref_, Trans::kYes, Trans::kNo, {784, 256, 64}, 1.f, 1.f, nullptr, rng);
  check_gemm(*k_, ref_, Trans::kNo, Trans::kNo, {64, 10, 256}, 1.f, 0.f, &relu, rng);
  check_gemm(*k_, ref_, Trans::kYes, Trans::kNo, {256, 10, 64}, 1.f, 0.f, nullptr, rng);
  check_gemm(*k_, ref_, Trans::kNo, Trans::kYes, {64, 256, 10}, 1.f, 0.f, nullptr, rng);
  // Batch 1.
  check_gemm(*k_, ref_, Trans::kNo, Trans::kNo, {1, 32, 784}, 1.f, 0.f, &relu, rng);
  check_gemm(*k_, ref_, Trans::kNo, Trans::kYes, {1, 784, 32}, 1.f, 0.f, nullptr, rng);
  check_gemm(*k_, ref_, Trans::kYes, Trans::kNo, {784, 32, 1}, 1.f, 1.f, nullptr, rng);
}

TEST_P(KernelTarget, SgemmZeroKAppliesBetaAndEpilogue) {
  std::mt19937 rng(5);
  auto bias = random_vec(33, rng);
  Epilogue ep{bias.data(), Act::kTanh, 0.f};
  check_gemm(*k_, ref_, Trans::kNo, Trans::kNo, {7, 33, 0}, 1.f, 0.5f, &ep, rng);
  check_gemm(*k_, ref_, Trans::kNo, Trans::kNo, {7, 33, 5}, 0.f, 0.f, &ep, rng);
}

void expect_close(const std::vector<float>& ref, const std::vector<float>& got, float tol,
                  const std::string& what) {
  ASSERT_EQ(ref.size(), got.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!(std::fabs(ref[i] - got[i]) <= tol * (1.f + std::fabs(ref[i]))) && bad++ < 3) {
      ADD_FAILURE() << what << " at " << i << ": ref " << ref[i] << " got " << got[i];
    }
  }
}

TEST_P(KernelTarget, ActivationsForwardAndBackward) {
  std::mt19937 rng(6);
  for (size_t n : {size_t(1), size_t(7), size_t(33), size_t(257), size_t(1000)}) {
    // Wide range, including values near 0 (expm1/tanh cancellation) and
    // saturation (exp overflow clamps).
    auto x = random_vec(n, rng, -12.f, 12.f);
    for (size_t i = 0; i < n; i += 3) x[i] *= 1e-3f;
    if (n > 5) x[5] = -100.f, x[4] = 100.f;
    auto dy = random_vec(n, rng);
    for (Act act : kAllActs) {
      const float al = act_alpha(act);
      const std::string what =
          std::string(k_->name) + " " + act_name(act) + " n=" + std::to_string(n);
      std::vector<float> y_ref(n), y_got(n);
      ref_.act_forward(act, al, x.data(), y_ref.data(), n);
      k_->act_forward(act, al, x.data(), y_got.data(), n);
      expect_close(y_ref, y_got, 2e-6f, what + " forward");
      auto inplace = x;
      k_->act_forward(act, al, inplace.data(), inplace.data(), n);
      expect_close(y_ref, inplace, 2e-6f, what + " forward in place");

      std::vector<float> dx_ref(n), dx_got(n);
      ref_.act_backward(act, al, y_ref.data(), dy.data(), dx_ref.data(), n);
      k_->act_backward(act, al, y_ref.data(), dy.data(), dx_got.data(), n);
      expect_close(dx_ref, dx_got, 1e-6f, what + " backward");
      auto dinplace = dy;
      k_->act_backward(act, al, y_ref.data(), dinplace.data(), dinplace.data(), n);
      expect_close(dx_ref, dinplace, 1e-6f, what + " backward in place");
    }
  }
}

// An m x k matrix (row stride ld) in which about `density` of the entries
// are nonzero; the zeros include -0.
std::vector<float> sparse_matrix(int m, int k, int ld, double density, std::mt19937& rng) {
  auto a = random_vec(size_t(m) * ld, rng);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (size_t i = 0; i < a.size(); ++i) {
    if (u(rng) >= density) a[i] = (i % 3 == 0) ? -0.f : 0.f;
  }
  return a;
}

TEST_P(KernelTarget, SpmmMatchesReferenceAndTheDenseProduct) {
  std::mt19937 rng(11);
  auto bias = random_vec(300, rng);
  const Epilogue relu{bias.data(), Act::kRelu, 0.f}, tanh_ep{bias.data(), Act::kTanh, 0.f};
  SparseBuffer sb;
  int cases = 0;
  for (int m : {1, 7, 64}) {
    for (int k : {1, 33, 256}) {
      for (int n : {1, 3, 4, 5, 17, 48, 49, 100, 257}) {
        for (double density : {0.0, 0.3, 1.0}) {
          const int lda = k + 2, ldb = n + 3, ldc = n + 3;
          auto a = sparse_matrix(m, k, lda, density, rng);
          const SparseRows& s = sb.from_rows(*k_, a.data(), m, k, lda);
          // B exactly as long as its last row needs: reading past it is a bug.
          auto b = random_vec(size_t(k - 1) * ldb + n, rng);
          for (float beta : {0.f, 0.5f}) {
            for (const Epilogue* ep : {static_cast<const Epilogue*>(nullptr), &relu, &tanh_ep}) {
              auto c0 = random_vec(size_t(m) * ldc, rng);
              if (beta == 0.f)
                std::fill(c0.begin(), c0.end(), std::numeric_limits<float>::quiet_NaN());
              auto c_ref = c0, c_got = c0, c_dense = c0;
              ref_.spmm(s, n, b.data(), ldb, beta, c_ref.data(), ldc, ep);
              k_->spmm(s, n, b.data(), ldb, beta, c_got.data(), ldc, ep);
              ref_.sgemm(Trans::kNo, Trans::kNo, m, n, k, 1.f, a.data(), lda, b.data(), ldb, beta,
                         c_dense.data(), ldc, ep);
              const float tol = 2e-7f * float(k + 16);
              int bad = 0;
              for (int i = 0; i < m; ++i) {
                for (int j = 0; j < ldc; ++j) {
                  const size_t at = size_t(i) * ldc + j;
                  const float r = c_ref[at], g = c_got[at], d = c_dense[at];
                  const bool ok = j >= n ? (std::isnan(r) && std::isnan(g)) || r == g
                                         : std::fabs(r - g) <= tol * (1.f + std::fabs(r)) &&
                                               std::fabs(r - d) <= tol * (1.f + std::fabs(d));
                  if (!ok && bad++ < 3) {
                    ADD_FAILURE() << k_->name << " spmm m=" << m << " n=" << n << " k=" << k
                                  << " density=" << density << " beta=" << beta
                                  << " act=" << (ep ? act_name(ep->act) : "none") << " at (" << i
                                  << "," << j << "): ref " << r << " got " << g << " dense " << d;
                  }
                }
              }
              EXPECT_EQ(bad, 0);
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 3 * 9 * 3 * 2 * 3);
}

TEST_P(KernelTarget, Transpose) {
  std::mt19937 rng(12);
  for (auto [rows, cols] : {std::pair{1, 1}, {3, 7}, {33, 65}, {256, 256}, {784, 10}, {10, 784}}) {
    const int lda = cols + 1, ldo = rows + 2;
    auto a = random_vec(size_t(rows) * lda, rng);
    std::vector<float> r(size_t(cols) * ldo, -7.f), g = r;
    ref_.transpose(a.data(), rows, cols, lda, r.data(), ldo);
    k_->transpose(a.data(), rows, cols, lda, g.data(), ldo);
    EXPECT_EQ(r, g) << k_->name << " " << rows << "x" << cols;
    EXPECT_EQ(r[size_t(cols - 1) * ldo + rows - 1], a[size_t(rows - 1) * lda + cols - 1]);
    EXPECT_EQ(r[rows], -7.f);  // the padding of out is untouched
  }
}

TEST_P(KernelTarget, SparseBufferHoldsExactlyTheNonzerosInOrder) {
  // 3 x 4, row stride 5 (the fifth column is padding and must be ignored).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> a = {0.f, 2.f, -0.f, 3.f, 9.f,  //
                                0.f, 0.f, 0.f,  0.f, 9.f,  //
                                4.f, nan, 5.f,  0.f, 9.f};
  SparseBuffer sb;
  const SparseRows& r = sb.from_rows(*k_, a.data(), 3, 4, 5);
  ASSERT_EQ(r.rows, 3);
  ASSERT_EQ(r.cols, 4);
  EXPECT_EQ(r.nnz[0], 2);
  EXPECT_EQ(r.nnz[1], 0);
  EXPECT_EQ(r.nnz[2], 3);  // NaN is not zero: it must reach the product
  EXPECT_EQ(r.idx[0], 1);
  EXPECT_EQ(r.val[0], 2.f);
  EXPECT_EQ(r.idx[1], 3);
  EXPECT_EQ(r.val[1], 3.f);
  const int32_t* row2 = r.idx + 2 * r.stride;
  EXPECT_EQ(row2[0], 0);
  EXPECT_EQ(row2[1], 1);
  EXPECT_TRUE(std::isnan(r.val[2 * r.stride + 1]));
  EXPECT_EQ(row2[2], 2);

  const SparseRows& c = sb.from_cols(*k_, a.data(), 3, 4, 5);
  ASSERT_EQ(c.rows, 4);
  ASSERT_EQ(c.cols, 3);
  const int expect_nnz[4] = {1, 2, 1, 1};
  for (int p = 0; p < 4; ++p) EXPECT_EQ(c.nnz[p], expect_nnz[p]) << "column " << p;
  EXPECT_EQ(c.idx[0], 2);  // column 0: row 2 holds 4
  EXPECT_EQ(c.val[0], 4.f);
  EXPECT_EQ(c.idx[c.stride], 0);  // column 1: rows 0 and 2, ascending
  EXPECT_EQ(c.idx[c.stride + 1], 2);
  EXPECT_EQ(c.idx[3 * c.stride], 0);
  EXPECT_EQ(c.val[3 * c.stride], 3.f);
}

TEST_P(KernelTarget, CompressRowsMatchesReference) {
  std::mt19937 rng(13);
  for (int k : {1, 3, 4, 5, 17, 256, 259}) {
    for (double density : {0.0, 0.5, 1.0}) {
      const int m = 9, lda = k + 3;
      auto a = sparse_matrix(m, k, lda, density, rng);
      std::vector<int32_t> nnz_r(m), nnz_g(m), idx_r(size_t(m) * k), idx_g(idx_r.size());
      std::vector<float> val_r(idx_r.size()), val_g(idx_r.size());
      ref_.compress_rows(a.data(), m, k, lda, nnz_r.data(), idx_r.data(), val_r.data(), k);
      k_->compress_rows(a.data(), m, k, lda, nnz_g.data(), idx_g.data(), val_g.data(), k);
      for (int i = 0; i < m; ++i) {
        ASSERT_EQ(nnz_r[i], nnz_g[i]) << k_->name << " k=" << k << " row " << i;
        for (int e = 0; e < nnz_r[i]; ++e) {
          const size_t at = size_t(i) * k + e;
          ASSERT_EQ(idx_r[at], idx_g[at]) << k_->name << " k=" << k << " row " << i;
          ASSERT_EQ(val_r[at], val_g[at]) << k_->name << " k=" << k << " row " << i;
          ASSERT_NE(val_r[at], 0.f);
          ASSERT_EQ(val_r[at], a[size_t(i) * lda + idx_r[at]]);
        }
      }
    }
  }
}

TEST_P(KernelTarget, ColSum) {
  std::mt19937 rng(7);
  for (auto [m, n] : {std::pair{1, 1}, {7, 33}, {33, 7}, {257, 65}, {64, 256}, {3, 130}}) {
    const int lda = n + 5;
    auto a = random_vec(size_t(m) * lda, rng);
    for (bool acc : {false, true}) {
      auto base = random_vec(n, rng);
      auto r = base, g = base;
      ref_.col_sum(a.data(), m, n, lda, r.data(), acc);
      k_->col_sum(a.data(), m, n, lda, g.data(), acc);
      expect_close(r, g, 1e-6f * float(m + 4), std::string(k_->name) + " col_sum");
    }
  }
}

TEST_P(KernelTarget, SgdStep) {
  std::mt19937 rng(8);
  const SgdParams params[] = {{0.1f, 0.f, 0.f, false},
                              {0.05f, 0.9f, 0.f, false},
                              {0.05f, 0.9f, 1e-2f, true},
                              {0.01f, 0.f, 5e-3f, false}};
  for (size_t n : {size_t(1), size_t(7), size_t(33), size_t(257)}) {
    for (const SgdParams& p : params) {
      auto w = random_vec(n, rng), v = random_vec(n, rng);
      auto w2 = w, v2 = v;
      for (int step = 0; step < 3; ++step) {
        auto g = random_vec(n, rng);
        ref_.sgd_step(w.data(), g.data(), v.data(), n, p);
        k_->sgd_step(w2.data(), g.data(), v2.data(), n, p);
      }
      expect_close(w, w2, 1e-6f, std::string(k_->name) + " sgd w");
      if (p.momentum != 0.f) expect_close(v, v2, 1e-6f, std::string(k_->name) + " sgd v");
    }
  }
}

TEST_P(KernelTarget, AdamStep) {
  std::mt19937 rng(9);
  for (size_t n : {size_t(1), size_t(7), size_t(33), size_t(257)}) {
    for (bool decoupled : {false, true}) {
      AdamParams p;
      p.lr = 1e-2f;
      p.weight_decay = 0.05f;
      p.decoupled = decoupled;
      auto w = random_vec(n, rng);
      std::vector<float> m(n, 0.f), v(n, 0.f);
      auto w2 = w, m2 = m, v2 = v;
      for (int step = 1; step <= 4; ++step) {
        p.step = step;
        auto g = random_vec(n, rng);
        ref_.adam_step(w.data(), g.data(), m.data(), v.data(), n, p);
        k_->adam_step(w2.data(), g.data(), m2.data(), v2.data(), n, p);
      }
      const std::string what = std::string(k_->name) + (decoupled ? " adamw" : " adam");
      expect_close(w, w2, 1e-6f, what + " w");
      expect_close(m, m2, 1e-6f, what + " m");
      expect_close(v, v2, 1e-6f, what + " v");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernel, KernelTarget,
                         ::testing::Values("scalar", "avx2", "avx512", "wasm-simd128",
                                           "wasm-relaxed-simd"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) {
                             if (ch == '-') ch = '_';
                           }
                           return s;
                         });

TEST(KernelDispatch, SelectsByNameAndRejectsUnknown) {
  EXPECT_FALSE(select_kernels("no-such-target"));
  EXPECT_TRUE(select_kernels("scalar"));
  EXPECT_STREQ(kernels().name, "scalar");
  EXPECT_TRUE(select_kernels("auto"));
  EXPECT_NE(kernels().name, nullptr);
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    EXPECT_STREQ(kernels().name, "avx512");
  }
#endif
}

TEST(SparseBuffer, SparserThanCountsAgainstTheLimit) {
  const std::vector<float> a = {1.f, 0.f, 0.f, 0.f, 1.f, 1.f, 0.f, 0.f};  // 3 of 8
  EXPECT_TRUE(sparser_than(a.data(), 2, 4, 4, 0.375f));
  EXPECT_FALSE(sparser_than(a.data(), 2, 4, 4, 0.374f));
  EXPECT_TRUE(sparser_than(a.data(), 2, 2, 4, 0.75f));  // the first 2 columns: 3 of 4
  EXPECT_FALSE(sparser_than(a.data(), 2, 2, 4, 0.5f));
  EXPECT_FALSE(use_spmm(reference_kernels(), a.data(), 2, 4, 4, 256))
      << "the reference table never takes the sparse path";
}

TEST(KernelDispatch, ActNames) {
  EXPECT_STREQ(act_name(Act::kRelu), "relu");
  EXPECT_STREQ(act_name(Act::kLeakyRelu), "leaky_relu");
  EXPECT_STREQ(act_name(Act::kSigmoid), "sigmoid");
  EXPECT_STREQ(act_name(Act::kIdentity), "identity");
  EXPECT_STREQ(act_name(Act::kElu), "elu");
  EXPECT_STREQ(act_name(Act::kTanh), "tanh");
}

}  // namespace
}  // namespace dnnlab::nn
