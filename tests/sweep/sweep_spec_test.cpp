// Sweep files in, runs or located errors out.
#include "sweep/sweep_spec.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "sweep/run_template.hpp"
#include "sweep/sampler.hpp"
#include "sweep/scheduler.hpp"
#include "test_files.hpp"

namespace dnnlab::sweep {
namespace {

using testing::TempDir;

// Lines noted for the error table below.
const std::string kBase = R"(name: t
template:
  data: {dataset: fashion-mnist, limit_train: 1000}
  model:
    layers:
      - repeat: ${depth}
        dense: ${width}
        activation: ${act}
      - dense: 10
  train:
    epochs: 4
    optimizer: {type: sgd, lr: ${lr}, momentum: 0.9}
search:
  method: random
  budget: 10
  parameters:
    depth: [1, 2]
    width: {int: [8, 64], step: 8}
    act: [relu, tanh]
    lr: {loguniform: [1.0e-4, 1.0e-1]}
scheduler:
  type: asha
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// line:column (1-based) of the first `needle` in `text`, after `after`.
std::pair<int, int> locate(const std::string& text, const std::string& needle,
                           const std::string& after = "") {
  size_t at = text.find(needle, after.empty() ? 0 : text.find(after));
  EXPECT_NE(at, std::string::npos) << needle;
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < at; ++i)
    if (text[i] == '\n') ++line, line_start = i + 1;
  return {line, static_cast<int>(at - line_start) + 1};
}

TEST(SweepSpec, ParsesAndMaterializes) {
  TempDir dir;
  SweepSpec s = load_sweep(dir.write("t.yaml", kBase));
  EXPECT_EQ(s.name, "t");
  EXPECT_EQ(s.search.method, "random");
  EXPECT_EQ(s.search.budget, 10);
  EXPECT_EQ(s.search.mode, "max");
  ASSERT_EQ(s.search.parameters.size(), 4u);
  EXPECT_TRUE(s.search.find("depth")->in_model);
  EXPECT_FALSE(s.search.find("lr")->in_model);
  EXPECT_EQ(s.scheduler.type, "asha");
  EXPECT_EQ(s.max_epochs, 4);

  TrialConfig t{7, {{"depth", 2}, {"width", 24}, {"act", "tanh"}, {"lr", 0.003}}, 0};
  t.seed = trial_seed(s.search.seed, t.params);
  nn::RunSpec run = s.materialize(t);
  EXPECT_EQ(run.name, "t-7");
  EXPECT_EQ(run.train.seed, t.seed);
  EXPECT_FLOAT_EQ(run.train.optimizer.lr, 0.003f);
  ASSERT_EQ(run.model.layers.size(), 5u);  // 2 x (dense, tanh) + dense
  EXPECT_EQ(run.model.layers[0].type, "dense");
  EXPECT_EQ(run.model.layers[0].attrs.get("units"), 24);
  EXPECT_EQ(run.model.layers[1].type, "tanh");
  EXPECT_EQ(run.model.layers[4].attrs.get("units"), 10);
  EXPECT_EQ(run.model.layers[4].where.line, 9);  // sweep-file lines survive
  EXPECT_EQ(run.data.limit_train, 1000);
}

TEST(SweepSpec, PlaceholdersInsideStringsAndQuotes) {
  TempDir dir;
  std::string text = R"(template:
  name: "run-${act}-${n}"
  data: {dataset: "fashion-${ds}"}
  model: {layers: [{dense: 10, activation: '${act}'}]}
search:
  method: grid
  metric: val_loss
  parameters:
    act: [relu, "tanh"]
    ds: [mnist]
    n: [1, 2.5]
)";
  SweepSpec s = load_sweep(dir.write("strings.yaml", text));
  EXPECT_EQ(s.name, "strings");
  EXPECT_EQ(s.search.mode, "min");  // from the metric
  nn::RunSpec run = s.instantiate({{"act", "tanh"}, {"ds", "mnist"}, {"n", 2.5}});
  EXPECT_EQ(run.name, "run-tanh-2.5");
  EXPECT_EQ(run.data.dataset, "fashion-mnist");
  ASSERT_EQ(run.model.layers.size(), 2u);
  EXPECT_EQ(run.model.layers[1].type, "tanh");
}

TEST(SweepSpec, ChoiceValuesKeepTheirType) {
  TempDir dir;
  std::string text = R"(template:
  name: r
  model: {layers: [{dense: 10}]}
  train: {epochs: ${e}, batch_size: ${b}}
search:
  parameters:
    e: [1, 3]
    b: [16, "32"]
)";
  // "32" is a quoted string: batch_size must be a number, so the check fails
  // before anything runs, naming the value.
  try {
    load_sweep(dir.write("types.yaml", text));
    FAIL() << "expected SpecError";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "template.train.batch_size");
    EXPECT_EQ(e.where().line, 4);
    EXPECT_NE(std::string(e.what()).find("b=\"32\""), std::string::npos) << e.what();
  }
}

