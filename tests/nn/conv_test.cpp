// The convolution and pooling kernels of every target this CPU supports,
// against the scalar reference table and against naive loops written here in
// a different form (gathers where the reference scatters), on awkward shapes:
// odd and non-square sizes, stride 2, padding 0 and 1, batch 1, C = 1 and 3,
// 1x1 kernels, a window as large as the input, fan-in past the GEMM's KC.
// Also: the parallel-for hook gives the same bits for any item order and any
// number of threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "nn/kernels.hpp"
#include "nn/parallel.hpp"
#if !defined(__EMSCRIPTEN__)
#include <thread>
#endif

namespace dnnlab::nn {
namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::string describe(const ConvShape& s) {
  return "n" + std::to_string(s.n) + " c" + std::to_string(s.c) + " " + std::to_string(s.h) + "x" +
         std::to_string(s.w) + " k" + std::to_string(s.k) + " " + std::to_string(s.kh) + "x" +
         std::to_string(s.kw) + " s" + std::to_string(s.sh) + "," + std::to_string(s.sw) + " p" +
         std::to_string(s.ph) + "," + std::to_string(s.pw);
}

std::string describe(const PoolShape& s) {
  return "n" + std::to_string(s.n) + " c" + std::to_string(s.c) + " " + std::to_string(s.h) + "x" +
         std::to_string(s.w) + " win " + std::to_string(s.kh) + "x" + std::to_string(s.kw) + " s" +
         std::to_string(s.sh) + "," + std::to_string(s.sw) + " p" + std::to_string(s.ph) + "," +
         std::to_string(s.pw);
}

// {n, c, h, w, k, kh, kw, sh, sw, ph, pw}
const ConvShape kConvShapes[] = {
    {1, 1, 5, 5, 1, 3, 3, 1, 1, 0, 0},      // the smallest: batch 1, C = 1
    {2, 3, 7, 9, 4, 3, 3, 2, 2, 1, 1},      // odd, non-square, stride 2, padding 1
    {1, 1, 28, 28, 8, 3, 3, 1, 1, 1, 1},    // a Fashion-MNIST first layer
    {3, 3, 11, 8, 5, 5, 5, 1, 1, 2, 2},     // C = 3, 5x5, padding 2
    {2, 5, 9, 7, 6, 1, 1, 1, 1, 0, 0},      // 1x1: no im2col
    {2, 5, 9, 7, 6, 1, 1, 2, 2, 0, 0},      // 1x1 with stride: im2col
    {2, 4, 6, 10, 3, 2, 3, 2, 1, 0, 1},     // non-square kernel, mixed stride and padding
    {1, 2, 5, 5, 33, 5, 5, 2, 2, 0, 0},     // 33 filters
    {2, 3, 4, 4, 2, 4, 4, 1, 1, 0, 0},      // window = input: 1x1 output
    {1, 16, 8, 8, 32, 3, 3, 2, 2, 1, 1},    //
    {2, 32, 12, 12, 17, 5, 5, 1, 1, 2, 2},  // fan-in 800 > KC
    {40, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1},     // 40 images: 14 filter-gradient chunks of 3
    {5, 7, 13, 13, 17, 3, 3, 1, 1, 1, 1},   //
    {2, 16, 9, 7, 5, 3, 3, 1, 1, 1, 1},     // backward data as a forward conv (C >= MR)
    {1, 14, 6, 5, 300, 3, 3, 1, 1, 0, 1},   // 300 filters: its flipped fan-in 2700 > KC
    // Winograd (stride 1, 3x3 / 5x5, C and K >= 16): F(2x2, 5x5) and F(4x4, 3x3)
    {2, 32, 16, 16, 32, 5, 5, 1, 1, 2, 2},  // CIFAR-10-quick's conv2
    {3, 20, 7, 7, 24, 3, 3, 1, 1, 1, 1},    // 7x7 in 4x4 tiles; C, K not whole vectors
    {1, 17, 11, 6, 16, 5, 5, 1, 1, 0, 1},   // pad 0 and 1, odd sizes, batch 1
    {2, 16, 5, 9, 19, 3, 3, 1, 1, 2, 0},    // pad 2 (> r/2) and 0
    {1, 40, 34, 30, 12, 3, 3, 1, 1, 1, 1},  // 72 tiles: more than one tile block
};

// {n, c, h, w, kh, kw, sh, sw, ph, pw}
const PoolShape kPoolShapes[] = {
    {2, 3, 8, 8, 2, 2, 2, 2, 0, 0},   {1, 1, 7, 9, 3, 3, 2, 2, 1, 1},
    {3, 2, 5, 6, 3, 2, 1, 2, 1, 0},   {2, 4, 7, 7, 7, 7, 1, 1, 0, 0},  // global
    {1, 3, 28, 28, 2, 2, 2, 2, 0, 0}, {2, 2, 6, 5, 3, 3, 3, 3, 1, 1},
    {1, 1, 1, 1, 1, 1, 1, 1, 0, 0},   {2, 3, 9, 9, 3, 3, 1, 1, 1, 1},  // overlapping windows
    {2, 3, 7, 9, 2, 2, 2, 2, 0, 0},   // 2x2 / 2 (the max pool's fast path) on odd sizes
    {1, 2, 5, 69, 2, 2, 2, 2, 0, 0},  // 34 outputs a row: vectors of 16, 8, 4 and a scalar tail
};

size_t x_size(const ConvShape& s) {
  return size_t(s.n) * s.c * s.h * s.w;
}
size_t y_size(const ConvShape& s) {
  return size_t(s.n) * s.k * s.out_h() * s.out_w();
}
size_t w_size(const ConvShape& s) {
  return size_t(s.k) * s.patch();
}

float at_x(const ConvShape& s, const std::vector<float>& x, int n, int c, int ih, int iw) {
  if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) return 0.f;
  return x[((size_t(n) * s.c + c) * s.h + ih) * s.w + iw];
}

