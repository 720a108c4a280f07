// Run spec parsing: the documented example, the shipped examples, repeat
// expansion, the canonical form's round trip, and a table of malformed specs
// each checked for its file:line:column, field path and message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "nn/model.hpp"
#include "nn/registry.hpp"
#include "spec/layer_list.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::spec {
namespace {

using nn::LayerSpec;
using nn::RunSpec;

const char* kFullExample = R"(name: fashion-mlp
data:
  dataset: fashion-mnist
  validation: 5000
  normalize: standard
  limit_train: 0
model:
  input: [784]
  init: he
  loss: softmax_cross_entropy
  layers:
    - dense: 256
      activation: relu
    - dropout: 0.2
    - repeat: 3
      dense: 128
      activation: tanh
    - repeat: 2
      layers:
        - dense: 64
        - leaky_relu: 0.01
    - relu
    - dense: 10
train:
  epochs: 10
  batch_size: 64
  seed: 1
  optimizer: {type: adam, lr: 0.001, weight_decay: 0.0}
  schedule: {type: cosine, min_lr: 0.0, warmup_epochs: 0}
)";

std::string source_dir() {
  const char* dir = std::getenv("DNNLAB_SOURCE_DIR");
  // Outside ctest: the repository holding this file.
  return dir ? dir : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

// "type units alpha" for each layer, for compact comparisons.
std::vector<std::string> describe(const std::vector<LayerSpec>& layers) {
  std::vector<std::string> out;
  for (const LayerSpec& l : layers) {
    std::string s = l.type;
    if (l.attrs.get("units")) s += " " + std::to_string(static_cast<int64_t>(l.attrs.get("units")));
    const double a = l.attrs.get("alpha", l.attrs.get("rate"));
    if (a != 0) s += " " + std::to_string(static_cast<float>(a)).substr(0, 4);
    out.push_back(s);
  }
  return out;
}

void expect_same(const RunSpec& a, const RunSpec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.data.dataset, b.data.dataset);
  EXPECT_EQ(a.data.validation, b.data.validation);
  EXPECT_EQ(a.data.normalize, b.data.normalize);
  EXPECT_EQ(a.data.limit_train, b.data.limit_train);
  EXPECT_EQ(a.model.input, b.model.input);
  EXPECT_EQ(a.model.init, b.model.init);
  EXPECT_EQ(a.model.loss, b.model.loss);
  ASSERT_EQ(a.model.layers.size(), b.model.layers.size());
  for (size_t i = 0; i < a.model.layers.size(); ++i) {
    const LayerSpec &x = a.model.layers[i], &y = b.model.layers[i];
    EXPECT_EQ(x.type, y.type) << i;
    EXPECT_EQ(x.attrs, y.attrs) << i;
    EXPECT_EQ(x.name, y.name) << i;
    EXPECT_EQ(x.inputs, y.inputs) << i;
  }
  const nn::TrainSpec &s = a.train, &t = b.train;
  EXPECT_EQ(s.epochs, t.epochs);
  EXPECT_EQ(s.batch_size, t.batch_size);
  EXPECT_EQ(s.seed, t.seed);
  EXPECT_EQ(s.optimizer.type, t.optimizer.type);
  EXPECT_EQ(s.optimizer.lr, t.optimizer.lr);
  EXPECT_EQ(s.optimizer.momentum, t.optimizer.momentum);
  EXPECT_EQ(s.optimizer.nesterov, t.optimizer.nesterov);
  EXPECT_EQ(s.optimizer.weight_decay, t.optimizer.weight_decay);
  EXPECT_EQ(s.optimizer.beta1, t.optimizer.beta1);
  EXPECT_EQ(s.optimizer.beta2, t.optimizer.beta2);
  EXPECT_EQ(s.optimizer.eps, t.optimizer.eps);
  EXPECT_EQ(s.schedule.type, t.schedule.type);
  EXPECT_EQ(s.schedule.step_epochs, t.schedule.step_epochs);
  EXPECT_EQ(s.schedule.gamma, t.schedule.gamma);
  EXPECT_EQ(s.schedule.min_lr, t.schedule.min_lr);
  EXPECT_EQ(s.schedule.warmup_epochs, t.schedule.warmup_epochs);
}

TEST(RunSpec, FullExampleExpands) {
  RunSpec run = parse_run_spec(kFullExample, "full.yaml");
  EXPECT_EQ(run.name, "fashion-mlp");
  EXPECT_EQ(run.model.input, std::vector<int64_t>{784});
  std::vector<std::string> expected = {
      "dense 256",       "relu",     "dropout 0.20",    "dense 128", "tanh",
      "dense 128",       "tanh",     "dense 128",       "tanh",      "dense 64",
      "leaky_relu 0.01", "dense 64", "leaky_relu 0.01", "relu",      "dense 10"};
  EXPECT_EQ(describe(run.model.layers), expected);
  // Each layer knows its entry: the activation shorthand shares its dense's.
  EXPECT_EQ(run.model.layers[0].where.line, 12);
  EXPECT_EQ(run.model.layers[0].where.column, 7);
  EXPECT_EQ(run.model.layers[1].where.line, 12);
  EXPECT_EQ(run.model.layers[9].where.line, 20);
  EXPECT_EQ(run.model.layers[14].where.line, 23);
  EXPECT_EQ(run.model.layers[14].where.file, "full.yaml");
  EXPECT_EQ(run.train.optimizer.type, "adam");
  EXPECT_FLOAT_EQ(run.train.optimizer.lr, 0.001f);
  EXPECT_EQ(run.train.schedule.type, "cosine");
  EXPECT_EQ(run.source, kFullExample);
}