struct BadCase {
  const char* name;
  std::string text;
  std::string needle;  // where the error must point
  std::string after;   // search for needle after this text
  std::string field;
  std::string message;  // a part of the message
};

TEST(SweepSpec, BadFilesGiveLocatedErrors) {
  const std::vector<BadCase> cases = {
      {"unknown search key", replace(kBase, "budget: 10", "budgte: 10"), "budgte", "",
       "search.budgte", "did you mean 'budget'"},
      {"unknown top key", replace(kBase, "scheduler:", "schedular:"), "schedular", "", "schedular",
       "did you mean 'scheduler'"},
      {"unknown range key", replace(kBase, "step: 8", "stpe: 8"), "stpe", "",
       "search.parameters.width.stpe", "did you mean 'step'"},
      {"low >= high", replace(kBase, "[1.0e-4, 1.0e-1]", "[1.0e-1, 1.0e-4]"), "[1.0e-1", "",
       "search.parameters.lr.loguniform", "must be below high"},
      {"int low >= high", replace(kBase, "[8, 64]", "[64, 64]"), "[64, 64]", "",
       "search.parameters.width.int", "must be below high"},
      {"loguniform low <= 0", replace(kBase, "[1.0e-4, 1.0e-1]", "[0, 1.0e-1]"), "0, 1.0e-1", "",
       "search.parameters.lr.loguniform[0]", "low > 0"},
      {"empty choices", replace(kBase, "depth: [1, 2]", "depth: []"), "[]", "",
       "search.parameters.depth", "empty"},
      {"int step < 1", replace(kBase, "step: 8", "step: 0"), "0}",
       "step:", "search.parameters.width.step", ">= 1"},
      {"unknown method", replace(kBase, "method: random", "method: grdi"), "grdi", "",
       "search.method", "did you mean 'grid'"},
      {"unknown metric", replace(kBase, "method: random", "method: random\n  metric: val_accuracy"),
       "val_accuracy", "", "search.metric", "val_acc"},
      {"a placeholder where the search needs a number",
       replace(kBase, "budget: 10", "budget: ${depth}"), "${depth}", "budget:", "search.budget",
       "got '${depth}'"},
      {"no validation data, default metric val_acc",
       replace(kBase, "limit_train: 1000}", "limit_train: 1000, validation: 0}"), "", "",
       "search.metric", "'val_acc' needs validation data, but template.data.validation is 0"},
      {"no validation data, metric val_loss",
       replace(replace(kBase, "limit_train: 1000}", "limit_train: 1000, validation: 0}"),
               "method: random", "method: random\n  metric: val_loss"),
       "val_loss", "", "search.metric", "hold out validation samples"},
      {"unknown mode", replace(kBase, "method: random", "method: random\n  mode: maximum"),
       "maximum", "", "search.mode", "max"},
      {"unknown scheduler", replace(kBase, "type: asha", "type: hyperband"), "hyperband", "",
       "scheduler.type", "asha"},
      {"scheduler option of another type",
       replace(kBase, "type: asha", "type: asha\n  grace_epochs: 2"), "grace_epochs", "",
       "scheduler.grace_epochs", "median"},
      {"placeholder without parameter", replace(kBase, "dense: ${width}", "dense: ${widht}"),
       "${widht}", "", "template.model.layers[0].dense", "did you mean 'width'"},
      {"placeholder inside a string without parameter",
       replace(kBase, "limit_train: 1000}", "limit_train: 1000, normalize: x-${norm}}"), "${norm}",
       "", "template.data.normalize", "${norm}"},
      {"malformed placeholder", replace(kBase, "${act}", "${ act }"), "${ act }", "",
       "template.model.layers[0].activation", "malformed"},
      {"parameter never used",
       replace(kBase, "    act: [relu, tanh]\n", "    act: [relu, tanh]\n    extra: [1, 2]\n"),
       "extra", "", "search.parameters.extra", "never used"},
      {"zero width for some values", replace(kBase, "[8, 64]", "[0, 64]"), "${width}", "",
       "template.model.layers[0].dense", "width=0"},
      {"wrong class count",
       replace(replace(kBase, "    act: [relu, tanh]\n",
                       "    act: [relu, tanh]\n    classes: [10, 12]\n"),
               "- dense: 10", "- dense: ${classes}"),
       "dense: ${classes}", "", "template.model.layers[1]", "classes=12"},
      {"grid over a continuous range", replace(kBase, "method: random", "method: grid"),
       "lr:", "parameters:", "search.parameters.lr", "grid"},
      {"grid over an int range without step",
       replace(replace(kBase, "method: random", "method: grid"), ", step: 8", ""), "width",
       "parameters:", "search.parameters.width", "step"},
      {"random without budget", replace(kBase, "  budget: 10\n", ""), "method", "", "search.budget",
       "budget"},
      {"run-spec error in the template", replace(kBase, "epochs: 4", "epocs: 4"), "epocs", "",
       "template.train.epocs", "did you mean 'epochs'"},
      {"run-spec error after a substitution on the same line",
       replace(replace(kBase, "momentum: 0.9", "weight_decay: ${wd}, momentum: 7"),
               "    act: [relu, tanh]\n", "    act: [relu, tanh]\n    wd: [0.0, 0.25]\n"),
       "7}", "momentum", "template.train.optimizer.momentum", "momentum"},
      {"values out of a run-spec range",
       replace(replace(kBase, "momentum: 0.9", "momentum: ${mom}"), "    act: [relu, tanh]\n",
               "    act: [relu, tanh]\n    mom: {uniform: [0.5, 1.5]}\n"),
       "${mom}", "", "template.train.optimizer.momentum", "mom=1.5"},
      {"template not a map", replace(kBase, "template:\n", "template: 3\nx:\n"), "3", "template",
       "template", "run spec"},
      {"yaml syntax", replace(kBase, "depth: [1, 2]", "depth: [1, 2"), "", "", "", "YAML"},
  };
  TempDir dir;
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::string path = dir.write("bad.yaml", c.text);
    try {
      load_sweep(path);
      ADD_FAILURE() << "expected a SpecError";
    } catch (const SpecError& e) {
      std::string what = e.what();
      EXPECT_EQ(e.field(), c.field) << what;
      EXPECT_NE(what.find(c.message), std::string::npos) << what;
      EXPECT_EQ(e.where().file, path);
      if (!c.needle.empty()) {
        auto [line, column] = locate(c.text, c.needle, c.after);
        EXPECT_EQ(e.where().line, line) << what;
        EXPECT_EQ(e.where().column, column) << what;
      } else {
        EXPECT_GT(e.where().line, 0) << what;
      }
    }
  }
}

