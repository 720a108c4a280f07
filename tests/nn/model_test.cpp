// Model building (fusion, shape errors), determinism, learning a toy
// problem, and safetensors round trips.
#include "nn/model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "nn/safetensors.hpp"
#include "nn/train.hpp"

namespace dnnlab::nn {
namespace {

LayerSpec L(const char* type, int64_t units = 0, float alpha = 0.f, int line = 0) {
  LayerSpec s;
  s.type = type;
  if (units) s.attrs.num["units"] = static_cast<double>(units);
  if (alpha != 0.f) s.attrs.num[s.type == "dropout" ? "rate" : "alpha"] = alpha;
  s.where = {"m.yaml", line, 5};
  return s;
}

ModelSpec mlp(std::vector<LayerSpec> layers) {
  ModelSpec m;
  m.layers = std::move(layers);
  return m;
}

// Toy data: 3 classes separated by which of the first 3 features is largest.
struct Toy {
  Tensor x{Shape{300, 8}};
  std::vector<int32_t> y = std::vector<int32_t>(300);
  Toy() {
    Rng r(42);
    for (int i = 0; i < 300; ++i) {
      for (int j = 0; j < 8; ++j) x[i * 8 + j] = r.normal();
      y[i] = x[i * 8] > x[i * 8 + 1] ? (x[i * 8] > x[i * 8 + 2] ? 0 : 2)
                                     : (x[i * 8 + 1] > x[i * 8 + 2] ? 1 : 2);
    }
  }
};

uint64_t weight_hash(Model& m) {
  uint64_t h = 1469598103934665603ull;
  for (Param* p : m.params()) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(p->value.data());
    for (int64_t i = 0; i < p->value.numel() * 4; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

TEST(Model, FusesActivationsIntoDense) {
  Model m =
      Model::build(mlp({L("dense", 16), L("relu"), L("dense", 3), L("softmax")}), Shape{8}, 3, 1);
  const std::string sum = m.summary();
  EXPECT_NE(sum.find("dense 8->16 +relu"), std::string::npos) << sum;
  EXPECT_EQ(sum.find("relu"), sum.rfind("relu")) << "relu should not be a layer of its own:\n"
                                                 << sum;
  EXPECT_EQ(m.num_params(), 8 * 16 + 16 + 16 * 3 + 3);
  EXPECT_EQ(m.output_shape(), Shape{3});
}

TEST(Model, ImpossibleShapesNameTheLayer) {
  try {
    Model::validate(mlp({L("dense", 16, 0, 3), L("dense", 7, 0, 4)}), Shape{784}, 10);
    FAIL() << "expected SpecError";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("m.yaml:4:5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("10 classes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Model::validate(mlp({L("dense", 0, 0, 2)}), Shape{4}, 0), SpecError);
  // Validation allocates no weights, and absurd sizes are refused by name.
  Model::validate(mlp({L("dense", 100000), L("dense", 10)}), Shape{784}, 10);
  EXPECT_THROW(Model::validate(mlp({L("dense", int64_t{1} << 30)}), Shape{784}, 0), SpecError);
  EXPECT_THROW(Model::validate(mlp({L("softmax")}), Shape{4, 4}, 0), SpecError);
  EXPECT_THROW(Model::validate(mlp({}), Shape{4}, 0), SpecError);
  EXPECT_THROW(Model::validate(mlp({L("conv9")}), Shape{4}, 0), SpecError);
}

TEST(Model, WrongInputWidthAtRunTimeIsAShapeError) {
  Model m = Model::build(mlp({L("dense", 3)}), Shape{8}, 3, 1);
  Tensor x(Shape{2, 9});
  EXPECT_THROW(m.forward(x.view(), false), ShapeError);
}

// A spec's `input` reshapes the data's samples when the counts agree (a
// [784] set read as [1, 28, 28] by a conv net), is refused by name when they
// do not, and the data's shape is used when the spec gives none.
TEST(Model, SpecInputReshapesTheDataOrIsRefused) {
  ModelSpec m = mlp({L("dense", 3)});
  EXPECT_EQ(model_input(m, Shape{784}), Shape{784});
  EXPECT_EQ(model_input(m, Shape{1, 28, 28}), (Shape{1, 28, 28}));
  m.input = {1, 28, 28};
  EXPECT_EQ(model_input(m, Shape{784}), (Shape{1, 28, 28}));
  m.input = {3, 16, 16};
  try {
    model_input(m, Shape{784});
    FAIL() << "expected SpecError";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("model.input"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("784"), std::string::npos) << e.what();
  }
}

TEST(Model, LearnsAToyProblem) {
  Toy t;
  Model m = Model::build(mlp({L("dense", 32), L("tanh"), L("dense", 3)}), Shape{8}, 3, 7);
  TrainSpec ts;
  ts.epochs = 30;
  ts.batch_size = 16;
  ts.optimizer = {.type = "adam", .lr = 0.01f};
  Trainer tr(m, ts);
  LabeledData d{t.x.view(), t.y.data()};
  auto curve = tr.fit(d, &d, nullptr);
  EXPECT_LT(curve.back().train_loss, curve.front().train_loss * 0.5);
  EXPECT_GT(curve.back().val_acc, 0.9);
}

TEST(Model, SameSeedSameWeightsBitForBit) {
  Toy t;
  auto train = [&](uint64_t seed) {
    Model m = Model::build(mlp({L("dense", 16), L("relu"), L("dropout", 0, 0.2f), L("dense", 3)}),
                           Shape{8}, 3, seed);
    TrainSpec ts;
    ts.epochs = 3;
    ts.batch_size = 7;
    ts.seed = seed;
    ts.optimizer = {.type = "sgd", .lr = 0.05f, .momentum = 0.9f};
    Trainer tr(m, ts);
    LabeledData d{t.x.view(), t.y.data()};
    tr.fit(d, nullptr, nullptr);
    return weight_hash(m);
  };
  EXPECT_EQ(train(3), train(3));
  EXPECT_NE(train(3), train(4));
}

TEST(Model, AnEpochInPiecesIsTheSameEpochBitForBit) {
  Toy t;
  LabeledData d{t.x.view(), t.y.data()};
  TrainSpec ts;
  ts.epochs = 3;
  ts.batch_size = 7;  // 300 = 42 x 7 + 6: a short last batch
  ts.seed = 5;
  ts.schedule = {.type = "step", .step_epochs = 1, .gamma = 0.5f};
  ts.optimizer = {.type = "sgd", .lr = 0.05f, .momentum = 0.9f};
  auto model = [] {
    return Model::build(mlp({L("dense", 16), L("relu"), L("dropout", 0, 0.2f), L("dense", 3)}),
                        Shape{8}, 3, 5);
  };
  Model whole = model();
  Trainer tw(whole, ts);
  Model pieces = model();
  Trainer tp(pieces, ts);
  for (int e = 0; e < ts.epochs; ++e) {
    const EpochResult a = tw.run_epoch(e, d, &d, nullptr);
    tp.begin_epoch(e, d);
    int calls = 1;
    while (!tp.epoch_batches(d, 5, nullptr)) {
      EXPECT_EQ(tp.epoch_samples_done(), calls * 5 * 7);
      ++calls;
    }
    EXPECT_EQ(calls, 9);  // 43 batches, 5 at a time
    EXPECT_EQ(tp.epoch_samples_done(), tp.epoch_samples());
    const EpochResult b = tp.end_epoch(&d, nullptr);
    EXPECT_FALSE(tp.in_epoch());
    EXPECT_EQ(a.epoch, b.epoch);
    EXPECT_EQ(a.train_loss, b.train_loss);
    EXPECT_EQ(a.train_acc, b.train_acc);
    EXPECT_EQ(a.val_loss, b.val_loss);
    EXPECT_EQ(a.lr, b.lr);
    EXPECT_EQ(weight_hash(whole), weight_hash(pieces)) << "epoch " << e;
  }
  EXPECT_THROW(tp.epoch_batches(d, 1, nullptr), std::logic_error);
}

TEST(Model, DeepTanhStackStaysFinite) {
  std::vector<LayerSpec> layers;
  for (int i = 0; i < 200; ++i) {
    layers.push_back(L("dense", 16));
    layers.push_back(L("tanh"));
  }
  layers.push_back(L("dense", 3));
  ModelSpec spec = mlp(layers);
  spec.init = "lecun";
  Model m = Model::build(spec, Shape{8}, 3, 1);
  Toy t;
  TrainSpec ts;
  ts.epochs = 1;
  ts.batch_size = 32;
  ts.optimizer = {.type = "sgd", .lr = 0.01f};
  Trainer tr(m, ts);
  LabeledData d{t.x.view(), t.y.data()};
  auto r = tr.fit(d, &d, nullptr);
  EXPECT_TRUE(std::isfinite(r.back().train_loss));
}

TEST(Safetensors, RoundTripAndErrors) {
  Model a = Model::build(mlp({L("dense", 5), L("relu"), L("dense", 3)}), Shape{8}, 3, 1);
  Model b = Model::build(mlp({L("dense", 5), L("relu"), L("dense", 3)}), Shape{8}, 3, 2);
  std::string bytes = to_safetensors(a.params(), {{"seed", "1"}, {"note", "quote\"d"}});
  EXPECT_EQ(bytes.size() % 4, 0u);
  auto meta = from_safetensors(bytes, b.params());
  EXPECT_EQ(meta["seed"], "1");
  EXPECT_EQ(meta["note"], "quote\"d");
  EXPECT_EQ(weight_hash(a), weight_hash(b));
  EXPECT_NE(bytes.find("\"0.dense.weight\":{\"dtype\":\"F32\",\"shape\":[8,5]"), std::string::npos);

  EXPECT_THROW(from_safetensors(bytes.substr(0, 5), b.params()), DataError);
  EXPECT_THROW(from_safetensors(bytes.substr(0, bytes.size() - 4), b.params()), DataError);
  std::string corrupt = bytes;
  corrupt[8] = '!';  // the header's opening brace
  EXPECT_THROW(from_safetensors(corrupt, b.params()), DataError);
  std::string deep(8, '\0');
  const std::string nested = std::string(100000, '[') + std::string(100000, ']');
  for (int i = 0; i < 8; ++i) deep[i] = static_cast<char>((nested.size() >> (8 * i)) & 0xff);
  EXPECT_THROW(from_safetensors(deep + nested, b.params()), DataError);
  Model c = Model::build(mlp({L("dense", 6), L("dense", 3)}), Shape{8}, 3, 1);
  try {
    from_safetensors(bytes, c.params(), "w.safetensors");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("shape"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dnnlab::nn
