// The spec the gateway writes for a browser (core_spec_json) read back by
// the browser core's reader (src/wasm/spec_json.cpp, compiled natively here):
// a CNN with every kernel layer, a residual block, a concat and named parts
// comes back as the same nn::ModelSpec and optimizer, so a browser builds the
// very graph the native verifier re-runs.
#include <gtest/gtest.h>

#include "nn/model.hpp"
#include "nn/registry.hpp"
#include "server/gateway.hpp"
#include "spec/run_spec.hpp"
#include "spec_json.hpp"

namespace dnnlab::server {
namespace {

constexpr const char* kCnn = R"(name: cnn
data: {dataset: fashion-mnist, validation: 100}
model:
  input: [1, 28, 28]
  init: glorot
  PARTS_OR_LAYERS
train:
  batch_size: 16
  seed: 18446744073709551615
  optimizer: {type: rmsprop, lr: 0.003, alpha: 0.9, momentum: 0.5, centered: true}
  schedule: {type: step, step_epochs: 2, gamma: 0.5}
)";

constexpr const char* kFeatures = R"(
      - {conv2d: 8, kernel: 3, padding: 1, bias: false, init: lecun}
      - {batchnorm: null, momentum: 0.2, eps: 0.001}
      - relu
      - {max_pool2d: 3, stride: 2, padding: 1, name: pool}
      - residual: [{conv2d: 8, padding: 1}, batchnorm, relu, {conv2d: 8, padding: 1}]
      - {conv2d: 4, kernel: 1, stride: 1, name: side, inputs: [pool]}
      - concat: null
        inputs: ['@-2', side]
)";
constexpr const char* kClassifier = R"(
      - {avg_pool2d: 2}
      - {dropout: 0.25}
      - {dense: 10}
)";

std::string with(const std::string& model) {
  std::string s = kCnn;
  s.replace(s.find("PARTS_OR_LAYERS"), 15, model);
  return s;
}

void expect_same_model(const nn::ModelSpec& a, const nn::ModelSpec& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i) + " " + a.layers[i].type);
    EXPECT_EQ(a.layers[i].type, b.layers[i].type);
    EXPECT_EQ(a.layers[i].name, b.layers[i].name);
    EXPECT_EQ(a.layers[i].inputs, b.layers[i].inputs);
    // The YAML reader leaves defaults out inside `residual:` blocks (the
    // factories fall back to them), the JSON reader fills them in: compare
    // with every default filled.
    nn::LayerSpec la = a.layers[i], lb = b.layers[i];
    const nn::LayerInfo* info = nn::find_layer(la.type);
    ASSERT_NE(info, nullptr);
    nn::fill_defaults(*info, la);
    nn::fill_defaults(*info, lb);
    EXPECT_EQ(la.attrs, lb.attrs);
  }
  ASSERT_EQ(a.parts.size(), b.parts.size());
  for (size_t i = 0; i < a.parts.size(); ++i) {
    EXPECT_EQ(a.parts[i].name, b.parts[i].name);
    EXPECT_EQ(a.parts[i].begin, b.parts[i].begin);
    EXPECT_EQ(a.parts[i].end, b.parts[i].end);
  }
  EXPECT_EQ(a.input, b.input);
  EXPECT_EQ(a.init, b.init);
  EXPECT_EQ(a.loss, b.loss);
}