// The naive forward (bias, no activation).
std::vector<float> naive_forward(const ConvShape& s, const std::vector<float>& x,
                                 const std::vector<float>& w, const std::vector<float>& b) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  std::vector<float> y(y_size(s));
  size_t q = 0;
  for (int n = 0; n < s.n; ++n)
    for (int o = 0; o < s.k; ++o)
      for (int oh = 0; oh < oh_n; ++oh)
        for (int ow = 0; ow < ow_n; ++ow) {
          double acc = b.empty() ? 0.0 : b[o];
          size_t wi = size_t(o) * s.patch();
          for (int c = 0; c < s.c; ++c)
            for (int i = 0; i < s.kh; ++i)
              for (int j = 0; j < s.kw; ++j, ++wi)
                acc += double(w[wi]) * at_x(s, x, n, c, oh * s.sh - s.ph + i, ow * s.sw - s.pw + j);
          y[q++] = float(acc);
        }
  return y;
}

// The input gradient as a gather: each input sums the outputs whose window
// covers it (the reference table scatters from the outputs instead).
std::vector<float> naive_backward_data(const ConvShape& s, const std::vector<float>& w,
                                       const std::vector<float>& dy) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  std::vector<float> dx(x_size(s));
  size_t q = 0;
  for (int n = 0; n < s.n; ++n)
    for (int c = 0; c < s.c; ++c)
      for (int ih = 0; ih < s.h; ++ih)
        for (int iw = 0; iw < s.w; ++iw) {
          double acc = 0.0;
          for (int i = 0; i < s.kh; ++i) {
            const int th = ih + s.ph - i;
            if (th < 0 || th % s.sh != 0 || th / s.sh >= oh_n) continue;
            for (int j = 0; j < s.kw; ++j) {
              const int tw = iw + s.pw - j;
              if (tw < 0 || tw % s.sw != 0 || tw / s.sw >= ow_n) continue;
              for (int o = 0; o < s.k; ++o) {
                acc += double(w[((size_t(o) * s.c + c) * s.kh + i) * s.kw + j]) *
                       dy[((size_t(n) * s.k + o) * oh_n + th / s.sh) * ow_n + tw / s.sw];
              }
            }
          }
          dx[q++] = float(acc);
        }
  return dx;
}

