// The model as a graph: multi-input nodes and fan-out against numerical
// gradients, parts built alone against the whole model, gradient
// accumulation, and BatchNorm's running statistics in a weights file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "nn/layers.hpp"
#include "nn/model.hpp"
#include "nn/registry.hpp"
#include "nn/safetensors.hpp"

namespace dnnlab::nn {
namespace {

LayerSpec node(const char* type, int64_t units = 0, std::string name = "",
               std::vector<std::string> inputs = {}) {
  LayerSpec s;
  s.type = type;
  if (units) s.attrs.num["units"] = static_cast<double>(units);
  s.name = std::move(name);
  s.inputs = std::move(inputs);
  return s;
}

Tensor random(Shape s, uint64_t seed) {
  Tensor t(s);
  Rng r(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = r.normal();
  return t;
}

// A graph with every kind of edge: the input read twice (fan-out from the
// input), a node read by three consumers, add of three inputs, concat, a
// fused activation and one that cannot fuse (its dense is read elsewhere).
ModelSpec dag() {
  ModelSpec m;
  m.loss = "mse";
  m.layers = {
      node("dense", 6, "a"),
      node("tanh", 0, "a_act"),
      node("dense", 6, "b", {"input"}),
      node("sigmoid", 0, "", {"b"}),
      node("add", 0, "s", {"a_act", "@-1", "a_act"}),
      node("concat", 0, "c", {"s", "b"}),
      node("batchnorm", 0, "bn"),
      node("dense", 3, "out"),
  };
  return m;
}

double sum_r(const TensorView& y, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += double(y[i]) * r[i];
  return s;
}

// The gateway counts a ticket's parameters without building the model.
TEST(Graph, CountParamsFromShapesMatchesTheBuiltModel) {
  const Shape in{5};
  EXPECT_EQ(Model::count_params(dag(), in, 3), Model::build(dag(), in, 3, 1).num_params());
  ModelSpec wide;
  wide.layers = {node("dense", 4096), node("relu"), node("dense", 4096), node("dense", 10)};
  EXPECT_EQ(Model::count_params(wide, Shape{784}, 10),
            784 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10);
  EXPECT_THROW(Model::count_params(wide, Shape{784}, 7), SpecError);
}

TEST(Graph, BackwardMatchesNumericalGradientThroughFanOutAddConcat) {
  for (bool training : {false, true}) {
    Model m = Model::build(dag(), Shape{5}, 3, 7);
    EXPECT_NE(m.summary().find("<- a_act"), std::string::npos) << m.summary();
    Tensor x = random(Shape{4, 5}, 1), r = random(Shape{4, 3}, 2);
    m.set_input_grad(true);
    // Loss = sum(r * out); with training on, BatchNorm uses batch statistics
    // (its running statistics move, which the output does not read).
    m.forward_to("out", x.view(), training);
    m.backward_from("out", r.view());
    std::vector<Tensor> grads;
    for (Param* p : m.params()) grads.push_back(p->grad);
    Tensor in_grad(Shape{4, 5});
    std::memcpy(in_grad.data(), m.input_grad().data(), sizeof(float) * 20);
    auto loss = [&] { return sum_r(m.forward(x.view(), training), r); };
    const float eps = 1e-2f;
    for (int64_t i = 0; i < 20; ++i) {
      const float old = x[i];
      x[i] = old + eps;
      const double lp = loss();
      x[i] = old - eps;
      const double lm = loss();
      x[i] = old;
      EXPECT_NEAR(in_grad[i], (lp - lm) / (2 * eps), 2e-2 + 2e-2 * std::fabs((lp - lm) / (2 * eps)))
          << "d/dx[" << i << "] training " << training;
    }
    auto ps = m.params();
    ASSERT_EQ(ps.size(), grads.size());
    for (size_t k = 0; k < ps.size(); ++k)
      for (int64_t i = 0; i < std::min<int64_t>(ps[k]->value.numel(), 5); ++i) {
        const float old = ps[k]->value[i];
        ps[k]->value[i] = old + eps;
        const double lp = loss();
        ps[k]->value[i] = old - eps;
        const double lm = loss();
        ps[k]->value[i] = old;
        const double num = (lp - lm) / (2 * eps);
        EXPECT_NEAR(grads[k][i], num, 2e-2 + 2e-2 * std::fabs(num))
            << ps[k]->name << "[" << i << "]";
      }
  }
}

TEST(Graph, BadInputsAreSpecErrorsNamingTheLayer) {
  ModelSpec m = dag();
  m.layers[4].inputs = {"a_act", "nope"};
  m.layers[4].where = {"m.yaml", 9, 3};
  try {
    Model::validate(m, Shape{5}, 3);
    FAIL() << "no error";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.where().line, 9);
    EXPECT_NE(std::string(e.what()).find("'nope' names no earlier layer"), std::string::npos);
  }
  m = dag();
  m.layers[5].inputs = {"s", "a"};  // concat of [6] and [6] is fine; add of [6] and [12] is not
  m.layers.insert(m.layers.begin() + 6, node("add", 0, "", {"c", "a"}));
  EXPECT_THROW(Model::validate(m, Shape{5}, 3), SpecError);
  m = dag();
  m.layers[4].inputs = {"a_act"};  // add needs two
  EXPECT_THROW(Model::validate(m, Shape{5}, 3), SpecError);
}

ModelSpec two_parts() {
  ModelSpec m;
  m.layers = {node("dense", 8, "h"),    node("relu"),    node("batchnorm"),
              node("dense", 6, "feat"), node("relu"),    node("dense", 5),
              node("relu", 0, "", {}),  node("dense", 3)};
  m.parts = {{"features", 0, 5}, {"classifier", 5, 8}};
  return m;
}

// Split training: features on one machine, classifier on another, exchanging
// activations and their gradients, gives the whole model's gradients.
TEST(Graph, PartsTrainLikeTheWholeModel) {
  const ModelSpec spec = two_parts();
  Model whole = Model::build(spec, Shape{1, 3, 4}, 3, 11);
  Model f = Model::build_part(spec, "features", Shape{1, 3, 4}, 3, 11);
  Model c = Model::build_part(spec, "classifier", Shape{1, 3, 4}, 3, 11);
  EXPECT_EQ(f.input_shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(c.input_shape(), Shape{6});
  EXPECT_EQ(f.num_params() + c.num_params(), whole.num_params());
  // Same names and initial values as the whole model.
  auto wp = whole.params();
  std::vector<Param*> split = f.params();
  for (Param* p : c.params()) split.push_back(p);
  ASSERT_EQ(wp.size(), split.size());
  for (size_t k = 0; k < wp.size(); ++k) {
    EXPECT_EQ(wp[k]->name, split[k]->name);
    ASSERT_EQ(wp[k]->value.numel(), split[k]->value.numel());
    EXPECT_EQ(0, std::memcmp(wp[k]->value.data(), split[k]->value.data(),
                             sizeof(float) * wp[k]->value.numel()));
  }
  Tensor x = random(Shape{5, 1, 3, 4}, 3);
  const int32_t labels[5] = {0, 2, 1, 1, 0};
  const float lw = whole.backward_loss(x.view(), labels);
  // forward_to the part boundary on the whole model is the features output.
  TensorView h_whole = whole.forward_to("features", x.view(), true);
  TensorView h = f.forward(x.view(), true);
  for (int64_t i = 0; i < h.numel(); ++i) EXPECT_FLOAT_EQ(h[i], h_whole[i]);
  c.set_input_grad(true);
  const float lc = c.backward_loss(h, labels);
  EXPECT_NEAR(lw, lc, 1e-5);
  Tensor dh(h.shape());
  std::memcpy(dh.data(), c.input_grad().data(), sizeof(float) * dh.numel());
  f.forward(x.view(), true);
  f.backward_from("features", dh.view());
  for (size_t k = 0; k < wp.size(); ++k)
    for (int64_t i = 0; i < wp[k]->grad.numel(); ++i)
      ASSERT_NEAR(wp[k]->grad[i], split[k]->grad[i], 1e-5 + 1e-4 * std::fabs(wp[k]->grad[i]))
          << wp[k]->name << "[" << i << "]";
  EXPECT_THROW(Model::build_part(spec, "head", Shape{1, 3, 4}, 3, 11), SpecError);
  EXPECT_THROW(whole.forward_to("head", x.view(), false), ShapeError);
}

// An empty last part (`classifier: []`) is the identity: the whole model
// on one side, only the loss on the other, and the same gradients bit for
// bit as the whole model's. Only the last part may be empty.
TEST(Graph, AnEmptyLastPartIsTheIdentityBeforeTheLoss) {
  ModelSpec spec = two_parts();
  spec.parts = {{"features", 0, 8}, {"classifier", 8, 8}};
  Model whole = Model::build(spec, Shape{1, 3, 4}, 3, 11);
  Model f = Model::build_part(spec, "features", Shape{1, 3, 4}, 3, 11);
  Model c = Model::build_part(spec, "classifier", Shape{1, 3, 4}, 3, 11);
  EXPECT_EQ(c.num_params(), 0);
  EXPECT_TRUE(c.saved_tensors().empty());
  EXPECT_EQ(c.input_shape(), Shape{3});
  EXPECT_EQ(c.output_shape(), Shape{3});
  EXPECT_EQ(f.num_params(), whole.num_params());
  Tensor x = random(Shape{5, 1, 3, 4}, 3);
  const int32_t labels[5] = {0, 2, 1, 1, 0};
  float acc_whole = 0, acc_split = 0;
  const float lw = whole.backward_loss(x.view(), labels, &acc_whole);
  const TensorView h = f.forward(x.view(), true);
  c.set_input_grad(true);
  EXPECT_EQ(c.backward_loss(h, labels, &acc_split), lw);
  EXPECT_EQ(acc_split, acc_whole);
  f.backward_from("features", c.input_grad());
  auto wp = whole.params(), fp = f.params();
  ASSERT_EQ(wp.size(), fp.size());
  for (size_t k = 0; k < wp.size(); ++k)
    for (int64_t i = 0; i < wp[k]->grad.numel(); ++i)
      ASSERT_EQ(wp[k]->grad[i], fp[k]->grad[i]) << wp[k]->name << "[" << i << "]";
  // A trailing softmax folded into the loss empties a last part too.
  ModelSpec soft = two_parts();
  soft.layers.push_back(node("softmax"));
  soft.parts = {{"features", 0, 8}, {"classifier", 8, 9}};
  EXPECT_EQ(Model::build_part(soft, "classifier", Shape{12}, 3, 1).num_params(), 0);
  soft.parts = {{"features", 0, 9}, {"classifier", 9, 9}};
  EXPECT_EQ(Model::build_part(soft, "classifier", Shape{12}, 3, 1).input_shape(), Shape{3});
  // Any other empty part is refused by name.
  ModelSpec middle = two_parts();
  middle.parts = {{"features", 0, 0}, {"classifier", 0, 8}};
  try {
    Model::validate(middle, Shape{12}, 3);
    FAIL() << "accepted an empty first part";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("'features' has no layers"), std::string::npos)
        << e.what();
  }
}

TEST(Graph, PartsMeetOnlyAtTheirBoundary) {
  ModelSpec spec = two_parts();
  spec.layers[5].inputs = {"h"};  // the classifier reads inside the features part
  EXPECT_THROW(Model::validate(spec, Shape{12}, 3), SpecError);
}

// Two half batches accumulated = the full batch's gradient, times two (each
// half's loss is a mean over half as many samples).
TEST(Graph, GradientsAccumulateUntilZeroGrad) {
  ModelSpec spec = two_parts();
  spec.parts.clear();
  Model full = Model::build(spec, Shape{12}, 3, 5);
  Model acc = Model::build(spec, Shape{12}, 3, 5);
  Tensor x = random(Shape{8, 12}, 4);
  const int32_t labels[8] = {0, 1, 2, 0, 1, 2, 0, 1};
  full.backward_loss(x.view(), labels);
  acc.set_accumulate_grads(true);
  acc.zero_grad();
  // BatchNorm's batch statistics differ between halves and the whole; the
  // accumulation is what is tested, so the halves are compared with
  // themselves: accumulate(h1, h2) == grad(h1) + grad(h2).
  Model one = Model::build(spec, Shape{12}, 3, 5);
  std::vector<Tensor> g1, g2;
  one.backward_loss(x.view().rows(0, 4), labels);
  for (Param* p : one.params()) g1.push_back(p->grad);
  one.backward_loss(x.view().rows(4, 4), labels + 4);
  for (Param* p : one.params()) g2.push_back(p->grad);
  acc.backward_loss(x.view().rows(0, 4), labels);
  acc.backward_loss(x.view().rows(4, 4), labels + 4);
  auto ps = acc.params();
  for (size_t k = 0; k < ps.size(); ++k)
    for (int64_t i = 0; i < ps[k]->grad.numel(); ++i)
      ASSERT_NEAR(ps[k]->grad[i], g1[k][i] + g2[k][i], 1e-5 + 1e-5 * std::fabs(g1[k][i]))
          << ps[k]->name;
  acc.zero_grad();
  for (Param* p : acc.params())
    for (int64_t i = 0; i < p->grad.numel(); ++i) ASSERT_EQ(p->grad[i], 0.f);
  // Without accumulation a second pass overwrites.
  one.backward_loss(x.view().rows(0, 4), labels);
  auto po = one.params();
  for (size_t k = 0; k < po.size(); ++k)
    for (int64_t i = 0; i < po[k]->grad.numel(); ++i) ASSERT_FLOAT_EQ(po[k]->grad[i], g1[k][i]);
}

TEST(Graph, RunningStatisticsTravelWithTheWeights) {
  ModelSpec spec;
  spec.layers = {node("dense", 16), node("batchnorm", 0, "bn"), node("relu"), node("dense", 4)};
  Model a = Model::build(spec, Shape{1, 2, 5}, 4, 1);
  Optimizer opt(OptimizerSpec{}, a.params());
  Tensor x = random(Shape{32, 1, 2, 5}, 9);
  std::vector<int32_t> y(32);
  for (int i = 0; i < 32; ++i) y[size_t(i)] = i % 4;
  for (int s = 0; s < 5; ++s) a.train_step(x.view(), y.data(), opt);
  auto st = a.state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0]->name, "bn.running_mean");
  EXPECT_NE(st[0]->value[0], 0.f);  // moved by training
  const std::string bytes = to_safetensors(a.saved_tensors());
  Model b = Model::build(spec, Shape{1, 2, 5}, 4, 2);
  from_safetensors(bytes, b.saved_tensors());
  TensorView ya = a.forward(x.view(), false);
  std::vector<float> first(ya.data(), ya.data() + ya.numel());
  TensorView yb = b.forward(x.view(), false);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], yb[int64_t(i)]);
  // Weights alone do not reproduce the evaluation output.
  Model c = Model::build(spec, Shape{1, 2, 5}, 4, 2);
  from_safetensors(to_safetensors(a.params()), c.params());
  TensorView yc = c.forward(x.view(), false);
  bool differs = false;
  for (size_t i = 0; i < first.size(); ++i) differs = differs || first[i] != yc[int64_t(i)];
  EXPECT_TRUE(differs);
}

