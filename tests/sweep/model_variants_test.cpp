// Model variants (`template.models` chosen by `model: ${family}`): each trial
// builds the model its family names, the family is in its params, and misuse
// is an error located in the sweep file.
#include <gtest/gtest.h>

#include <cstdlib>

#include "nn/model.hpp"
#include "sweep/sampler.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::sweep::variants_test {
namespace {

const std::string kFamilies = R"(name: fam
template:
  data: {dataset: fashion-mnist, limit_train: 1000}
  model: ${family}
  models:
    plain:
      layers:
        - repeat: ${depth}
          dense: ${width}
          activation: ${act}
        - dense: 10
    residual:
      init: he
      layers:
        - dense: ${width}
        - repeat: ${depth}
          residual: [{dense: ${width}}, batchnorm, "${act}"]
        - batchnorm
        - dense: 10
    normalised: {layers: [{repeat: ${depth}, layers: [{dense: ${width}}, batchnorm, "${act}"]}, {dense: 10}]}
  train:
    epochs: 2
    optimizer: {type: adam, lr: 1.0e-3}
search:
  method: grid
  parameters:
    family: [plain, residual, normalised]
    depth: [1, 3]
    width: [16]
    act: [relu, tanh]
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// "f.yaml:L:C" of the first `needle` in `text`.
std::string where(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < at; ++i)
    if (text[i] == '\n') ++line, line_start = i + 1;
  return "f.yaml:" + std::to_string(line) + ":" + std::to_string(at - line_start + 1) + ":";
}

std::string error_of(const std::string& text) {
  try {
    parse_sweep(text, "f.yaml");
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

int64_t count(const nn::RunSpec& run) {
  return nn::Model::count_params(run.model, nn::model_input(run.model, nn::Shape{1, 28, 28}), 10);
}

size_t layers_of_type(const nn::RunSpec& run, const std::string& type) {
  size_t n = 0;
  for (const nn::LayerSpec& l : run.model.layers) n += l.type == type;
  return n;
}

TEST(ModelVariants, EachTrialBuildsTheModelItsFamilyNames) {
  SweepSpec s = parse_sweep(kFamilies, "f.yaml");
  auto sampler = make_sampler(s.search);
  int trials = 0;
  while (auto t = sampler->next()) {
    ++trials;
    const nn::RunSpec run = s.materialize(*t);
    const std::string family = t->params.at("family");  // recorded in the trial's params
    const int64_t depth = t->params.at("depth"), w = 16;
    const int64_t dense_in = 784 * w + w, hidden = w * w + w, out = w * 10 + 10;
    const int64_t bn = 2 * w;  // scale and shift
    SCOPED_TRACE(describe_params(t->params));
    if (family == "plain") {
      EXPECT_EQ(count(run), dense_in + (depth - 1) * hidden + out);
      EXPECT_EQ(layers_of_type(run, "batchnorm"), 0u);
      EXPECT_EQ(layers_of_type(run, "add"), 0u);
    } else if (family == "residual") {
      EXPECT_EQ(count(run), dense_in + depth * (hidden + bn) + bn + out);
      EXPECT_EQ(layers_of_type(run, "add"), static_cast<size_t>(depth));
      EXPECT_EQ(layers_of_type(run, "batchnorm"), static_cast<size_t>(depth + 1));
    } else {
      ASSERT_EQ(family, "normalised");
      EXPECT_EQ(count(run), dense_in + (depth - 1) * hidden + depth * bn + out);
      EXPECT_EQ(layers_of_type(run, "add"), 0u);
      EXPECT_EQ(layers_of_type(run, "batchnorm"), static_cast<size_t>(depth));
    }
    EXPECT_EQ(layers_of_type(run, t->params.at("act").get<std::string>()),
              static_cast<size_t>(depth));
  }
  EXPECT_EQ(trials, 12);
}

TEST(ModelVariants, AnErrorInsideAVariantPointsIntoIt) {
  const std::string text = replace(kFamilies, "residual: [{dense: ${width}}, batchnorm",
                                   "residual: [{dense: ${width}}, batchnrom");
  const std::string e = error_of(text);
  EXPECT_NE(e.find(where(text, "batchnrom")), std::string::npos) << e;
  EXPECT_NE(e.find("template.models.residual.layers"), std::string::npos) << e;
  EXPECT_NE(e.find("family=residual"), std::string::npos) << e;
}

TEST(ModelVariants, MisuseIsALocatedError) {
  struct Case {
    std::string from, to, at, says;
  };
  const Case cases[] = {
      {"  model: ${family}\n", "", "models:", "need 'model: ${param}'"},
      {"family: [plain, residual, normalised]", "family: [plain, residual, normalised, wide]",
       "family: [", "'wide' names no model in template.models (plain, residual, normalised)"},
      {"family: [plain, residual, normalised]", "family: {int: [1, 3], step: 1}", "family: {",
       "give it a choice list"},
      {"  models:\n    plain:",
       "  models: {plain: {layers: [{dense: 10}]}}\n  xmodels:\n    plain:", "{plain", "block map"},
  };
  for (const Case& c : cases) {
    const std::string text = replace(kFamilies, c.from, c.to);
    const std::string e = error_of(text);
    EXPECT_NE(e.find(where(text, c.at)), std::string::npos) << c.to << "\n" << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.to << "\n" << e;
  }
}

TEST(ModelVariants, AStudyNarrowedToOneFamilyTrainsOnlyIt) {
  const SweepSpec s = parse_sweep(
      replace(kFamilies, "family: [plain, residual, normalised]", "family: [residual]"), "f.yaml");
  auto sampler = make_sampler(s.search);
  int n = 0;
  while (auto t = sampler->next()) {
    ++n;
    EXPECT_EQ(layers_of_type(s.materialize(*t), "add"), t->params.at("depth").get<size_t>());
  }
  EXPECT_EQ(n, 4);
}

TEST(ModelVariants, AValueNamingNoVariantIsRefusedAtMaterialisation) {
  SweepSpec s = parse_sweep(kFamilies, "f.yaml");
  TrialConfig t;
  t.params = {{"family", "wide"}, {"depth", 1}, {"width", 16}, {"act", "relu"}};
  try {
    s.materialize(t);
    FAIL() << "no error";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find(where(kFamilies, "${family}")), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("names no model"), std::string::npos) << e.what();
  }
}

TEST(ModelVariants, TheStudyFilesParse) {
  const char* root = std::getenv("DNNLAB_SOURCE_DIR");
  if (!root) GTEST_SKIP() << "DNNLAB_SOURCE_DIR is not set";
  for (const char* f : {"depth-sweep.yaml", "depth-sweep-digits.yaml", "depth-sweep-quick.yaml"}) {
    SCOPED_TRACE(f);
    const SweepSpec s = load_sweep(std::string(root) + "/examples/" + f);
    ASSERT_NE(s.search.find("family"), nullptr);
    EXPECT_EQ(s.search.find("family")->choices.size(), 3u);
  }
}

}  // namespace
}  // namespace dnnlab::sweep::variants_test