// The filter gradient: each weight's correlation of dy with the shifted input.
std::vector<float> naive_backward_filter(const ConvShape& s, const std::vector<float>& x,
                                         const std::vector<float>& dy) {
  const int oh_n = s.out_h(), ow_n = s.out_w();
  std::vector<float> dw(w_size(s));
  size_t q = 0;
  for (int o = 0; o < s.k; ++o)
    for (int c = 0; c < s.c; ++c)
      for (int i = 0; i < s.kh; ++i)
        for (int j = 0; j < s.kw; ++j) {
          double acc = 0.0;
          for (int n = 0; n < s.n; ++n)
            for (int oh = 0; oh < oh_n; ++oh)
              for (int ow = 0; ow < ow_n; ++ow)
                acc += double(dy[((size_t(n) * s.k + o) * oh_n + oh) * ow_n + ow]) *
                       at_x(s, x, n, c, oh * s.sh - s.ph + i, ow * s.sw - s.pw + j);
          dw[q++] = float(acc);
        }
  return dw;
}

// Shapes the SIMD targets compute by Winograd (simd_conv_winograd.inc):
// stride 1, square 3x3 or 5x5, padding below the kernel, C and K >= 16.
bool winograd(const ConvShape& s) {
  return s.sh == 1 && s.sw == 1 && s.kh == s.kw && (s.kh == 3 || s.kh == 5) && s.ph < s.kh &&
         s.pw < s.kw && s.c >= 16 && s.k >= 16;
}

// |want - got| within tol (scaled by the sum's fan-in) relative to 1 + |want|.
// Winograd's transforms scale rounding errors by their coefficients (up to 8
// in A^T, 5 in B^T, 1/24 in G): on the shapes here its worst error was 1.04x
// the direct sum's bound (the 5x5 filter gradient of one small image), so it
// is allowed 4x.
void expect_near(const std::vector<float>& want, const std::vector<float>& got, int fan_in,
                 const std::string& what, const ConvShape* s = nullptr) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const float tol = 3e-7f * float(fan_in + 16) * (s && winograd(*s) ? 4.f : 1.f);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(want[i] - got[i]) <= tol * (1.f + std::fabs(want[i]))) && bad++ < 3) {
      ADD_FAILURE() << what << " at " << i << ": want " << want[i] << " got " << got[i];
    }
  }
}

class ConvTarget : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!select_kernels(GetParam())) GTEST_SKIP() << GetParam() << " not supported here";
    k_ = &kernels();
    select_kernels("auto");
  }
  const Kernels* k_ = nullptr;
  const Kernels& ref_ = reference_kernels();
};

TEST_P(ConvTarget, ForwardMatchesReferenceAndNaiveLoops) {
  std::mt19937 rng(21);
  for (const ConvShape& s : kConvShapes) {
    const std::string what = std::string(k_->name) + " forward " + describe(s);
    auto x = random_floats(x_size(s), rng), w = random_floats(w_size(s), rng);
    auto b = random_floats(size_t(s.k), rng);
    std::vector<float> got(y_size(s), NAN), ref(y_size(s), NAN);
    k_->conv2d_forward(s, x.data(), w.data(), b.data(), Act::kIdentity, 0.f, got.data());
    ref_.conv2d_forward(s, x.data(), w.data(), b.data(), Act::kIdentity, 0.f, ref.data());
    expect_near(ref, got, s.patch(), what + " vs reference", &s);
    expect_near(naive_forward(s, x, w, b), got, s.patch(), what + " vs naive", &s);
    // Without bias, and with a fused activation (the reference applies its
    // own scalar activation to the naive sum).
    std::fill(got.begin(), got.end(), NAN);
    k_->conv2d_forward(s, x.data(), w.data(), nullptr, Act::kTanh, 0.f, got.data());
    auto want = naive_forward(s, x, w, {});
    for (float& v : want) v = std::tanh(v);
    expect_near(want, got, s.patch(), what + " tanh, no bias vs naive", &s);
    std::fill(got.begin(), got.end(), NAN);
    k_->conv2d_forward(s, x.data(), w.data(), b.data(), Act::kRelu, 0.f, got.data());
    want = naive_forward(s, x, w, b);
    for (float& v : want) v = std::max(v, 0.f);
    expect_near(want, got, s.patch(), what + " relu vs naive", &s);
  }
}

