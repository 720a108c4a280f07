// Conv2D, MaxPool2D / AvgPool2D and GlobalAvgPool as layers: numerical
// gradient checks on awkward shapes (odd sizes, stride 2, padding 0 and 1,
// batch 1, C = 1 and 3, non-square, [H, W] inputs), shapes and their errors,
// initialisation by fan-in.
#include "nn/conv_layers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace dnnlab::nn {
namespace {

// L = sum(r * layer(x)); dL/dx and dL/dparams against central differences.
// (The registry's checker in gradcheck_test.cpp will cover these layers once
// they are in the registry.)
struct ConvLayerChecker {
  Layer& layer;
  Tensor x, y, r;
  Rng rng{321};

  ConvLayerChecker(Layer& l, int64_t batch) : layer(l) {
    const Shape& in = l.in_shape();
    Shape xs{batch};
    xs.rank = in.rank + 1;
    for (int i = 0; i < in.rank; ++i) xs[i + 1] = in[i];
    x.resize(xs);
    for (int64_t i = 0; i < x.numel(); ++i) x[i] = rng.normal();
    Shape ys{batch};
    ys.rank = l.out_shape().rank + 1;
    for (int i = 0; i < l.out_shape().rank; ++i) ys[i + 1] = l.out_shape()[i];
    y.resize(ys);
    r.resize(ys);
    for (int64_t i = 0; i < r.numel(); ++i) r[i] = rng.normal();
  }

  double loss() {
    ForwardContext ctx;
    layer.forward(x.view(), y.view(), ctx);
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += double(y[i]) * r[i];
    return s;
  }

  void check(int samples = 40) {
    loss();
    Tensor dy = r, dx(x.shape());
    layer.backward(x.view(), y.view(), dy.view(), dx.view());
    compare("input", x, dx, samples);
    for (Param* p : layer.params()) {
      const Tensor g = p->grad;
      compare(p->name, p->value, g, samples);
    }
  }

  void compare(const std::string& what, Tensor& v, const Tensor& analytic, int samples) {
    // Small: a 5x5 filter tap moves hundreds of outputs, and a larger step
    // takes some of them across a fused ReLU's kink.
    const float eps = 1e-3f;
    Rng pick(99);
    const int64_t n = v.numel();
    int checked = 0;
    const int64_t count = std::min<int64_t>(samples, n);
    for (int64_t s = 0; s < count; ++s) {
      const int64_t i = n <= samples ? s : int64_t(pick.below(uint64_t(n)));
      const float old = v[i];
      v[i] = old + eps;
      const double lp = loss();
      v[i] = old - eps;
      const double lm = loss();
      v[i] = old;
      const double l0 = loss();
      // A step across a kink (a max changing hands, relu at 0) makes the
      // one-sided slopes disagree; such a point says nothing.
      const double fwd = (lp - l0) / eps, bwd = (l0 - lm) / eps;
      if (std::fabs(fwd - bwd) > 0.05 * std::max(std::fabs(fwd), std::fabs(bwd)) + 2e-2) continue;
      ++checked;
      const double num = (lp - lm) / (2 * eps);
      EXPECT_NEAR(analytic[i], num, 1e-2 + 1e-2 * std::fabs(num))
          << layer.describe() << " d/d" << what << "[" << i << "]";
    }
    EXPECT_GE(checked, count / 2) << layer.describe() << " " << what << ": too many kinks";
  }
};

struct ConvCase {
  const char* name;
  Shape in;
  int64_t batch, filters;
  int kh, kw, sh, sw, ph, pw;
  bool bias;
  Act act;
};

class Conv2DGrad : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2DGrad, MatchesNumericalGradient) {
  const ConvCase& p = GetParam();
  Conv2DConfig c;
  c.filters = p.filters;
  c.kernel_h = p.kh;
  c.kernel_w = p.kw;
  c.stride_h = p.sh;
  c.stride_w = p.sw;
  c.pad_h = p.ph;
  c.pad_w = p.pw;
  c.bias = p.bias;
  Conv2D conv(c);
  Rng rng(5);
  conv.bind(p.in, &rng, {});
  if (p.act != Act::kIdentity) {
    ASSERT_TRUE(conv.fuse_activation(p.act, 0.f));
  }
  // Non-zero biases so the bias path is exercised, not just its gradient.
  if (p.bias) {
    for (int64_t i = 0; i < conv.params()[1]->value.numel(); ++i)
      conv.params()[1]->value[i] = 0.1f * float(i % 7) - 0.3f;
  }
  ConvLayerChecker(conv, p.batch).check();
}