TEST(RunSpec, DefaultsAndNameFromFile) {
  RunSpec run = parse_run_spec("model:\n  layers: [dense: 10]\n", "/tmp/runs/my-run.yaml");
  RunSpec defaults;
  EXPECT_EQ(run.name, "my-run");
  EXPECT_EQ(run.data.dataset, defaults.data.dataset);
  EXPECT_EQ(run.train.epochs, defaults.train.epochs);
  EXPECT_EQ(run.train.optimizer.type, defaults.train.optimizer.type);
  EXPECT_EQ(run.train.optimizer.lr, defaults.train.optimizer.lr);
  EXPECT_TRUE(run.model.input.empty());
  ASSERT_EQ(run.model.layers.size(), 1u);
}

TEST(RunSpec, ShorthandsAndOptions) {
  RunSpec run = parse_run_spec(R"(model:
  layers:
    - dense: 32
      init: glorot
      bias: false
      activation: leaky_relu
    - dense: 10
      activation: linear
train:
  optimizer: adamw
  schedule: {type: step, step_epochs: 3, gamma: 0.5}
)",
                               "s.yaml");
  ASSERT_EQ(run.model.layers.size(), 3u);
  EXPECT_EQ(run.model.layers[0].attrs.str("init"), "glorot");
  EXPECT_EQ(run.model.layers[0].attrs.get("bias"), 0);
  EXPECT_EQ(run.model.layers[1].type, "leaky_relu");
  EXPECT_FLOAT_EQ(run.model.layers[1].attrs.get("alpha"), 0.01f);  // the registry's default
  EXPECT_EQ(run.train.optimizer.type, "adamw");
  EXPECT_EQ(run.train.schedule.step_epochs, 3);
}

TEST(RunSpec, AdagradAndRmspropOptions) {
  auto spec = [](const std::string& opt) {
    return "name: o\ndata: {dataset: synthetic, validation: 100}\nmodel:\n  layers: [{dense: 10}]\n"
           "train:\n  optimizer: " +
           opt + "\n";
  };
  RunSpec r = parse_run_spec(
      spec("{type: rmsprop, lr: 0.01, alpha: 0.9, centered: true, momentum: 0.5, eps: 0.001}"),
      "r.yaml");
  EXPECT_EQ(r.train.optimizer.type, "rmsprop");
  EXPECT_FLOAT_EQ(r.train.optimizer.alpha, 0.9f);
  EXPECT_TRUE(r.train.optimizer.centered);
  EXPECT_FLOAT_EQ(r.train.optimizer.momentum, 0.5f);
  RunSpec a = parse_run_spec(
      spec("{type: adagrad, lr: 0.1, lr_decay: 0.5, initial_accumulator: 0.2, eps: 1e-10}"),
      "a.yaml");
  EXPECT_FLOAT_EQ(a.train.optimizer.lr_decay, 0.5f);
  EXPECT_FLOAT_EQ(a.train.optimizer.initial_accumulator, 0.2f);
  EXPECT_FLOAT_EQ(a.train.optimizer.eps, 1e-10f);
  for (const RunSpec* s : {&r, &a}) {
    RunSpec again = parse_run_spec(to_yaml(*s), "again.yaml");
    expect_same(*s, again);
    EXPECT_EQ(again.train.optimizer.alpha, s->train.optimizer.alpha);
    EXPECT_EQ(again.train.optimizer.centered, s->train.optimizer.centered);
    EXPECT_EQ(again.train.optimizer.lr_decay, s->train.optimizer.lr_decay);
    EXPECT_EQ(again.train.optimizer.initial_accumulator, s->train.optimizer.initial_accumulator);
  }
  try {
    parse_run_spec(spec("{type: adam, alpha: 0.9}"), "e.yaml");
    FAIL() << "alpha accepted for adam";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("rmsprop"), std::string::npos) << e.what();
  }
}

// docs/spec.md's layer table is the registry's, generated; they cannot drift.
TEST(RunSpec, DocsLayerTableIsTheRegistrys) {
  std::ifstream f(source_dir() + "/docs/spec.md");
  ASSERT_TRUE(f) << "docs/spec.md not found";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  const std::string open = "<!-- layer table:", close = "<!-- end layer table -->";
  const size_t a = doc.find(open), b = doc.find(close);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  const size_t body = doc.find('\n', a) + 1;
  EXPECT_EQ(doc.substr(body, b - body), nn::layer_table_markdown())
      << "regenerate the table in docs/spec.md from nn::layer_table_markdown()";
}