TEST_P(ConvTarget, BackwardDataMatchesReferenceAndNaiveLoops) {
  std::mt19937 rng(22);
  for (const ConvShape& s : kConvShapes) {
    const std::string what = std::string(k_->name) + " backward data " + describe(s);
    auto w = random_floats(w_size(s), rng), dy = random_floats(y_size(s), rng);
    std::vector<float> got(x_size(s), NAN), ref(x_size(s), NAN);  // overwritten, never read
    k_->conv2d_backward_data(s, w.data(), dy.data(), got.data());
    ref_.conv2d_backward_data(s, w.data(), dy.data(), ref.data());
    const int fan = s.k * s.kh * s.kw;
    expect_near(ref, got, fan, what + " vs reference", &s);
    expect_near(naive_backward_data(s, w, dy), got, fan, what + " vs naive", &s);
  }
}

TEST_P(ConvTarget, BackwardFilterMatchesReferenceAndNaiveLoops) {
  std::mt19937 rng(23);
  for (const ConvShape& s : kConvShapes) {
    const std::string what = std::string(k_->name) + " backward filter " + describe(s);
    auto x = random_floats(x_size(s), rng), dy = random_floats(y_size(s), rng);
    std::vector<float> got(w_size(s), NAN), ref(w_size(s), NAN);
    std::vector<float> gdb(size_t(s.k), NAN), rdb(size_t(s.k), NAN);
    k_->conv2d_backward_filter(s, x.data(), dy.data(), got.data(), gdb.data(), false);
    ref_.conv2d_backward_filter(s, x.data(), dy.data(), ref.data(), rdb.data(), false);
    const int fan = s.n * s.out_h() * s.out_w();
    expect_near(ref, got, fan, what + " vs reference", &s);
    expect_near(naive_backward_filter(s, x, dy), got, fan, what + " vs naive", &s);
    std::vector<float> db(size_t(s.k));
    for (int n = 0; n < s.n; ++n)
      for (int o = 0; o < s.k; ++o)
        for (int q = 0; q < s.out_h() * s.out_w(); ++q)
          db[o] += dy[(size_t(n) * s.k + o) * s.out_h() * s.out_w() + q];
    expect_near(rdb, gdb, fan, what + " bias vs reference", &s);
    expect_near(db, gdb, fan, what + " bias vs naive", &s);
    // accumulate adds onto what is there; a null db is allowed.
    auto acc = got;
    k_->conv2d_backward_filter(s, x.data(), dy.data(), acc.data(), nullptr, true);
    for (size_t i = 0; i < got.size(); ++i) got[i] *= 2.f;
    expect_near(got, acc, fan, what + " accumulate", &s);
  }
}