INSTANTIATE_TEST_SUITE_P(
    Conv, Conv2DGrad,
    ::testing::Values(
        ConvCase{"c1_5x5_k3_p0", Shape{1, 5, 5}, 1, 2, 3, 3, 1, 1, 0, 0, true, Act::kIdentity},
        ConvCase{"c3_7x9_stride2_pad1", Shape{3, 7, 9}, 2, 4, 3, 3, 2, 2, 1, 1, true,
                 Act::kIdentity},
        ConvCase{"hw_input_as_one_channel", Shape{6, 5}, 3, 3, 3, 2, 1, 1, 1, 0, false,
                 Act::kIdentity},
        ConvCase{"c2_6x7_k2x3_stride2x1", Shape{2, 6, 7}, 2, 5, 2, 3, 2, 1, 0, 1, true, Act::kTanh},
        ConvCase{"c3_8x8_5x5_pad2_relu", Shape{3, 8, 8}, 2, 3, 5, 5, 1, 1, 2, 2, true, Act::kRelu},
        ConvCase{"pointwise_c5", Shape{5, 3, 4}, 2, 3, 1, 1, 1, 1, 0, 0, true, Act::kIdentity},
        ConvCase{"batch1_c4_9x7_stride2_pad0", Shape{4, 9, 7}, 1, 6, 3, 3, 2, 2, 0, 0, false,
                 Act::kIdentity}),
    [](const auto& info) { return std::string(info.param.name); });

struct PoolCase {
  const char* name;
  Pool kind;
  Shape in;
  int64_t batch;
  int kh, kw, sh, sw, ph, pw;
};

class Pool2DGrad : public ::testing::TestWithParam<PoolCase> {};

TEST_P(Pool2DGrad, MatchesNumericalGradient) {
  const PoolCase& p = GetParam();
  Pool2DConfig c{p.kh, p.kw, p.sh, p.sw, p.ph, p.pw};
  Pool2D pool(p.kind, c);
  Rng rng(5);
  pool.bind(p.in, &rng, {});
  ConvLayerChecker(pool, p.batch).check();
}