TEST(CoreSpecJson, ACnnWithPartsReadsBackAsTheSameSpec) {
  for (bool parts : {true, false}) {
    SCOPED_TRACE(parts ? "parts" : "layers");
    const std::string model =
        parts ? std::string("parts:\n    features:") + kFeatures + "    classifier:" + kClassifier
              : std::string("layers:") + kFeatures + kClassifier;
    const nn::RunSpec run = spec::parse_run_spec(with(model), "cnn.yaml");
    ASSERT_EQ(run.model.parts.size(), parts ? 2u : 0u);
    const nlohmann::json j = core_spec_json(run, {1, 28, 28}, 10);
    EXPECT_EQ(j.contains("parts"), parts);
    EXPECT_EQ(j.contains("layers"), !parts);
    if (parts) {
      EXPECT_EQ(j["parts"][0]["name"], "features");  // in the spec's order
    }
    const wasm::CoreSpec back = wasm::parse_core_spec(j.dump());
    expect_same_model(run.model, back.model);
    EXPECT_EQ(back.classes, 10);
    const nn::OptimizerSpec &o = run.train.optimizer, &p = back.train.optimizer;
    EXPECT_EQ(p.type, o.type);
    EXPECT_EQ(p.lr, o.lr);
    EXPECT_EQ(p.alpha, o.alpha);
    EXPECT_EQ(p.momentum, o.momentum);
    EXPECT_EQ(p.centered, o.centered);
    EXPECT_EQ(back.train.schedule.type, "step");
    EXPECT_EQ(back.train.schedule.gamma, run.train.schedule.gamma);
    EXPECT_EQ(back.train.seed, run.train.seed);
    EXPECT_EQ(back.train.batch_size, 16);
    // The same graph and the same initial weights on both sides.
    nn::Model a = nn::Model::build(run.model, nn::Shape{1, 28, 28}, 10, run.train.seed);
    nn::Model b = nn::Model::build(back.model, nn::Shape{1, 28, 28}, 10, back.train.seed);
    EXPECT_EQ(a.summary(), b.summary());
    ASSERT_EQ(a.num_params(), b.num_params());
    auto pa = a.params(), pb = b.params();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i)
      for (int64_t k = 0; k < pa[i]->value.numel(); ++k)
        ASSERT_EQ(pa[i]->value[k], pb[i]->value[k]) << "param " << i;
  }
}

TEST(CoreSpecJson, TheReaderRefusesBadParts) {
  auto err = [](const std::string& json) {
    try {
      wasm::parse_core_spec(json);
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head = R"({"input": [4], "classes": 2, )";
  const std::string dense = R"({"type": "dense", "units": 2})";
  EXPECT_NE(err(head + R"("layers": [)" + dense + R"(], "parts": [{"name": "a", "layers": [)" +
                dense + "]}]}")
                .find("not both"),
            std::string::npos);
  EXPECT_NE(err(head + R"("parts": [{"name": "a", "layers": [)" + dense +
                R"(]}, {"name": "a", "layers": [)" + dense + "]}]}")
                .find("parts[1].name"),
            std::string::npos);
  EXPECT_NE(err(head + R"("parts": [{"layers": [)" + dense + "]}]}").find("parts[0].name"),
            std::string::npos);
  EXPECT_NE(err(head + R"("parts": [{"name": "a", "layers": []}]})").find("parts[0].layers"),
            std::string::npos);
  // Only the last of several parts may be empty (data-parallel: `classifier: []`).
  EXPECT_NE(err(head + R"("parts": [{"name": "a", "layers": []}, {"name": "b", "layers": [)" +
                dense + "]}]}")
                .find("parts[0].layers"),
            std::string::npos);
  const wasm::CoreSpec dp =
      wasm::parse_core_spec(head + R"("parts": [{"name": "features", "layers": [)" + dense +
                            R"(]}, {"name": "classifier", "layers": []}]})");
  ASSERT_EQ(dp.model.parts.size(), 2u);
  EXPECT_EQ(dp.model.parts[1].begin, 1u);
  EXPECT_EQ(dp.model.parts[1].end, 1u);
  EXPECT_NE(err(head + R"("parts": [{"name": "a", "layers": [{"type": "conv9"}]}]})")
                .find("parts[0].layers[0].type"),
            std::string::npos);
  EXPECT_NE(err(head + "\"init\": \"he\"}").find("layers"), std::string::npos);
}

}  // namespace
}  // namespace dnnlab::server
