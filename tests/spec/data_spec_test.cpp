// The `data:` section: data sets by name (python3-sklearn's tables included)
// and by path, the checks between its keys, the defaults that depend on the
// data, errors from the files reported at data.path, and a tiny MLP that
// learns the digits table through all of it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "data/dataset.hpp"
#include "nn/model.hpp"
#include "nn/train.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::spec {
namespace {

constexpr const char* kDigits =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

struct TempFile {
  std::string path;
  TempFile(const std::string& name, const std::string& text)
      : path((std::filesystem::temp_directory_path() /
              ("dnnlab-spec-" + std::to_string(::getpid()) + "-" + name))
                 .string()) {
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

std::string spec_with(const std::string& data, const std::string& classes = "3") {
  return "data:\n" + data +
         "model:\n  layers:\n    - dense: 8\n      activation: relu\n    - dense: " + classes +
         "\n";
}

SpecError error_of(const std::string& text) {
  try {
    parse_run_spec(text, "s.yaml");
  } catch (const SpecError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return SpecError(SpecLocation{}, "", "");
}

std::string rows(int n) {
  std::string t = "a,b,label\n";
  for (int i = 0; i < n; ++i)
    t += std::to_string(i) + "," + std::to_string(i % 7) + "," + std::to_string(i % 3) + "\n";
  return t;
}

TEST(DataSpec, PathIsCheckedAgainstTheFile) {
  TempFile csv("t.csv", rows(100));
  nn::RunSpec run =
      parse_run_spec(spec_with("  path: " + csv.path + "\n  test_fraction: 0.2\n"), "s.yaml");
  EXPECT_EQ(run.data.path, csv.path);
  EXPECT_EQ(run.data.dataset, std::filesystem::path(csv.path).filename().string());
  EXPECT_FLOAT_EQ(run.data.test_fraction, 0.2f);
  EXPECT_EQ(run.data.validation, 16);  // a fifth of the 80 left after the test split

  // The model's last layer against the file's 3 classes.
  SpecError e = error_of(spec_with("  path: " + csv.path + "\n", "5"));
  EXPECT_NE(std::string(e.what()).find("gives 5 outputs per sample but the data set has 3 classes"),
            std::string::npos)
      << e.what();
  // validation against the file's rows.
  e = error_of(spec_with("  path: " + csv.path + "\n  validation: 100\n"));
  EXPECT_EQ(e.field(), "data.validation");
  EXPECT_NE(std::string(e.what()).find("must be smaller than the 100 training samples"),
            std::string::npos)
      << e.what();
  // model.input against the file's features.
  e = error_of("data:\n  path: " + csv.path +
               "\nmodel:\n  input: [3]\n  layers:\n    - dense: 3\n");
  EXPECT_EQ(e.field(), "model.input");
}

TEST(DataSpec, BadFilesAreSpecErrorsAtDataPath) {
  TempFile csv("bad.csv", "a,b,y\n1,2,0\n3,x,1\n");
  SpecError e = error_of(spec_with("  path: " + csv.path + "\n"));
  EXPECT_EQ(e.field(), "data.path");
  EXPECT_EQ(e.where().line, 2);
  EXPECT_NE(std::string(e.what()).find("at byte 14: line 3, column 3: 'x' is not a number"),
            std::string::npos)
      << e.what();
  e = error_of(spec_with("  path: /nonexistent/x.csv\n"));
  EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
}

TEST(DataSpec, KeysThatGoTogether) {
  TempFile csv("t2.csv", rows(30));
  const std::string path = "  path: " + csv.path + "\n";
  struct Case {
    std::string data, field, message;
  };
  const Case cases[] = {
      {"  dataset: mnist\n" + path, "data.dataset", "either dataset (a name) or path"},
      {"  dataset: digits\n  header: true\n", "data.header", "only to a data set given by path"},
      {"  label_column: y\n", "data.label_column", "only to a data set given by path"},
      {path + "  test_path: " + csv.path + "\n  test_fraction: 0.1\n", "data.test_fraction",
       "comes from test_path"},
      {path + "  test_labels: y.npy\n", "data.test_labels", "needs test_path"},
      {"  dataset: mnist\n  test_fraction: 0.1\n", "data.test_fraction", "has its own test set"},
      {path + "  test_fraction: 1\n", "data.test_fraction", ""},
      {path + "  format: parquet\n", "data.format", "unknown data format 'parquet'"},
      {path + "  header: maybe\n", "data.header", "unknown header 'maybe'"},
      {path + "  label_column: nope\n", "data.path", "label_column 'nope' is not a column"},
  };
  for (const Case& c : cases) {
    SpecError e = error_of(spec_with(c.data));
    EXPECT_EQ(e.field(), c.field) << c.data << "\n-> " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
  }
}

TEST(DataSpec, CanonicalFormRoundTripsEveryKey) {
  TempFile tr("tr.csv", rows(40)), te("te.csv", rows(10));
  nn::RunSpec run =
      parse_run_spec(spec_with("  path: " + tr.path + "\n  test_path: " + te.path +
                               "\n  label_column: label\n  header: true\n  format: csv\n"
                               "  validation: 5\n  normalize: unit\n"),
                     "s.yaml");
  const std::string yaml = to_yaml(run);
  EXPECT_EQ(yaml.find("dataset:"), std::string::npos) << yaml;  // named by its path
  nn::RunSpec back = parse_run_spec(yaml, "c.yaml");
  EXPECT_EQ(back.data.key(), run.data.key());
  EXPECT_EQ(back.data.label_column, "label");
  EXPECT_EQ(back.data.header, "true");
  EXPECT_EQ(back.data.test_path, te.path);
  // A name: the table's test split is written out.
  if (std::filesystem::exists(kDigits)) {
    run = parse_run_spec(spec_with("  dataset: digits\n", "10"), "s.yaml");
    EXPECT_NE(to_yaml(run).find("test_fraction: 0.2"), std::string::npos);
    EXPECT_EQ(parse_run_spec(to_yaml(run), "c.yaml").data.key(), run.data.key());
  }
}

// The table of named data sets in run_spec.cpp against the files: the spec
// validates models with it and never reads them.
TEST(DataSpec, NamedTablesMatchTheirFiles) {
  if (!std::filesystem::exists(kDigits)) GTEST_SKIP() << "python3-sklearn is not installed";
  for (const char* name : {"digits", "breast-cancer", "wine", "iris"}) {
    nn::Shape sample;
    int64_t classes = 0;
    ASSERT_TRUE(dataset_shape(name, &sample, &classes)) << name;
    data::LoadOptions o;
    o.name = name;
    const data::SampleShape real = data::sample_shape(o);
    EXPECT_EQ(sample, real.sample) << name;
    EXPECT_EQ(classes, real.num_classes) << name;
  }
  nn::RunSpec run = parse_run_spec(spec_with("  dataset: digits\n", "10"), "s.yaml");
  EXPECT_FLOAT_EQ(run.data.test_fraction, 0.2f);
  EXPECT_EQ(run.data.validation, 287);  // (1797 - 359) / 5
}

// docs/spec.md's `data` table has a row for each key the parser takes, and
// no other.
TEST(DataSpec, DocsDataTableListsEveryKey) {
  const char* src = std::getenv("DNNLAB_SOURCE_DIR");
  const std::filesystem::path root =
      src && *src ? std::filesystem::path(src)
                  : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  std::ifstream f(root / "docs/spec.md");
  ASSERT_TRUE(f) << "docs/spec.md not found";
  std::vector<std::string> documented;
  bool in_data = false;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("### ", 0) == 0) in_data = line == "### `data`";
    if (in_data && line.rfind("| `", 0) == 0)
      documented.push_back(line.substr(3, line.find('`', 3) - 3));
  }
  const std::string msg =
      error_of("data:\n  no_such_key: 1\nmodel:\n  layers: [{dense: 10}]\n").what();
  const size_t open = msg.find("(valid: ");
  ASSERT_NE(open, std::string::npos) << msg;
  std::vector<std::string> valid;
  std::stringstream list(msg.substr(open + 8, msg.find(')', open) - open - 8));
  for (std::string k; std::getline(list, k, ',');)
    valid.push_back(k.substr(k.find_first_not_of(' ')));
  std::sort(documented.begin(), documented.end());
  std::sort(valid.begin(), valid.end());
  EXPECT_EQ(documented, valid);
}

// The digits table through the CSV path, trained as `dnnlab train` trains:
// a small MLP clearly beats chance (0.10) on the held-out test split.
TEST(DataSpec, TinyMlpLearnsDigits) {
  if (!std::filesystem::exists(kDigits)) GTEST_SKIP() << "python3-sklearn is not installed";
  const nn::RunSpec run = parse_run_spec(R"(data:
  dataset: digits
model:
  layers:
    - dense: 32
      activation: relu
    - dense: 10
train:
  epochs: 8
  batch_size: 32
  seed: 3
  optimizer: {type: adam, lr: 0.003}
)",
                                         "digits.yaml");
  const data::Dataset ds = data::load(data::load_options(run.data, ""));
  EXPECT_EQ(ds.test.size(), 359);
  nn::Model model = nn::Model::build(run.model, nn::model_input(run.model, ds.sample_shape),
                                     ds.num_classes, run.train.seed);
  nn::Trainer trainer(model, run.train);
  nn::LabeledData train{ds.train.x.view(), ds.train.y.data()};
  nn::LabeledData val{ds.val.x.view(), ds.val.y.data()};
  const auto curve = trainer.fit(train, &val, nullptr);
  ASSERT_EQ(curve.size(), 8u);
  const nn::LossAndAccuracy test = model.evaluate(ds.test.x.view(), ds.test.y.data());
  EXPECT_GT(test.accuracy, 0.85) << "test accuracy " << test.accuracy;
  EXPECT_GT(*curve.back().val_acc, 0.85);
}

}  // namespace
}  // namespace dnnlab::spec