// docs/spec.md's `optimizer:` and `schedule:` tables, and its tables of
// initializers and losses, are the registry's rows, generated
// (nn::optimizer_table_markdown, nn::schedule_table_markdown,
// nn::initializer_table_markdown, nn::loss_table_markdown).
TEST(RunSpec, DocsOptimizerAndScheduleTablesAreTheRegistrys) {
  std::ifstream f(source_dir() + "/docs/spec.md");
  ASSERT_TRUE(f) << "docs/spec.md not found";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  for (const auto& [name, table] :
       {std::pair<std::string, std::string>{"optimizer", nn::optimizer_table_markdown()},
        {"schedule", nn::schedule_table_markdown()},
        {"init", nn::initializer_table_markdown()},
        {"loss", nn::loss_table_markdown()}}) {
    const std::string open = "<!-- " + name + " table:", close = "<!-- end " + name + " table -->";
    const size_t a = doc.find(open), b = doc.find(close);
    ASSERT_NE(a, std::string::npos) << open;
    ASSERT_NE(b, std::string::npos) << close;
    const size_t body = doc.find('\n', a) + 1;
    EXPECT_EQ(doc.substr(body, b - body), table)
        << "regenerate the " << name
        << " table in docs/spec.md from its nn::*_table_markdown() (src/nn/registry.cpp)";
  }
}

// The model table's `init` and `loss` rows name the registry's initializers
// and losses, the first as the default.
TEST(RunSpec, DocsInitAndLossRowsAreTheRegistrys) {
  std::ifstream f(source_dir() + "/docs/spec.md");
  ASSERT_TRUE(f) << "docs/spec.md not found";
  std::string line;
  std::map<std::string, std::vector<std::string>> rows;  // key -> default, then names
  while (std::getline(f, line))
    for (const char* key : {"init", "loss"}) {
      const std::string head = std::string("| `") + key + "` | ";
      if (line.rfind(head, 0) != 0 || rows.count(key)) continue;
      std::vector<std::string> cells;
      for (size_t a = 0, b; (b = line.find(" | ", a)) != std::string::npos; a = b + 3)
        cells.push_back(line.substr(a, b - a));
      cells.push_back(line.substr(line.rfind(" | ") + 3));
      ASSERT_GE(cells.size(), 3u) << line;
      std::vector<std::string> names{cells[1]};
      const std::string valid = cells[2].substr(0, cells[2].find(':'));
      for (size_t a = valid.find('`'); a != std::string::npos; a = valid.find('`', a + 1)) {
        const size_t b = valid.find('`', a + 1);
        names.push_back("`" + valid.substr(a + 1, b - a - 1) + "`");
        a = b;
      }
      rows[key] = names;
    }
  auto expected = [](std::span<const std::string_view> names) {
    std::vector<std::string> v{"`" + std::string(names[0]) + "`"};
    for (std::string_view n : names) v.push_back("`" + std::string(n) + "`");
    return v;
  };
  EXPECT_EQ(rows["init"], expected(nn::initializer_names()));
  EXPECT_EQ(rows["loss"], expected(nn::loss_names()));
}

std::string with_layers(const std::string& model) {
  return "name: g\ndata: {dataset: synthetic, validation: 100}\nmodel:\n" + model +
         "train: {epochs: 1}\n";
}

