// Sweep files that used to crash whoever parsed them (issue 24): `dnnlab
// run`, and `dnnlab serve` on POST /api/experiments, both go through
// parse_sweep. And the largest trial's memory, which `dnnlab run` checks.
#include <gtest/gtest.h>

#include <string>

#include "sweep/sweep_spec.hpp"

namespace dnnlab::sweep {
namespace {

std::string sweep_error(const std::string& text, const std::string& file = "s.yaml") {
  try {
    parse_sweep(text, file);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "accepted";
}

const std::string kSearch = "search:\n  method: grid\n  parameters:\n    w: [8, 16]\n";

TEST(SweepYamlLimits, CycleInTheTemplateIsRefused) {
  // RunTemplate's placeholder scan walked the template recursively: an alias
  // back to the template made it recurse until SIGSEGV.
  const std::string text =
      "name: c\ntemplate: &t\n  model: {layers: [{dense: ${w}}, {dense: 10}]}\n  x: *t\n" + kSearch;
  const std::string what = sweep_error(text, "cycle.yaml");
  EXPECT_EQ(what.rfind("cycle.yaml:4:6: ", 0), 0u) << what;
  EXPECT_NE(what.find("a cycle"), std::string::npos) << what;
  EXPECT_NE(sweep_error("a: &x [*x]\n").find("a cycle"), std::string::npos);
}

TEST(SweepYamlLimits, DeepNestingAndBillionLaughsAreRefused) {
  const std::string deep =
      "name: d\ntemplate: " + std::string(100000, '[') + std::string(100000, ']') + "\n" + kSearch;
  const std::string what = sweep_error(deep, "deep.yaml");
  EXPECT_EQ(what.rfind("deep.yaml:2:", 0), 0u) << what.substr(0, 200);
  EXPECT_NE(what.find("nest more than 64 levels"), std::string::npos) << what.substr(0, 200);

  std::string bomb = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    bomb += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) bomb += (j ? ", *l" : "*l") + std::to_string(i - 1);
    bomb += "]\n";
  }
  const std::string laughs = sweep_error(bomb, "laughs.yaml");
  EXPECT_NE(laughs.find("once its aliases are expanded"), std::string::npos) << laughs;
  EXPECT_EQ(laughs.rfind("laughs.yaml:5:", 0), 0u) << laughs;
}

TEST(SweepMemory, LargestTrialIsTheWidestModelAtTheLargestBatch) {
  const SweepSpec s = parse_sweep(
      "name: m\ntemplate:\n  data: {dataset: synthetic, validation: 10}\n"
      "  model: {layers: [{dense: ${w}}, {dense: 10}]}\n"
      "  train: {epochs: 1, batch_size: ${b}}\n"
      "search:\n  method: grid\n  parameters:\n    w: [8, 1000, 16]\n    b: [32, 4096]\n",
      "m.yaml");
  const LargestTrial t = largest_trial(s);
  EXPECT_EQ(t.params["w"], 1000);
  EXPECT_EQ(t.batch_size, 4096);
  // 4096 rows of input, dense 1000 and dense 10 outputs and their gradients.
  EXPECT_GE(t.memory.activations, int64_t{4} * 4096 * (784 + 2 * 1000 + 2 * 10));
  EXPECT_EQ(t.memory.weights, int64_t{4} * (784 * 1000 + 1000 + 1000 * 10 + 10));
}

}  // namespace
}  // namespace dnnlab::sweep