// <conv(x), dy> = <x, backward_data(dy)> = <w, backward_filter(x, dy)>: the
// two backward passes are the forward's adjoints, whatever loops compute them.
TEST_P(ConvTarget, BackwardPassesAreTheForwardsAdjoints) {
  std::mt19937 rng(24);
  for (const ConvShape& s : kConvShapes) {
    auto x = random_floats(x_size(s), rng), w = random_floats(w_size(s), rng);
    auto dy = random_floats(y_size(s), rng);
    std::vector<float> y(y_size(s)), dx(x_size(s)), dw(w_size(s));
    k_->conv2d_forward(s, x.data(), w.data(), nullptr, Act::kIdentity, 0.f, y.data());
    k_->conv2d_backward_data(s, w.data(), dy.data(), dx.data());
    k_->conv2d_backward_filter(s, x.data(), dy.data(), dw.data(), nullptr, false);
    double ydy = 0, xdx = 0, wdw = 0, scale = 0;
    for (size_t i = 0; i < y.size(); ++i)
      ydy += double(y[i]) * dy[i], scale += std::fabs(y[i] * dy[i]);
    for (size_t i = 0; i < x.size(); ++i) xdx += double(x[i]) * dx[i];
    for (size_t i = 0; i < w.size(); ++i) wdw += double(w[i]) * dw[i];
    EXPECT_NEAR(ydy, xdx, 1e-5 * (scale + 1)) << k_->name << " " << describe(s);
    EXPECT_NEAR(ydy, wdw, 1e-5 * (scale + 1)) << k_->name << " " << describe(s);
  }
}

TEST_P(ConvTarget, PoolingMatchesReference) {
  std::mt19937 rng(25);
  for (const PoolShape& s : kPoolShapes) {
    const size_t xs = size_t(s.n) * s.c * s.h * s.w, ys = size_t(s.n) * s.c * s.out_h() * s.out_w();
    auto dy = random_floats(ys, rng);
    // Random values, then values in {-1, 0, 1}: ties, where the first input
    // of a window in row-major order must win on every target.
    auto x = random_floats(xs, rng);
    auto ties = x;
    for (float& v : ties) v = std::round(v);
    for (const auto& [kind, x] :
         {std::pair{Pool::kMax, x}, std::pair{Pool::kAvg, x}, std::pair{Pool::kMax, ties}}) {
      const std::string what =
          std::string(k_->name) + (kind == Pool::kMax ? " max pool " : " avg pool ") + describe(s);
      std::vector<float> got(ys, NAN), ref(ys, NAN), gdx(xs, NAN), rdx(xs, NAN);
      std::vector<int32_t> gam(ys, -7), ram(ys, -7);
      k_->pool2d_forward(kind, s, x.data(), got.data(), gam.data());
      ref_.pool2d_forward(kind, s, x.data(), ref.data(), ram.data());
      expect_near(ref, got, s.kh * s.kw, what + " forward");
      if (kind == Pool::kMax) {
        EXPECT_EQ(gam, ram) << what;
        // Naive: the largest in-bounds value of each window.
        size_t q = 0;
        for (size_t plane = 0; plane < size_t(s.n) * s.c; ++plane)
          for (int oh = 0; oh < s.out_h(); ++oh)
            for (int ow = 0; ow < s.out_w(); ++ow, ++q) {
              float m = -INFINITY;
              for (int i = 0; i < s.kh; ++i)
                for (int j = 0; j < s.kw; ++j) {
                  const int ih = oh * s.sh - s.ph + i, iw = ow * s.sw - s.pw + j;
                  if (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w)
                    m = std::max(m, x[plane * s.h * s.w + size_t(ih) * s.w + iw]);
                }
              EXPECT_EQ(got[q], m) << what << " at " << q;
            }
      }
      k_->pool2d_backward(kind, s, dy.data(), gam.data(), gdx.data());
      ref_.pool2d_backward(kind, s, dy.data(), ram.data(), rdx.data());
      expect_near(rdx, gdx, s.kh * s.kw, what + " backward");
      // Adjoint: <pool(x), dy> = <x, pool_backward(dy)> (max: at fixed argmax).
      double a = 0, b = 0;
      for (size_t i = 0; i < ys; ++i) a += double(got[i]) * dy[i];
      for (size_t i = 0; i < xs; ++i) b += double(x[i]) * gdx[i];
      EXPECT_NEAR(a, b, 1e-4 * (1 + std::fabs(a))) << what;
    }
  }
}

