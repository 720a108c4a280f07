// Numerical gradient checks for every layer in the registry, every fused
// activation and every loss, on awkward shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "nn/kernels.hpp"
#include "nn/layers.hpp"
#include "nn/loss.hpp"
#include "nn/registry.hpp"
#include "nn/sparse.hpp"

namespace dnnlab::nn {
namespace {

// L = sum(r * layer(x0, x1, ...)); checks dL/dx_i and dL/dparams against
// central differences at up to `samples` positions of each. One input is the
// usual case (x, dx); multi-input layers get one tensor per input.
struct Checker {
  Layer& layer;
  std::vector<Tensor> xs, dxs;
  Tensor& x;  // xs[0]
  Tensor y, r;
  Tensor& dx;  // dxs[0]
  Rng rng{123};
  bool training = false;
  uint64_t mask_seed = 2024;

  Checker(Layer& l, int64_t batch, const Shape& in) : Checker(l, batch, std::vector<Shape>{in}) {}
  Checker(Layer& l, int64_t batch, const std::vector<Shape>& ins)
      : layer(l), xs(ins.size()), dxs(ins.size()), x(xs[0]), dx(dxs[0]) {
    for (size_t k = 0; k < ins.size(); ++k) {
      Shape xsh{batch};
      xsh.rank = ins[k].rank + 1;
      for (int i = 0; i < ins[k].rank; ++i) xsh[i + 1] = ins[k][i];
      xs[k].resize(xsh);
      for (int64_t i = 0; i < xs[k].numel(); ++i) {
        // Keep inputs away from activation kinks at 0.
        float v = rng.normal();
        xs[k][i] = v + (v >= 0 ? 0.05f : -0.05f);
      }
    }
  }

  std::vector<TensorView> views(std::vector<Tensor>& ts) {
    std::vector<TensorView> v;
    for (Tensor& t : ts) v.push_back(t.view());
    return v;
  }

  double loss() {
    Shape ys = x.shape();
    ys.rank = layer.out_shape().rank + 1;
    for (int i = 0; i < layer.out_shape().rank; ++i) ys[i + 1] = layer.out_shape()[i];
    y.resize(ys);
    Rng mask(mask_seed);  // the same dropout mask at every evaluation
    ForwardContext ctx{training, training ? &mask : nullptr};
    if (xs.size() == 1)
      layer.forward(x.view(), y.view(), ctx);
    else
      layer.forward_n(views(xs), y.view(), ctx);
    if (r.numel() != y.numel()) {
      r.resize(ys);
      Rng rr(7);
      for (int64_t i = 0; i < r.numel(); ++i) r[i] = rr.normal();
    }
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y[i]) * r[i];
    return s;
  }

  void check(double rtol = 2e-2, int samples = 24) {
    loss();
    Tensor dy = r;
    for (size_t k = 0; k < xs.size(); ++k) dxs[k].resize(xs[k].shape());
    if (xs.size() == 1)
      layer.backward(x.view(), y.view(), dy.view(), dx.view());
    else
      layer.backward_n(views(xs), y.view(), dy.view(), views(dxs));
    std::vector<Tensor> grads;
    for (Param* p : layer.params()) grads.push_back(p->grad);
    for (size_t k = 0; k < xs.size(); ++k)
      compare("input" + std::to_string(k), xs[k], dxs[k], rtol, samples);
    auto ps = layer.params();
    for (size_t i = 0; i < ps.size(); ++i)
      compare(ps[i]->name, ps[i]->value, grads[i], rtol, samples);
  }