// A CNN in the spec: conv2d / max_pool2d / avg_pool2d / global_avg_pool rows
// of the registry read, round-trip and build on a [1, 28, 28] input, with
// the ReLU after each conv fused into it; a bad attribute names its field.
TEST(RunSpec, ConvolutionalLayersReadRoundTripAndBuild) {
  const std::string cnn = with_layers(
      "  input: [1, 28, 28]\n"
      "  layers:\n"
      "    - conv2d: 32\n"
      "      padding: 1\n"
      "    - relu\n"
      "    - max_pool2d: 2\n"
      "    - {conv2d: 64, kernel: 3, padding: 1, init: glorot}\n"
      "    - relu\n"
      "    - {avg_pool2d: 3, stride: 2, padding: 1}\n"
      "    - dense: 10\n");
  RunSpec r = parse_run_spec(cnn, "cnn.yaml");
  ASSERT_EQ(r.model.layers.size(), 7u);
  EXPECT_EQ(r.model.layers[0].type, "conv2d");
  EXPECT_EQ(r.model.layers[0].attrs.get("filters"), 32);
  EXPECT_EQ(r.model.layers[0].attrs.get("kernel", 3), 3);
  EXPECT_EQ(r.model.layers[3].attrs.str("init"), "glorot");
  EXPECT_EQ(r.model.layers[5].attrs.get("stride"), 2);
  expect_same(r, parse_run_spec(to_yaml(r), "again.yaml"));
  // 28 -> conv 28 -> pool 14 -> conv 14 -> avg pool (14 + 2 - 3) / 2 + 1 = 7.
  nn::Model m = nn::Model::build(r.model, nn::Shape{1, 28, 28}, 10, 1);
  EXPECT_EQ(m.num_params(), (32 * 9 + 32) + (64 * 32 * 9 + 64) + (64 * 7 * 7 * 10 + 10));
  const std::string summary = m.summary();
  EXPECT_NE(summary.find("conv2d 1->32 3x3 pad 1,1 [32,28,28] +relu"), std::string::npos)
      << summary;

  RunSpec gap = parse_run_spec(
      with_layers("  input: [1, 28, 28]\n"
                  "  layers: [{conv2d: 8, stride: 2}, global_avg_pool, {dense: 10}]\n"),
      "g.yaml");
  EXPECT_EQ(nn::Model::build(gap.model, nn::Shape{1, 28, 28}, 10, 1).num_params(),
            (8 * 9 + 8) + (8 * 10 + 10));

  for (const auto& [bad, field] : {std::pair{"    - {conv2d: 8, kernel: 0}\n", "kernel"},
                                   std::pair{"    - {conv2d: 8, init: zeros}\n", "init"},
                                   std::pair{"    - {max_pool2d: 2, stride: -1}\n", "stride"}}) {
    try {
      parse_run_spec(
          with_layers(std::string("  input: [1, 28, 28]\n  layers:\n") + bad + "    - dense: 10\n"),
          "b.yaml");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const SpecError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

TEST(RunSpec, GraphResidualAndPartsRoundTrip) {
  const std::string plain = with_layers(
      "  layers:\n"
      "    - repeat: 3\n"
      "      layers: [{dense: 16}, {batchnorm: null, momentum: 0.2}, relu]\n"
      "    - dense: 10\n");
  const std::string residual = with_layers(
      "  layers:\n"
      "    - dense: 16\n"
      "    - repeat: 3\n"
      "      residual: [{dense: 16}, {batchnorm: null, momentum: 0.2}, relu]\n"
      "    - residual: [{dense: 8}]\n"
      "      projection: 8\n"
      "    - dense: 8\n"
      "      name: h\n"
      "    - concat: null\n"
      "      inputs: [h, \"@-3\"]\n"
      "    - dense: 10\n");
  RunSpec p = parse_run_spec(plain, "p.yaml");
  EXPECT_EQ(p.model.layers.size(), 10u);
  RunSpec r = parse_run_spec(residual, "r.yaml");
  // dense, 3 x (dense, batchnorm, relu, add), dense, dense(proj), add, dense h, concat, dense
  ASSERT_EQ(r.model.layers.size(), 1u + 12 + 3 + 3u);
  const LayerSpec& add = r.model.layers[4];
  EXPECT_EQ(add.type, "add");
  EXPECT_EQ(add.inputs, (std::vector<std::string>{"@-1", "@-4"}));
  EXPECT_EQ(r.model.layers[2].attrs.get("momentum"), 0.2f);
  EXPECT_EQ(r.model.layers[14].attrs.get("units"), 8);  // the projection
  EXPECT_EQ(r.model.layers[14].inputs, (std::vector<std::string>{"@-2"}));
  EXPECT_EQ(r.model.layers[17].inputs, (std::vector<std::string>{"h", "@-3"}));
  // The graph builds: the concat reads [8] and the projection's [8].
  nn::Model m = nn::Model::build(r.model, nn::Shape{1, 28, 28}, 10, 1);
  EXPECT_GT(m.num_params(), 0);
  // Canonical form keeps names, inputs and attributes.
  RunSpec again = parse_run_spec(to_yaml(r), "again.yaml");
  expect_same(r, again);

  RunSpec parts =
      parse_run_spec(with_layers("  parts:\n"
                                 "    features: [{dense: 32, activation: relu}, batchnorm]\n"
                                 "    classifier: [{dense: 10}]\n"),
                     "parts.yaml");
  ASSERT_EQ(parts.model.parts.size(), 2u);
  EXPECT_EQ(parts.model.parts[0].name, "features");
  EXPECT_EQ(parts.model.parts[0].end, 3u);
  EXPECT_EQ(parts.model.parts[1].begin, 3u);
  RunSpec parts2 = parse_run_spec(to_yaml(parts), "parts2.yaml");
  ASSERT_EQ(parts2.model.parts.size(), 2u);
  EXPECT_EQ(parts2.model.parts[1].name, "classifier");
  expect_same(parts, parts2);

  // An empty last part (data-parallel through the hybrid trainer) reads,
  // writes `[]` and reads back the same.
  RunSpec dp =
      parse_run_spec(with_layers("  parts:\n"
                                 "    features: [{dense: 32, activation: relu}, {dense: 10}]\n"
                                 "    classifier: []\n"),
                     "dp.yaml");
  ASSERT_EQ(dp.model.parts.size(), 2u);
  EXPECT_EQ(dp.model.parts[1].begin, 3u);
  EXPECT_EQ(dp.model.parts[1].end, 3u);
  EXPECT_NE(to_yaml(dp).find("    classifier: []\n"), std::string::npos) << to_yaml(dp);
  RunSpec dp2 = parse_run_spec(to_yaml(dp), "dp2.yaml");
  ASSERT_EQ(dp2.model.parts.size(), 2u);
  EXPECT_EQ(dp2.model.parts[1].begin, dp2.model.parts[1].end);
  expect_same(dp, dp2);

  // Errors name the entry.
  auto error_of = [](const std::string& text) {
    try {
      parse_run_spec(text, "e.yaml");
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string first_empty =
      error_of(with_layers("  parts:\n    features: []\n    classifier: [{dense: 10}]\n"));
  EXPECT_NE(first_empty.find("model.parts.features"), std::string::npos) << first_empty;
  EXPECT_NE(first_empty.find("only the last part may be empty"), std::string::npos) << first_empty;
  const std::string all_empty = error_of(with_layers("  parts:\n    features: []\n"));
  EXPECT_NE(all_empty.find("every part is empty"), std::string::npos) << all_empty;
  const std::string null_part =
      error_of(with_layers("  parts:\n    features: [{dense: 10}]\n    classifier:\n"));
  EXPECT_NE(null_part.find("model.parts.classifier"), std::string::npos) << null_part;
  EXPECT_NE(error_of(with_layers("  layers:\n    - add: null\n      inputs: [input]\n"
                                 "    - dense: 10\n"))
                .find("two or more inputs"),
            std::string::npos);
  EXPECT_NE(error_of(with_layers("  layers:\n    - batchnorm: null\n      momentum: 2\n"
                                 "    - dense: 10\n"))
                .find("model.layers[0].momentum"),
            std::string::npos);
  EXPECT_NE(error_of(with_layers("  layers:\n    - dense: 10\n      inputs: [nope]\n"))
                .find("'nope' names no earlier layer"),
            std::string::npos);
}

TEST(RunSpec, ShippedExamplesParse) {
  RunSpec fashion = load_run_spec(source_dir() + "/examples/fashion-mlp.yaml");
  EXPECT_EQ(fashion.name, "fashion-mlp");
  EXPECT_EQ(fashion.model.layers.back().attrs.get("units"), 10);
  EXPECT_LE(fashion.train.epochs, 10);

  RunSpec deep = load_run_spec(source_dir() + "/examples/deep-mlp.yaml");
  EXPECT_EQ(deep.name, "deep-mlp");
  int hidden = 0;
  for (const LayerSpec& l : deep.model.layers)
    hidden += l.type == "dense" && l.attrs.get("units") == 64;
  EXPECT_EQ(hidden, 700);
}

// The hybrid trainer's example is the standalone CNN (test accuracy 0.928)
// cut into its two parts: the same layers, data and training, so the two
// runs compare.
TEST(RunSpec, DistributedCnnExampleIsTheStandaloneCnnInTwoParts) {
  const RunSpec whole = load_run_spec(source_dir() + "/examples/fashion-cnn.yaml");
  const RunSpec parts = load_run_spec(source_dir() + "/examples/fashion-cnn-distributed.yaml");
  ASSERT_EQ(parts.model.parts.size(), 2u);
  EXPECT_EQ(parts.model.parts[0].name, "features");
  EXPECT_EQ(parts.model.parts[1].name, "classifier");
  EXPECT_EQ(parts.model.parts[0].end, parts.model.parts[1].begin);
  ASSERT_EQ(whole.model.layers.size(), parts.model.layers.size());
  for (size_t i = 0; i < whole.model.layers.size(); ++i)
    EXPECT_TRUE(detail::same_layer(whole.model.layers[i], parts.model.layers[i])) << "layer " << i;
  // Everything outside the layers, in canonical form.
  auto after = [](const std::string& yaml, const char* key) { return yaml.substr(yaml.find(key)); };
  const std::string a = to_yaml(whole), b = to_yaml(parts);
  EXPECT_EQ(after(a, "\ntrain:"), after(b, "\ntrain:"));
  EXPECT_EQ(a.substr(a.find("\ndata:"), a.find("\nmodel:") - a.find("\ndata:")),
            b.substr(b.find("\ndata:"), b.find("\nmodel:") - b.find("\ndata:")));
  EXPECT_EQ(whole.model.init, parts.model.init);
  EXPECT_EQ(whole.model.loss, parts.model.loss);
}

// bench/hybrid_bench.sh's data-parallel cnn is the example's model with every
// layer in `features` and an empty classifier: the same layers and training.
TEST(RunSpec, BenchDataParallelCnnIsTheDistributedExampleWithAnEmptyClassifier) {
  const RunSpec parts = load_run_spec(source_dir() + "/examples/fashion-cnn-distributed.yaml");
  const RunSpec dp = load_run_spec(source_dir() + "/bench/specs/dp-cnn.yaml");
  ASSERT_EQ(dp.model.parts.size(), 2u);
  EXPECT_EQ(dp.model.parts[0].name, "features");
  EXPECT_EQ(dp.model.parts[1].name, "classifier");
  EXPECT_EQ(dp.model.parts[0].end, dp.model.layers.size());
  EXPECT_EQ(dp.model.parts[1].begin, dp.model.parts[1].end);
  ASSERT_EQ(dp.model.layers.size(), parts.model.layers.size());
  for (size_t i = 0; i < dp.model.layers.size(); ++i)
    EXPECT_TRUE(detail::same_layer(dp.model.layers[i], parts.model.layers[i])) << "layer " << i;
  auto after = [](const std::string& yaml, const char* key) { return yaml.substr(yaml.find(key)); };
  EXPECT_EQ(after(to_yaml(dp), "\ntrain:"), after(to_yaml(parts), "\ntrain:"));
  EXPECT_EQ(dp.model.init, parts.model.init);
  EXPECT_EQ(dp.model.loss, parts.model.loss);
  EXPECT_EQ(dp.model.input, parts.model.input);
}

TEST(RunSpec, Repeat700ExpandsTo1400Layers) {
  RunSpec run = parse_run_spec(R"(model:
  layers:
    - repeat: 700
      dense: 64
      activation: tanh
    - dense: 10
)",
                               "deep.yaml");
  ASSERT_EQ(run.model.layers.size(), 1401u);
  for (size_t i = 0; i < 1400; i += 2) {
    EXPECT_EQ(run.model.layers[i].type, "dense");
    EXPECT_EQ(run.model.layers[i].attrs.get("units"), 64);
    EXPECT_EQ(run.model.layers[i + 1].type, "tanh");
    EXPECT_EQ(run.model.layers[i + 1].where.line, 3);  // the repeat entry
  }
}

TEST(RunSpec, CanonicalFormRoundTrips) {
  for (const char* text : {kFullExample}) {
    RunSpec a = parse_run_spec(text, "a.yaml");
    std::string yaml = to_yaml(a);
    RunSpec b = parse_run_spec(yaml, "b.yaml");
    expect_same(a, b);
    EXPECT_EQ(to_yaml(b), yaml);
  }
  RunSpec deep = load_run_spec(source_dir() + "/examples/deep-mlp.yaml");
  std::string yaml = to_yaml(deep);
  EXPECT_NE(yaml.find("repeat: 700"), std::string::npos) << yaml;
  EXPECT_LT(yaml.size(), 2000u) << "runs of layers should fold back into repeat blocks";
  expect_same(deep, parse_run_spec(yaml, "deep.yaml"));

  RunSpec sgd = parse_run_spec(R"(name: "odd: name"
model: {layers: [dense: 10]}
train:
  seed: 18446744073709551615
  optimizer: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true}
  schedule: {type: step, step_epochs: 2, gamma: 0.3}
)",
                               "sgd.yaml");
  expect_same(sgd, parse_run_spec(to_yaml(sgd), "sgd2.yaml"));
}

// Command-line overrides: read like the file's values, sections made where
// missing, shorthands kept, and errors that name the flag.
TEST(RunSpec, OverridesAreReadAndCheckedLikeTheFile) {
  const std::string text =
      "model:\n  layers: [dense: 10]\ntrain:\n  optimizer: adam\n"
      "  schedule: {type: cosine, min_lr: 0.01}\n";
  std::vector<Override> flags = {{"train.optimizer.lr", "0.05", "--lr"},
                                 {"train.epochs", "4", "--epochs"},
                                 {"train.seed", "18446744073709551615", "--seed"},
                                 {"data.limit_train", "100", "--limit-train"}};
  RunSpec run = parse_run_spec(text, "o.yaml", flags);
  EXPECT_EQ(run.train.optimizer.type, "adam");
  EXPECT_FLOAT_EQ(run.train.optimizer.lr, 0.05f);
  EXPECT_EQ(run.train.epochs, 4);
  EXPECT_EQ(run.train.seed, 18446744073709551615ull);
  EXPECT_EQ(run.data.limit_train, 100);
  expect_same(run, parse_run_spec(to_yaml(run), "o2.yaml"));

  auto error = [&](std::vector<Override> bad) -> std::string {
    try {
      parse_run_spec(text, "o.yaml", bad);
    } catch (const SpecError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error({{"train.epochs", "0", "--epochs"}}),
            "--epochs: 'train.epochs': must be in [1, 1000000], got 0");
  EXPECT_EQ(error({{"train.seed", "18446744073709551616", "--seed"}}),
            "--seed: 'train.seed': expected an integer in [0, 2^64), got '18446744073709551616'");
  // A conflict with a field of the file points at the file and names the flag.
  const std::string floor = error({{"train.optimizer.lr", "0.001", "--lr"}});
  EXPECT_NE(floor.find("o.yaml:5:"), std::string::npos) << floor;
  EXPECT_NE(floor.find("train.schedule.min_lr"), std::string::npos) << floor;
  EXPECT_NE(floor.find("(with --lr 0.001)"), std::string::npos) << floor;
  // The file's own errors come first, as they are.
  try {
    parse_run_spec("model:\n  layers: [dense: 7]\n", "f.yaml", flags);
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()).find("--"), std::string::npos) << e.what();
  }
}

TEST(RunSpec, MissingFileNamesIt) {
  try {
    load_run_spec("/nonexistent/dir/spec.yaml");
    FAIL() << "expected SpecError";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/spec.yaml"), std::string::npos);
  }
}

// Specs come from strangers (POST /api/experiments): a document that expands
// to billions of nodes, or is simply huge, is refused before it is walked.
const std::string kSmallModel = "model:\n  layers:\n    - dense: 10\n";

TEST(RunSpec, AliasBombIsRefusedAtTheAliasThatCrossesTheLimit) {
  // a_i is a list of ten a_(i-1): a9 stands for 10^10 scalars.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) bomb += (j ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  try {
    parse_run_spec(bomb + kSmallModel, "bomb.yaml");
    FAIL() << "an alias bomb was accepted";
  } catch (const SpecError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("once its aliases are expanded"), std::string::npos) << what;
    // The count passes 100,000 nodes inside a4 (10^5 scalars), on line 5.
    EXPECT_EQ(what.rfind("bomb.yaml:5:", 0), 0u) << what;
  }
  // A spec that reuses a section through an alias still reads.
  RunSpec ok = parse_run_spec("train:\n  optimizer: &opt {type: adam, lr: 0.002}\n" + kSmallModel,
                              "ok.yaml");
  EXPECT_FLOAT_EQ(ok.train.optimizer.lr, 0.002f);
}