TEST(SweepSpec, PlaceholderErrorNamesLineAndColumn) {
  try {
    parse_sweep(replace(kBase, "dense: ${width}", "dense: ${widht}"), "s.yaml");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("s.yaml:7:16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 7, column 16"), std::string::npos) << e.what();
  }
}

TEST(SweepSpec, NoValidationDataIsFineForATrainMetric) {
  const std::string text =
      replace(replace(kBase, "limit_train: 1000}", "limit_train: 1000, validation: 0}"),
              "method: random", "method: random\n  metric: train_loss");
  const SweepSpec s = parse_sweep(text, "s.yaml");
  EXPECT_EQ(s.search.metric, "train_loss");
}

TEST(SweepSpec, MissingFile) {
  EXPECT_THROW(load_sweep("/nonexistent/sweep.yaml"), SpecError);
}

TEST(SweepSpec, ExamplesParse) {
  const std::string root = testing::source_dir();
  SweepSpec depth = load_sweep(root + "/examples/depth-sweep.yaml");
  EXPECT_EQ(depth.search.method, "grid");
  EXPECT_EQ(depth.scheduler.type, "fifo");  // no rung stops a deep net for being deep
  GridSampler grid(depth.search);
  EXPECT_EQ(grid.size(), 63u);  // 7 depths x 3 families x 3 activations
  int n = 0;
  std::optional<TrialConfig> deepest;
  while (auto t = grid.next()) {
    ++n;
    EXPECT_NO_THROW(depth.materialize(*t)) << t->params.dump();
    if (t->params["depth"] == 700 && t->params["family"] == "plain" && !deepest) deepest = t;
  }
  EXPECT_EQ(n, 63);
  ASSERT_TRUE(deepest);
  EXPECT_EQ(deepest->index, 0) << "the deepest trials come first";
  nn::RunSpec run = depth.materialize(*deepest);
  EXPECT_EQ(run.model.layers.size(), 700u * 2 + 1);
  EXPECT_EQ(run.name, "depth-sweep-" + std::to_string(deepest->index));
  EXPECT_EQ(run.data.limit_train, 0) << "the full training set";
  EXPECT_EQ(depth.max_epochs, 3);

  SweepSpec quick = load_sweep(root + "/examples/quick-sweep.yaml");
  GridSampler q(quick.search);
  EXPECT_EQ(q.size(), 4u);
  while (auto t = q.next()) {
    nn::RunSpec r = quick.materialize(*t);
    EXPECT_EQ(r.data.limit_train, 2000);
    EXPECT_EQ(r.train.epochs, 2);
  }
}

// The second data set's example: python3-sklearn's digits table by name,
// through the CSV path (skipped where the package is not installed).
TEST(SweepSpec, DigitsExampleParses) {
  if (!std::filesystem::exists(
          "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"))
    GTEST_SKIP() << "python3-sklearn is not installed";
  SweepSpec digits = load_sweep(testing::source_dir() + "/examples/digits-mlp.yaml");
  GridSampler grid(digits.search);
  EXPECT_EQ(grid.size(), 36u);
  while (auto t = grid.next()) {
    nn::RunSpec r = digits.materialize(*t);
    EXPECT_EQ(r.data.dataset, "digits");
    EXPECT_FLOAT_EQ(r.data.test_fraction, 0.2f);
    EXPECT_EQ(r.data.validation, 300);
  }
  const LargestTrial largest = largest_trial(digits);
  EXPECT_GT(largest.memory.total(), 0);
}

}  // namespace
}  // namespace dnnlab::sweep