  void compare(const std::string& what, Tensor& v, const Tensor& analytic, double rtol,
               int samples) {
    const float eps = 1e-2f;
    Rng pick(99);
    const int64_t n = v.numel();
    const double l0 = loss();
    int checked = 0;
    for (int s = 0; s < std::min<int64_t>(samples, n); ++s) {
      const int64_t i = n <= samples ? s : static_cast<int64_t>(pick.below(n));
      const float old = v[i];
      v[i] = old + eps;
      const double lp = loss();
      v[i] = old - eps;
      const double lm = loss();
      v[i] = old;
      // A step across a kink (relu at 0) makes the one-sided slopes disagree;
      // such a point says nothing about the analytic gradient.
      const double fwd = (lp - l0) / eps, bwd = (l0 - lm) / eps;
      if (std::fabs(fwd - bwd) > 0.05 * std::max(std::fabs(fwd), std::fabs(bwd)) + 2e-2) continue;
      ++checked;
      const double num = (lp - lm) / (2 * eps);
      const double ana = analytic[i];
      EXPECT_NEAR(ana, num, 1e-2 + rtol * std::fabs(num))
          << layer.describe() << " d/d" << what << "[" << i << "]";
    }
    EXPECT_GE(checked, std::min<int64_t>(samples, n) / 2) << "too many samples hit a kink";
  }
};

// The input shapes a registry layer is checked on: one [width] input, or for
// multi-input layers two (concat: of different widths, its awkward case).
std::vector<Shape> check_inputs(const LayerInfo& info, int64_t width) {
  // Convolutions and pools take [C, H, W]: odd, non-square, C = 1..3.
  if (find_attr(info, "kernel") || info.name == "global_avg_pool")
    return {Shape{1 + width % 3, 4 + width % 5, 5 + width % 3}};
  if (info.inputs != kManyInputs) return {Shape{width}};
  if (info.name == "concat") return {Shape{width}, Shape{width + 2}};
  return {Shape{width}, Shape{width}};
}

// Every layer the registry can make, with its default argument (dense: a
// width from the test's shape): the list is the registry, so a new layer is
// gradient-checked without anyone editing this file.
std::vector<std::string> registry_layer_names() {
  std::vector<std::string> names;
  for (const LayerInfo& l : layer_registry()) names.emplace_back(l.name);
  return names;
}

std::unique_ptr<Layer> make_for_check(const std::string& type, int64_t width) {
  const LayerInfo* info = find_layer(type);
  if (!info) return nullptr;
  LayerSpec ls;
  ls.type = type;
  if (find_attr(*info, "units")) ls.attrs.num["units"] = width == 1 ? 7 : (width + 3) / 2;
  if (find_attr(*info, "filters")) ls.attrs.num["filters"] = width == 1 ? 1 : 3;
  if (!fill_defaults(*info, ls).empty()) return nullptr;
  return info->make(ls);
}

class LayerGradTest
    : public ::testing::TestWithParam<std::tuple<std::string, int64_t, int64_t, bool>> {};

// In training mode too: dropout's masked backward only runs there. The mask
// is drawn from the same seed at every forward, so the loss is a fixed
// function of x and central differences see the mask the backward uses.
TEST_P(LayerGradTest, MatchesNumericalGradient) {
  auto [type, batch, width, training] = GetParam();
  auto layer = make_for_check(type, width);
  ASSERT_NE(layer, nullptr);
  Rng rng(5);
  const std::vector<Shape> ins = check_inputs(*find_layer(type), width);
  layer->bind(ins, &rng, {});
  Checker ch(*layer, batch, ins);
  ch.training = training;
  ch.check();
}

std::string CaseName(
    const ::testing::TestParamInfo<std::tuple<std::string, int64_t, int64_t, bool>>& i) {
  auto [type, b, w, training] = i.param;
  return type + "_b" + std::to_string(b) + "_w" + std::to_string(w) +
         (training ? "_train" : "_eval");
}

INSTANTIATE_TEST_SUITE_P(AllLayers, LayerGradTest,
                         ::testing::Combine(::testing::ValuesIn(registry_layer_names()),
                                            ::testing::Values<int64_t>(1, 7),
                                            ::testing::Values<int64_t>(1, 7, 33, 257),
                                            ::testing::Bool()),
                         CaseName);

TEST(LayerGrad, EveryRegistryRowMakesTheLayerItNames) {
  // The gradient check above runs on whatever each row makes; a row whose
  // factory made another layer (a copy-paste slip) would check the wrong one.
  ASSERT_FALSE(layer_registry().empty());
  for (const LayerInfo& l : layer_registry()) {
    auto layer = make_for_check(std::string(l.name), 7);
    ASSERT_NE(layer, nullptr) << l.name;
    EXPECT_EQ(std::string_view(layer->type()), l.name);
  }
}

// Shaped ([C, H, W]) and multi-input cases the registry sweep above does not
// reach: 2D batch normalization (batch 1 and 2, odd sizes), add of three
// inputs, concat of channels, flatten; each in training and evaluation.
TEST(LayerGrad, ShapedAndMultiInputLayers) {
  struct Case {
    const char* type;
    std::vector<Shape> ins;
    int64_t batch;
  };
  const Case cases[] = {
      {"batchnorm", {Shape{3, 5, 7}}, 2},
      {"batchnorm", {Shape{3, 5, 7}}, 1},
      {"batchnorm", {Shape{7}}, 3},
      {"batchnorm", {Shape{1, 3}}, 5},
      {"add", {Shape{2, 3, 3}, Shape{2, 3, 3}, Shape{2, 3, 3}}, 1},
      {"concat", {Shape{2, 3, 3}, Shape{1, 3, 3}}, 2},
      {"concat", {Shape{5}, Shape{1}, Shape{3}}, 1},
      {"flatten", {Shape{2, 3, 5}}, 3},
  };
  for (const Case& c : cases)
    for (bool training : {false, true}) {
      auto layer = make_for_check(c.type, 7);
      ASSERT_NE(layer, nullptr);
      Rng rng(5);
      layer->bind(c.ins, &rng, {});
      // Non-trivial scale and shift, so their gradients are not special cases.
      for (Param* p : layer->params())
        for (int64_t i = 0; i < p->value.numel(); ++i) p->value[i] += 0.3f * rng.normal();
      Checker ch(*layer, c.batch, c.ins);
      ch.training = training;
      SCOPED_TRACE(std::string(c.type) + " " + c.ins[0].str() + " batch " +
                   std::to_string(c.batch) + (training ? " training" : " eval"));
      ch.check(2e-2, 40);
    }
}

TEST(Dropout, TrainingGradientIsMaskedAndScaled) {
  Dropout d(0.3f);
  d.bind(Shape{257}, nullptr, {});
  Checker ch(d, 7, Shape{257});
  ch.training = true;
  ch.check(2e-2, 200);
  // The check must have run through a real mask: some units dropped (their
  // gradient 0), the rest scaled by 1 / (1 - rate).
  int dropped = 0;
  for (int64_t i = 0; i < ch.dx.numel(); ++i) {
    if (ch.y[i] == 0.f) {
      ++dropped;
      EXPECT_EQ(ch.dx[i], 0.f) << i;
    } else {
      EXPECT_NEAR(ch.dx[i], ch.r[i] / 0.7f, 1e-5f) << i;
    }
  }
  EXPECT_NEAR(dropped / double(ch.dx.numel()), 0.3, 0.05);
}

class FusedDenseGradTest : public ::testing::TestWithParam<std::tuple<Act, int64_t>> {};

TEST_P(FusedDenseGradTest, DenseWithFusedActivation) {
  auto [act, width] = GetParam();
  Dense d(width == 1 ? 5 : width / 2 + 1, "glorot", true);
  ASSERT_TRUE(d.fuse_activation(act, act == Act::kElu ? 1.f : 0.1f));
  Rng rng(11);
  d.bind(Shape{width}, &rng, {});
  for (Param* p : d.params())  // a non-zero bias exercises the epilogue
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value[i] += 0.01f * (i % 5);
  Checker ch(d, 7, Shape{width});
  ch.check(3e-2);
}

INSTANTIATE_TEST_SUITE_P(Acts, FusedDenseGradTest,
                         ::testing::Combine(::testing::Values(Act::kIdentity, Act::kRelu,
                                                              Act::kLeakyRelu, Act::kElu,
                                                              Act::kTanh, Act::kSigmoid),
                                            ::testing::Values<int64_t>(1, 33, 257)));

// Dense through spmm: with a mostly-zero x (forward, and dW = x^T dy), and
// with a dense x whose ReLU masks dy (dW^T = dy^T x, and dx = dy W^T). Each
// case checks the numerical gradient, that the sparse path was really taken
// on this target, and that the result matches the reference table's sgemm.
class SparseDenseGradTest : public ::testing::TestWithParam<bool> {};

TEST_P(SparseDenseGradTest, MatchesNumericalGradientAndTheDensePath) {
  const bool sparse_x = GetParam();
  // The first target here whose table takes the sparse path at all.
  const Kernels* target = nullptr;
  for (const char* name : {"wasm-relaxed-simd", "wasm-simd128", "avx2", "avx512"}) {
    if (select_kernels(name) && kernels().spmm_max_density > 0.f) {
      target = &kernels();
      break;
    }
  }
  struct AutoAgain {  // whatever way the test ends
    ~AutoAgain() { select_kernels("auto"); }
  } restore;
  if (!target) GTEST_SKIP() << "no kernel table here takes the sparse path";
  const Kernels& kn = *target;
  const int64_t batch = 16, width = 100, units = 64;
  Dense d(units, "he", true);
  ASSERT_TRUE(d.fuse_activation(Act::kRelu, 0.f));
  Rng rng(5);
  d.bind(Shape{width}, &rng, {});
  // A negative bias: the ReLU zeroes about 2/3 of its outputs.
  for (int64_t i = 0; i < units; ++i) d.params()[1]->value[i] = -0.5f + 0.01f * float(i % 5);
  Checker ch(d, batch, Shape{width});
  if (sparse_x) {
    for (int64_t i = 0; i < ch.x.numel(); ++i)
      if (i % 10 < 7) ch.x[i] = 0.f;  // 30% nonzero, like a ReLU's output or an image
  }
  ch.loss();
  EXPECT_EQ(use_spmm(kn, ch.x.data(), batch, width, width, units), sparse_x);
  // y = relu(.) is zero where dy will be masked to zero.
  ASSERT_TRUE(sparser_than(ch.y.data(), int(batch), int(units), int(units), kn.spmm_max_density))
      << "the ReLU left too few zeros for dy to take the sparse path";
  ch.check(3e-2);

  // The same forward and backward on the reference table (sgemm only).
  ch.loss();  // check() left y at its last perturbed point
  Tensor dy = ch.r, dx(ch.x.shape());
  std::vector<Tensor> got;
  d.backward(ch.x.view(), ch.y.view(), dy.view(), dx.view());
  for (Param* p : d.params()) got.push_back(p->grad);
  Tensor dx_got = dx, y_got = ch.y;
  ASSERT_TRUE(select_kernels("scalar"));
  ch.loss();
  dy = ch.r;
  d.backward(ch.x.view(), ch.y.view(), dy.view(), dx.view());
  auto close = [](const Tensor& a, const Tensor& b, const char* what) {
    ASSERT_EQ(a.numel(), b.numel());
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-5f * (1.f + std::fabs(b[i]))) << what << "[" << i << "]";
  };
  close(y_got, ch.y, "y");
  close(dx_got, dx, "dx");
  for (size_t i = 0; i < got.size(); ++i) close(got[i], d.params()[i]->grad, "param grad");
}