// BatchNorm against a naive two-pass reference, on a [C, H, W] input with
// odd sizes: training output, running statistics, evaluation output.
TEST(BatchNormLayer, MatchesNaiveReference) {
  const int64_t B = 3, C = 2, H = 3, W = 5, S = H * W;
  BatchNorm bn(0.25f, 1e-3f);
  Rng rng(1);
  bn.bind(Shape{C, H, W}, &rng, {});
  Param* g = bn.params()[0];
  Param* b = bn.params()[1];
  g->value[0] = 1.5f, g->value[1] = -0.5f, b->value[0] = 0.25f, b->value[1] = 2.f;
  Tensor x = random(Shape{B, C, H, W}, 5), y(Shape{B, C, H, W});
  ForwardContext train{true, nullptr}, eval{false, nullptr};
  bn.forward(x.view(), y.view(), train);
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = 0; j < S; ++j) m += x[(i * C + c) * S + j];
    m /= B * S;
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = 0; j < S; ++j) v += std::pow(x[(i * C + c) * S + j] - m, 2);
    const double var = v / (B * S), unbiased = v / (B * S - 1);
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = 0; j < S; ++j) {
        const int64_t k = (i * C + c) * S + j;
        EXPECT_NEAR(y[k], g->value[c] * (x[k] - m) / std::sqrt(var + 1e-3) + b->value[c], 1e-4);
      }
    EXPECT_NEAR(bn.state()[0]->value[c], 0.25 * m, 1e-5);
    EXPECT_NEAR(bn.state()[1]->value[c], 0.75 + 0.25 * unbiased, 1e-5);
  }
  bn.forward(x.view(), y.view(), eval);
  for (int64_t k = 0; k < x.numel(); ++k) {
    const int64_t c = (k / S) % C;
    const float rm = bn.state()[0]->value[c], rv = bn.state()[1]->value[c];
    EXPECT_NEAR(y[k], g->value[c] * (x[k] - rm) / std::sqrt(rv + 1e-3f) + b->value[c], 1e-4);
  }
}

TEST(ConcatLayer, JoinsChannelsOfShapedInputs) {
  Concat cat;
  const Shape ins[] = {Shape{2, 3, 1}, Shape{1, 3, 1}};
  cat.bind(ins, nullptr, {});
  EXPECT_EQ(cat.out_shape(), (Shape{3, 3, 1}));
  Tensor a(Shape{2, 2, 3, 1}), b(Shape{2, 1, 3, 1}), y(Shape{2, 3, 3, 1});
  for (int i = 0; i < 12; ++i) a[i] = float(i);
  for (int i = 0; i < 6; ++i) b[i] = 100.f + float(i);
  ForwardContext ctx;
  const TensorView xs[] = {a.view(), b.view()};
  cat.forward_n(xs, y.view(), ctx);
  const float want[] = {0, 1, 2, 3, 4, 5, 100, 101, 102, 6, 7, 8, 9, 10, 11, 103, 104, 105};
  for (int i = 0; i < 18; ++i) EXPECT_EQ(y[i], want[i]) << i;
  const Shape bad[] = {Shape{2, 3, 1}, Shape{1, 2, 1}};
  EXPECT_THROW(cat.bind(bad, nullptr, {}), SpecError);
}

}  // namespace
}  // namespace dnnlab::nn