INSTANTIATE_TEST_SUITE_P(
    Pool, Pool2DGrad,
    ::testing::Values(PoolCase{"max_2x2", Pool::kMax, Shape{3, 8, 8}, 2, 2, 2, 0, 0, 0, 0},
                      PoolCase{"max_odd_3x3_s2_p1", Pool::kMax, Shape{2, 7, 9}, 1, 3, 3, 2, 2, 1,
                               1},
                      PoolCase{"max_overlapping", Pool::kMax, Shape{1, 5, 6}, 2, 3, 2, 1, 1, 0, 1},
                      PoolCase{"avg_2x2_odd", Pool::kAvg, Shape{2, 7, 5}, 2, 2, 2, 0, 0, 0, 0},
                      PoolCase{"avg_3x3_s2_p1", Pool::kAvg, Shape{3, 9, 7}, 1, 3, 3, 2, 2, 1, 1},
                      PoolCase{"avg_hw_input", Pool::kAvg, Shape{6, 6}, 3, 3, 2, 3, 1, 0, 1}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(GlobalAvgPool, MatchesNumericalGradientAndIsThePlaneMean) {
  GlobalAvgPool g;
  g.bind(Shape{3, 5, 7}, nullptr, {});
  EXPECT_EQ(g.out_shape(), (Shape{3}));
  ConvLayerChecker ch(g, 2);
  ch.check();
  ch.loss();
  for (int plane = 0; plane < 6; ++plane) {
    double m = 0;
    for (int q = 0; q < 35; ++q) m += ch.x[plane * 35 + q];
    EXPECT_NEAR(ch.y[plane], m / 35, 1e-5);
  }
}

TEST(ConvLayers, Conv2DGradientsAccumulateWhenAsked) {
  Conv2DConfig c;
  c.filters = 4;
  c.pad_h = c.pad_w = 1;
  Conv2D conv(c);
  Rng rng(3);
  conv.bind(Shape{2, 6, 5}, &rng, {});
  ConvLayerChecker ch(conv, 3);
  ch.loss();
  Tensor dy = ch.r, dx(ch.x.shape());
  conv.backward(ch.x.view(), ch.y.view(), dy.view(), dx.view());
  const Tensor w1 = conv.params()[0]->grad, b1 = conv.params()[1]->grad;
  conv.set_accumulate_grads(true);
  conv.backward(ch.x.view(), ch.y.view(), dy.view(), dx.view());
  // Summed onto the old gradient chunk by chunk: 2g up to rounding.
  for (int64_t i = 0; i < w1.numel(); ++i)
    EXPECT_NEAR(conv.params()[0]->grad[i], 2 * w1[i], 1e-5f * (1 + std::fabs(w1[i]))) << i;
  for (int64_t i = 0; i < b1.numel(); ++i)
    EXPECT_NEAR(conv.params()[1]->grad[i], 2 * b1[i], 1e-5f * (1 + std::fabs(b1[i]))) << i;
  conv.set_accumulate_grads(false);
  conv.backward(ch.x.view(), ch.y.view(), dy.view(), dx.view());
  for (int64_t i = 0; i < w1.numel(); ++i) EXPECT_EQ(conv.params()[0]->grad[i], w1[i]) << i;
}

TEST(ConvLayers, ShapesAndParamCounts) {
  Conv2DConfig c;
  c.filters = 32;
  c.kernel_h = c.kernel_w = 5;
  c.pad_h = c.pad_w = 2;
  Conv2D conv(c);
  conv.bind(Shape{3, 32, 32}, nullptr, {});
  EXPECT_EQ(conv.out_shape(), (Shape{32, 32, 32}));
  EXPECT_EQ(conv.param_count(), 32 * 3 * 25 + 32);
  c.stride_h = c.stride_w = 2;
  c.pad_h = c.pad_w = 0;
  c.bias = false;
  Conv2D strided(c);
  strided.bind(Shape{3, 11, 12}, nullptr, {});
  EXPECT_EQ(strided.out_shape(), (Shape{32, 4, 4}));
  EXPECT_EQ(strided.param_count(), 32 * 3 * 25);
  Pool2D pool(Pool::kMax, Pool2DConfig{});
  pool.bind(Shape{32, 7, 9}, nullptr, {});
  EXPECT_EQ(pool.out_shape(), (Shape{32, 3, 4})) << "floor, like PyTorch";
  EXPECT_STREQ(pool.type(), "max_pool2d");
  EXPECT_STREQ(Pool2D(Pool::kAvg, {}).type(), "avg_pool2d");
}

// Each bad configuration is a SpecError naming its field.
TEST(ConvLayers, BadConfigurationsNameTheField) {
  const auto conv_error = [](Conv2DConfig c, Shape in) -> std::string {
    try {
      Conv2D(c).bind(in, nullptr, {});
    } catch (const SpecError& e) {
      return e.what();
    }
    return "";
  };
  Conv2DConfig ok;
  ok.filters = 4;
  EXPECT_EQ(conv_error(ok, Shape{2, 5, 5}), "");
  auto c = ok;
  c.filters = 0;
  EXPECT_NE(conv_error(c, Shape{2, 5, 5}).find("filters"), std::string::npos);
  c = ok;
  c.kernel_w = 7;
  EXPECT_NE(conv_error(c, Shape{2, 5, 5}).find("kernel_w 7"), std::string::npos);
  c = ok;
  c.stride_h = 0;
  EXPECT_NE(conv_error(c, Shape{2, 5, 5}).find("stride_h"), std::string::npos);
  c = ok;
  c.pad_w = -1;
  EXPECT_NE(conv_error(c, Shape{2, 5, 5}).find("pad_w"), std::string::npos);
  c = ok;
  c.init = "zeros";
  EXPECT_NE(conv_error(c, Shape{2, 5, 5}).find("init"), std::string::npos);
  EXPECT_NE(conv_error(ok, Shape{75}).find("dimensions"), std::string::npos) << "a flat input";
  try {
    Pool2D(Pool::kMax, Pool2DConfig{2, 2, 2, 2, 2, 0}).bind(Shape{1, 8, 8}, nullptr, {});
    ADD_FAILURE() << "padding larger than half the window was accepted";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("pad_h"), std::string::npos) << e.what();
  }
  EXPECT_THROW(GlobalAvgPool().bind(Shape{8, 8}, nullptr, {}), SpecError) << "needs [C, H, W]";
}

TEST(ConvLayers, InitialisationScalesByFanIn) {
  for (const char* init : {"he", "lecun", "glorot"}) {
    Conv2DConfig c;
    c.filters = 64;
    c.kernel_h = c.kernel_w = 5;
    c.init = init;
    Conv2D conv(c);
    Rng rng(11);
    conv.bind(Shape{16, 9, 9}, &rng, {});
    const Tensor& w = conv.params()[0]->value;
    EXPECT_EQ(w.shape(), (Shape{64, 16, 5, 5}));
    double sq = 0;
    for (int64_t i = 0; i < w.numel(); ++i) sq += double(w[i]) * w[i];
    const double sd = std::sqrt(sq / double(w.numel()));
    const double fan_in = 16 * 25, fan_out = 64 * 25;
    const double want = std::string(init) == "he"      ? std::sqrt(2 / fan_in)
                        : std::string(init) == "lecun" ? std::sqrt(1 / fan_in)
                                                       : std::sqrt(2 / (fan_in + fan_out));
    EXPECT_NEAR(sd, want, 0.03 * want) << init;
    for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(conv.params()[1]->value[i], 0.f);
  }
}

}  // namespace
}  // namespace dnnlab::nn