INSTANTIATE_TEST_SUITE_P(SparseX, SparseDenseGradTest, ::testing::Bool());

TEST(Dropout, TrainingMaskScalesAndEvaluationIsIdentity) {
  Dropout d(0.25f);
  Rng rng(1);
  d.bind(Shape{1000}, &rng, {});
  Tensor x(Shape{4, 1000}), y(Shape{4, 1000});
  x.view().fill(1.f);
  ForwardContext train{true, &rng};
  d.forward(x.view(), y.view(), train);
  int zeros = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (y[i] == 0.f)
      ++zeros;
    else
      EXPECT_FLOAT_EQ(y[i], 1.f / 0.75f);
  }
  EXPECT_NEAR(zeros / 4000.0, 0.25, 0.03);
  ForwardContext eval{false, nullptr};
  d.forward(x.view(), y.view(), eval);
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y[i], 1.f);
}

class LossGradTest : public ::testing::TestWithParam<std::tuple<LossKind, int64_t, int64_t>> {};

TEST_P(LossGradTest, MatchesNumericalGradient) {
  auto [kind, rows, cols] = GetParam();
  Tensor z(Shape{rows, cols}), g(Shape{rows, cols});
  Rng rng(3);
  for (int64_t i = 0; i < z.numel(); ++i) z[i] = 2 * rng.normal();
  std::vector<int32_t> labels(rows);
  for (auto& l : labels) l = static_cast<int32_t>(rng.below(cols));
  compute_loss(kind, z.view(), labels.data(), g.view(), nullptr);
  const float eps = 1e-2f;
  for (int64_t i = 0; i < std::min<int64_t>(z.numel(), 40); ++i) {
    const float old = z[i];
    z[i] = old + eps;
    const double lp = compute_loss(kind, z.view(), labels.data(), {}, nullptr);
    z[i] = old - eps;
    const double lm = compute_loss(kind, z.view(), labels.data(), {}, nullptr);
    z[i] = old;
    EXPECT_NEAR(g[i], (lp - lm) / (2 * eps), 1e-3 + 2e-2 * std::fabs(g[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Losses, LossGradTest,
                         ::testing::Combine(::testing::Values(LossKind::kSoftmaxCrossEntropy,
                                                              LossKind::kMse),
                                            ::testing::Values<int64_t>(1, 7, 33),
                                            ::testing::Values<int64_t>(1, 7, 257)));

TEST(Loss, SoftmaxCrossEntropyKnownValueAndStability) {
  Tensor z(Shape{1, 3});
  z[0] = 1000.f, z[1] = 1000.f, z[2] = 1000.f;  // would overflow a naive exp
  int32_t label = 1;
  int64_t correct = 0;
  const float l = softmax_cross_entropy(z.view(), &label, {}, &correct);
  EXPECT_NEAR(l, std::log(3.f), 1e-5);
  z[0] = 0.f, z[1] = 2.f, z[2] = 0.f;
  correct = 0;
  EXPECT_NEAR(softmax_cross_entropy(z.view(), &label, {}, &correct),
              -std::log(std::exp(2.f) / (2 + std::exp(2.f))), 1e-5);
  EXPECT_EQ(correct, 1);
}

}  // namespace
}  // namespace dnnlab::nn
