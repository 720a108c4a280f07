// Specs that used to crash the parser or be judged wrongly (issue 24): YAML
// cycles, depth and alias bombs; validation against the shape training
// feeds; inclusive float bounds; layer names and relative inputs.
#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace dnnlab::spec