TEST_P(ConvTarget, GlobalAveragePoolIsThePlaneMean) {
  std::mt19937 rng(26);
  const PoolShape s{3, 5, 7, 6, 7, 6, 1, 1, 0, 0};
  auto x = random_floats(size_t(s.n) * s.c * s.h * s.w, rng);
  std::vector<float> y(size_t(s.n) * s.c);
  k_->pool2d_forward(Pool::kAvg, s, x.data(), y.data(), nullptr);
  for (size_t plane = 0; plane < y.size(); ++plane) {
    double m = 0;
    for (int q = 0; q < s.h * s.w; ++q) m += x[plane * s.h * s.w + q];
    EXPECT_NEAR(y[plane], m / (s.h * s.w), 1e-6) << k_->name << " plane " << plane;
  }
}

// A hook that runs the items backwards on this thread: results must not
// depend on the order items run in.
void reverse_hook(int n, const std::function<void(int)>& body) {
  for (int i = n - 1; i >= 0; --i) body(i);
}

// Every conv and pool output of s, concatenated, for bit comparisons.
std::vector<float> all_outputs(const Kernels& k, const ConvShape& s) {
  std::mt19937 rng(27);
  auto x = random_floats(x_size(s), rng), w = random_floats(w_size(s), rng);
  auto b = random_floats(size_t(s.k), rng), dy = random_floats(y_size(s), rng);
  std::vector<float> y(y_size(s)), dx(x_size(s)), dw(w_size(s)), db(size_t(s.k));
  k.conv2d_forward(s, x.data(), w.data(), b.data(), Act::kRelu, 0.f, y.data());
  k.conv2d_backward_data(s, w.data(), dy.data(), dx.data());
  k.conv2d_backward_filter(s, x.data(), dy.data(), dw.data(), db.data(), false);
  const PoolShape ps{s.n, s.k, s.out_h(), s.out_w(), 3, 3, 2, 2, 1, 1};
  std::vector<float> py(size_t(ps.n) * ps.c * ps.out_h() * ps.out_w()), pdx(y.size());
  std::vector<int32_t> am(py.size());
  k.pool2d_forward(Pool::kMax, ps, y.data(), py.data(), am.data());
  k.pool2d_backward(Pool::kMax, ps, py.data(), am.data(), pdx.data());
  std::vector<float> out;
  for (const auto* v : {&y, &dx, &dw, &db, &py, &pdx}) out.insert(out.end(), v->begin(), v->end());
  return out;
}

TEST_P(ConvTarget, SameBitsForAnyItemOrderAndThreadCount) {
  // 13 images: uneven chunks; im2col / implicit GEMM, then Winograd F(2x2, 5x5).
  for (const ConvShape& s : {ConvShape{13, 3, 12, 11, 9, 3, 3, 1, 1, 1, 1},
                             ConvShape{13, 16, 9, 10, 17, 5, 5, 1, 1, 2, 2}}) {
    const auto serial = all_outputs(*k_, s);
    set_parallel_for(reverse_hook);
    const auto reversed = all_outputs(*k_, s);
    set_parallel_for({});
    EXPECT_TRUE(serial == reversed) << k_->name << ": item order changed the results";
#if !defined(__EMSCRIPTEN__)
    for (int threads : {2, 3, 5}) {
      // Items handed out from a shared counter: which thread runs what varies.
      set_parallel_for([threads](int n, const std::function<void(int)>& body) {
        std::atomic<int> next{0};
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
          pool.emplace_back([&] {
            for (int i = next++; i < n; i = next++) body(i);
          });
        }
        for (auto& th : pool) th.join();
      });
      const auto threaded = all_outputs(*k_, s);
      set_parallel_for({});
      EXPECT_TRUE(serial == threaded)
          << k_->name << ": " << threads << " threads changed the results";
    }
#endif
  }
}

INSTANTIATE_TEST_SUITE_P(Conv, ConvTarget,
                         ::testing::Values("scalar", "avx2", "avx512", "wasm-simd128",
                                           "wasm-relaxed-simd"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) {
                             if (ch == '-') ch = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace dnnlab::nn