TEST(RunSpec, OversizedDocumentIsRefused) {
  std::string big = kSmallModel + "# " + std::string(size_t{1} << 20, 'x') + "\n";
  try {
    parse_run_spec(big, "big.yaml");
    FAIL() << "a document over the size limit was accepted";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes; at most 1048576 are accepted"), std::string::npos)
        << e.what();
  }
}

TEST(RunSpec, DuplicateKeyAmongTwentyThousandNamesItsFirstLine) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "k" + std::to_string(i) + ": 1\n";
  text += "k17: 2\n";
  try {
    parse_run_spec(text, "dup.yaml");
    FAIL() << "a duplicate key was accepted";
  } catch (const SpecError& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("dup.yaml:20001:1: ", 0), 0u) << what;
    EXPECT_NE(what.find("duplicate key (first given at line 18)"), std::string::npos) << what;
  }
}

// Line and column (1-based) of the first occurrence of `token` in `text`.
std::string location_of(const std::string& text, const std::string& token) {
  size_t pos = text.find(token);
  if (pos == std::string::npos) return "<token not found>";
  int line = 1, column = 1;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

struct BadSpec {
  const char* name;
  std::string text;
  std::string at;             // the error points at this token's first occurrence...
  std::string location = "";  // ...or, when set, at this "line:column"
  std::string field;
  std::string message;
};

const std::string kModel = "model:\n  layers:\n    - dense: 10\n";

class BadSpecTest : public testing::TestWithParam<BadSpec> {};

TEST_P(BadSpecTest, NamesLocationFieldAndProblem) {
  const BadSpec& c = GetParam();
  std::string location = c.location.empty() ? location_of(c.text, c.at) : c.location;
  try {
    parse_run_spec(c.text, "bad.yaml");
    FAIL() << c.name << ": expected SpecError";
  } catch (const SpecError& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("bad.yaml:" + location + ": ", 0), 0u) << what;
    EXPECT_EQ(e.field(), c.field) << what;
    if (!c.field.empty()) {
      EXPECT_NE(what.find("'" + c.field + "'"), std::string::npos) << what;
    }
    EXPECT_NE(what.find(c.message), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, BadSpecTest,
    testing::Values(
        BadSpec{"unknown_key", kModel + "train:\n  epoch: 3\n", "epoch", "", "train.epoch",
                "unknown key 'epoch' in 'train'; did you mean 'epochs'?"},
        BadSpec{"unknown_top_key", "modle:\n  layers: [relu]\n", "modle", "", "modle",
                "did you mean 'model'?"},
        BadSpec{"bad_type", kModel + "train:\n  batch_size: big\n", "big", "", "train.batch_size",
                "expected an integer, got 'big'"},
        BadSpec{"float_for_int", kModel + "train:\n  epochs: 2.5\n", "2.5", "", "train.epochs",
                "expected an integer"},
        BadSpec{"quoted_number", kModel + "train:\n  optimizer: {lr: \"0.1\"}\n", "\"0.1\"", "",
                "train.optimizer.lr", "expected a number, got the string \"0.1\""},
        BadSpec{"negative_lr", kModel + "train:\n  optimizer: {type: adam, lr: -0.1}\n", "-0.1", "",
                "train.optimizer.lr", "must be in (0, 1e+09], got -0.1"},
        BadSpec{"zero_epochs", kModel + "train:\n  epochs: 0\n", "", "5:11", "train.epochs",
                "must be in [1, 1000000]"},
        BadSpec{"momentum_for_adam", kModel + "train:\n  optimizer: {type: adam, momentum: 0.9}\n",
                "momentum", "", "train.optimizer.momentum", "applies only to type sgd"},
        BadSpec{"unknown_optimizer", kModel + "train:\n  optimizer: {type: adma}\n", "adma", "",
                "train.optimizer.type", "unknown optimizer 'adma'; did you mean 'adam'?"},
        BadSpec{"unknown_schedule", kModel + "train:\n  schedule: linear\n", "linear", "",
                "train.schedule.type", "(valid: constant, step, cosine)"},
        BadSpec{"unknown_dataset", kModel + "data:\n  dataset: cifar10\n", "cifar10", "",
                "data.dataset", "unknown data set 'cifar10'"},
        BadSpec{"unknown_activation",
                "model:\n  layers:\n    - dense: 64\n      activation: relux\n    - dense: 10\n",
                "relux", "", "model.layers[0].activation",
                "unknown activation 'relux'; did you mean 'relu'?"},
        BadSpec{"unknown_init", "model:\n  layers:\n    - dense: 10\n      init: xavier\n",
                "xavier", "", "model.layers[0].init", "(valid: he, glorot, lecun)"},
        BadSpec{"unknown_layer", "model:\n  layers:\n    - dense: 64\n    - dens: 10\n",
                "dens:", "", "model.layers[1].dens", "unknown layer 'dens'; did you mean 'dense'?"},
        BadSpec{"unknown_bare_layer", "model:\n  layers:\n    - rleu\n    - dense: 10\n", "rleu",
                "", "model.layers[0]", "did you mean 'relu'?"},
        BadSpec{"two_layer_names", "model:\n  layers:\n    - dense: 64\n      relu:\n", "relu", "",
                "model.layers[0].relu", "two layer names ('dense' and 'relu')"},
        BadSpec{"option_not_allowed", "model:\n  layers:\n    - dropout: 0.1\n      init: he\n",
                "init", "", "model.layers[0].init", "unknown key 'init'"},
        BadSpec{"dense_needs_units", "model:\n  layers:\n    - dense\n", "dense", "",
                "model.layers[0].dense", "needs a value"},
        BadSpec{"zero_units", "model:\n  layers:\n    - dense: 0\n", "0\n", "",
                "model.layers[0].dense", "must be in [1, "},
        BadSpec{"dropout_one", kModel.substr(0, 17) + "    - dropout: 1.0\n    - dense: 10\n",
                "1.0", "", "model.layers[0].dropout", "must be in [0, 0.999]"},
        BadSpec{"relu_takes_no_value", "model:\n  layers:\n    - relu: 3\n    - dense: 10\n", "3",
                "", "model.layers[0].relu", "takes no value"},
        BadSpec{"bad_repeat", "model:\n  layers:\n    - repeat: 0\n      dense: 64\n", "0\n", "",
                "model.layers[0].repeat", "must be in [1, 100000]"},
        BadSpec{"repeat_not_int", "model:\n  layers:\n    - repeat: many\n      dense: 64\n",
                "many", "", "model.layers[0].repeat", "expected an integer"},
        BadSpec{"nested_block_error",
                "model:\n  layers:\n    - repeat: 2\n      layers:\n        - dense: 8\n"
                "        - leaky_relu: steep\n    - dense: 10\n",
                "steep", "", "model.layers[0].layers[1].leaky_relu", "expected a finite number"},
        BadSpec{"too_many_layers",
                "model:\n  layers:\n    - repeat: 1000\n      layers:\n        - repeat: 1000\n"
                "          dense: 8\n",
                "1000\n", "", "model.layers[0].repeat", "more than 100000 layers"},
        BadSpec{"empty_layers", "model:\n  layers: []\n", "[]", "", "model.layers",
                "at least one layer"},
        BadSpec{"no_model", "train:\n  epochs: 3\n", "train", "", "model.layers",
                "at least one layer"},
        BadSpec{"duplicate_key", kModel + "train:\n  epochs: 3\n  epochs: 4\n", "epochs: 4", "",
                "train.epochs", "duplicate key"},
        BadSpec{"yaml_syntax", "model:\n  layers: [dense: 10\ntrain: {}\n", "", "3:6", "",
                "YAML syntax error"},
        BadSpec{"yaml_bad_indent", "model:\n  layers:\n    - dense: 10\n   bad: 1\n", "", "4:4", "",
                "YAML syntax error"},
        BadSpec{"impossible_shape",
                "model:\n  input: [784]\n  layers:\n    - dense: 64\n    - dense: 7\n", "dense: 7",
                "", "model.layers[1]", "10 classes"},
        BadSpec{"input_size_mismatch", "model:\n  input: [28, 27]\n  layers: [dense: 10]\n", "[28",
                "", "model.input", "756 values"},
        BadSpec{"validation_too_big", kModel + "data: {validation: 60000}\n", "60000", "",
                "data.validation", "smaller than the 60000 training samples"},
        BadSpec{
            "min_lr_above_lr",
            kModel + "train:\n  optimizer: {lr: 0.01}\n  schedule: {type: cosine, min_lr: 0.1}\n",
            "0.1}", "", "train.schedule.min_lr", "above the learning rate"}),
    [](const testing::TestParamInfo<BadSpec>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dnnlab::spec
