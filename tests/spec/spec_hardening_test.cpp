// Specs that used to crash the parser or be judged wrongly (issue 24): YAML
// cycles, depth and alias bombs; validation against the shape training
// feeds; inclusive float bounds; layer names and relative inputs.
#include <gtest/gtest.h>

#include <string>

#include "nn/model.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::spec {
namespace {

using nn::RunSpec;

// The SpecError's text for `text`, or "accepted".
std::string spec_error(const std::string& text, const std::string& file = "h.yaml") {
  try {
    parse_run_spec(text, file);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "accepted";
}

const std::string kTrain = "train: {epochs: 1}\n";

std::string fashion(const std::string& layers) {
  return "name: h\ndata: {dataset: fashion-mnist, validation: 100}\nmodel:\n  layers:\n" + layers +
         kTrain;
}

// ---- YAML: cycles, depth, expansion --------------------------------------

// `a: &x [*x]` makes a list that holds itself. yaml-cpp builds that graph
// without complaint; the recursive walks above it (the layer list reader,
// the sweep template scan) then recursed until the stack ran out (SIGSEGV).
TEST(YamlLimits, SelfReferencingAliasIsRefusedAtTheAlias) {
  const std::string what = spec_error("a: &x [*x]\n", "cycle.yaml");
  EXPECT_EQ(what.rfind("cycle.yaml:1:8: ", 0), 0u) << what;
  EXPECT_NE(what.find("a cycle"), std::string::npos) << what;
}

TEST(YamlLimits, CycleThroughTheLayerListIsRefused) {
  // What crashed `dnnlab train`: read_list -> block entry -> read_list ... forever.
  for (const char* text : {"model:\n  layers: &x [{layers: *x}]\n",
                           "model: &m\n  layers:\n    - layers: [{dense: 10}]\n      x: *m\n",
                           "model:\n  layers:\n    - &e {repeat: 2, layers: [*e]}\n"}) {
    const std::string what = spec_error(text, "cycle.yaml");
    EXPECT_EQ(what.rfind("cycle.yaml:", 0), 0u) << text << what;
    EXPECT_NE(what.find("a cycle"), std::string::npos) << text << what;
  }
}

TEST(YamlLimits, HundredThousandNestedListsAreRefused) {
  const std::string deep = "a: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  const std::string what = spec_error(deep, "deep.yaml");
  // The top map is level 1, so the 64th '[' (column 3 + 64) opens level 65.
  EXPECT_EQ(what.rfind("deep.yaml:1:67: ", 0), 0u) << what.substr(0, 200);
  EXPECT_NE(what.find("nest more than 64 levels"), std::string::npos) << what.substr(0, 200);
  // Block style too, and maps.
  std::string block;
  for (int i = 0; i < 200; ++i) block += std::string(i, ' ') + "k:\n";
  EXPECT_NE(spec_error(block).find("nest more than 64 levels"), std::string::npos);
}

TEST(YamlLimits, AliasesCannotNestDeeperThanTheLimit) {
  // Each l<i> is a list of l<i-1>: shallow in the text, 82 levels deep expanded.
  std::string text = "l0: &l0 [x]\n";
  for (int i = 1; i <= 80; ++i)
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [*l" + std::to_string(i - 1) +
            "]\n";
  const std::string what = spec_error(text, "nest.yaml");
  EXPECT_NE(what.find("levels deep once expanded"), std::string::npos) << what;
  // l61 is 63 levels deep; the alias to it inside l62 (line 63), under the
  // top map and l62's list, would make 65.
  EXPECT_EQ(what.rfind("nest.yaml:63:", 0), 0u) << what;
}

TEST(YamlLimits, BillionLaughsIsRefused) {
  std::string bomb = "lol0: &l0 \"lol\"\n";
  for (int i = 1; i <= 9; ++i) {
    bomb += "lol" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) bomb += (j ? ", *l" : "*l") + std::to_string(i - 1);
    bomb += "]\n";
  }
  const std::string what = spec_error(bomb + fashion("    - dense: 10\n"), "laughs.yaml");
  EXPECT_NE(what.find("once its aliases are expanded"), std::string::npos) << what;
  EXPECT_EQ(what.rfind("laughs.yaml:", 0), 0u) << what;
}

TEST(YamlLimits, ModestNestingAndReuseStillRead) {
  // Blocks nested ten deep: 2 levels each, under model and layers.
  std::string layers = "    - dense: 10\n";
  std::string nested = "{dense: 16}";
  for (int i = 0; i < 10; ++i) nested = "{repeat: 1, layers: [" + nested + "]}";
  RunSpec run = parse_run_spec(fashion("    - " + nested + "\n" + layers), "ok.yaml");
  EXPECT_EQ(run.model.layers.size(), 2u);
  // An anchor used after it closes is no cycle.
  RunSpec reuse = parse_run_spec(
      "name: r\ndata: {dataset: synthetic, validation: 10}\nmodel:\n  layers:\n"
      "    - &blk {dense: 16}\n    - *blk\n    - dense: 10\n" +
          kTrain,
      "reuse.yaml");
  EXPECT_EQ(reuse.model.layers.size(), 3u);
}

// ---- validation against the shape training feeds --------------------------

// Training feeds Fashion-MNIST as [1, 28, 28] (data::load); validation used
// to check against [784].
TEST(DatasetShape, IsTheShapeTrainingFeeds) {
  nn::Shape sample;
  int64_t classes = 0;
  ASSERT_TRUE(dataset_shape("fashion-mnist", &sample, &classes));
  EXPECT_EQ(sample, (nn::Shape{1, 28, 28}));
  EXPECT_EQ(classes, 10);
  ASSERT_TRUE(dataset_shape("synthetic", &sample, &classes));
  EXPECT_EQ(sample, (nn::Shape{784}));
}

TEST(DatasetShape, ConvWithoutAnInputShapeIsAccepted) {
  RunSpec run = parse_run_spec(fashion("    - {conv2d: 4, padding: 1}\n    - relu\n"
                                       "    - max_pool2d: 2\n    - dense: 10\n"),
                               "conv.yaml");
  EXPECT_TRUE(run.model.input.empty());
  nn::Model m = nn::Model::build(run.model, nn::Shape{1, 28, 28}, 10, 1);
  EXPECT_EQ(m.num_params(), (4 * 9 + 4) + (4 * 14 * 14 * 10 + 10));
}

TEST(DatasetShape, ConcatThatTrainingRefusesIsRefusedByValidation) {
  // [784] ++ [16] validated; training's [1, 28, 28] ++ [16] cannot join.
  const std::string what = spec_error(
      fashion("    - dense: 16\n      name: h\n    - concat: null\n      inputs: [input, h]\n"
              "    - dense: 10\n"),
      "concat.yaml");
  EXPECT_EQ(what.rfind("concat.yaml:7:", 0), 0u) << what;
  EXPECT_NE(what.find("'model.layers[1]'"), std::string::npos) << what;
  // With the input read flat, it joins: validation and training agree.
  RunSpec flat = parse_run_spec(
      "name: h\ndata: {dataset: fashion-mnist, validation: 100}\nmodel:\n  input: [784]\n"
      "  layers:\n    - dense: 16\n      name: h\n    - concat: null\n      inputs: [input, h]\n"
      "    - dense: 10\n" +
          kTrain,
      "flat.yaml");
  EXPECT_EQ(nn::Model::build(flat.model, nn::model_input(flat.model, nn::Shape{1, 28, 28}), 10, 1)
                .output_shape(),
            (nn::Shape{10}));
}

TEST(DatasetShape, BatchNormValidatesAsTheModelTrainingBuilds) {
  // On [784] a first batchnorm has 784 channels; on [1, 28, 28] it has one.
  const std::string text = fashion("    - batchnorm\n    - dense: 10\n");
  RunSpec run = parse_run_spec(text, "bn.yaml");
  nn::Shape sample;
  ASSERT_TRUE(dataset_shape(run.data.dataset, &sample, nullptr));
  nn::Model validated = nn::Model::build(run.model, nn::model_input(run.model, sample), 10, 1);
  nn::Model trained = nn::Model::build(run.model, nn::Shape{1, 28, 28}, 10, 1);
  EXPECT_EQ(validated.num_params(), trained.num_params());
  EXPECT_EQ(validated.num_params(), 2 + (784 * 10 + 10));
}

TEST(DatasetShape, InputOfTheWrongSizeNamesTheDataShape) {
  const std::string what = spec_error(
      "name: h\ndata: {dataset: fashion-mnist}\nmodel:\n  input: [1, 28, 27]\n  layers:\n"
      "    - dense: 10\n" +
      kTrain);
  EXPECT_NE(what.find("'model.input'"), std::string::npos) << what;
  EXPECT_NE(what.find("[1,28,28]"), std::string::npos) << what;
}

// ---- bounds, names, references ---------------------------------------------

TEST(FloatBounds, InclusiveBoundsAcceptTheirOwnValue) {
  // dropout's rate is in [0, 0.999] and batchnorm's eps in [1e-12, 1]: read
  // as floats, 0.999 and 1e-12 used to compare above / below the doubles.
  EXPECT_EQ(spec_error(fashion("    - dropout: 0.999\n    - dense: 10\n")), "accepted");
  EXPECT_EQ(spec_error(fashion("    - {batchnorm: null, eps: 1e-12}\n    - dense: 10\n")),
            "accepted");
  EXPECT_EQ(spec_error(fashion("    - {batchnorm: null, eps: 1}\n    - dense: 10\n")), "accepted");
  // Past the bound is still refused, and open bounds stay open.
  EXPECT_NE(spec_error(fashion("    - dropout: 0.9991\n    - dense: 10\n")).find("in [0, 0.999]"),
            std::string::npos);
  EXPECT_NE(spec_error(fashion("    - {batchnorm: null, eps: 0.9e-12}\n    - dense: 10\n"))
                .find("'model.layers[0].eps'"),
            std::string::npos);
  const std::string momentum =
      spec_error("model:\n  layers: [{dense: 10}]\ntrain: {optimizer: {type: sgd, momentum: 1}}\n");
  EXPECT_NE(momentum.find("train.optimizer.momentum"), std::string::npos) << momentum;
}

TEST(LayerNames, NameThatCollidesWithGeneratedNamesIsRefused) {
  // Layer 1 (a dense) is "1" and its weight "1.dense.weight": a layer named
  // "1.dense" gave a second "1.dense.weight", refused only when the weights
  // were written after training.
  for (const char* name : {"1.dense", "1", "a.b", "x y"}) {
    const std::string what =
        spec_error(fashion("    - dense: 16\n    - dense: 16\n    - dense: 10\n"
                           "      name: \"" +
                           std::string(name) + "\"\n"),
                   "names.yaml");
    EXPECT_EQ(what.rfind("names.yaml:8:", 0), 0u) << name << ": " << what;
    EXPECT_NE(what.find("'model.layers[2].name'"), std::string::npos) << name << ": " << what;
  }
  EXPECT_EQ(spec_error(fashion("    - dense: 16\n      name: hidden_1\n    - dense: 10\n")),
            "accepted");
}

TEST(LayerNames, RelativeInputMustBeAllDigits) {
  for (const char* ref : {"@-1abc", "@-", "@x", "@-0", "@--1", "@-1.5"}) {
    const std::string what =
        spec_error(fashion("    - dense: 16\n    - dense: 16\n      inputs: \"" + std::string(ref) +
                           "\"\n    - dense: 10\n"),
                   "ref.yaml");
    EXPECT_EQ(what.rfind("ref.yaml:7:", 0), 0u) << ref << ": " << what;
    EXPECT_NE(what.find("'model.layers[1].inputs'"), std::string::npos) << ref << ": " << what;
    EXPECT_NE(what.find("not a relative input"), std::string::npos) << ref << ": " << what;
  }
  EXPECT_EQ(spec_error(fashion("    - dense: 16\n    - dense: 16\n      inputs: \"@-2\"\n"
                               "    - dense: 10\n")),
            "accepted");
}

TEST(LayerNames, TheNnCoreRefusesThemToo) {
  // Specs from the wasm and gateway codecs reach Model::build without the
  // YAML reader.
  nn::ModelSpec m;
  nn::LayerSpec a;
  a.type = "dense";
  a.attrs.num["units"] = 10;
  a.inputs = {"@-1abc"};
  m.layers = {a};
  EXPECT_THROW(nn::Model::validate(m, nn::Shape{4}, 10), SpecError);
  m.layers[0].inputs.clear();
  m.layers[0].name = "0.dense";
  EXPECT_THROW(nn::Model::validate(m, nn::Shape{4}, 10), SpecError);
  m.layers[0].name = "out";
  EXPECT_NO_THROW(nn::Model::validate(m, nn::Shape{4}, 10));
}

TEST(RunName, NameThatLeavesTheOutputDirectoryIsRefused) {
  for (const char* name : {"../escaped", "a/b", "..", "c\\\\d"}) {
    const std::string what = spec_error("name: \"" + std::string(name) + "\"\n" +
                                        fashion("    - dense: 10\n").substr(8));
    EXPECT_NE(what.find("'name'"), std::string::npos) << name << ": " << what;
    EXPECT_NE(what.find("names the output files"), std::string::npos) << name << ": " << what;
  }
}

}  // namespace
}  // namespace dnnlab::spec
