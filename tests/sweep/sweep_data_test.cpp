// sweep::data_specs: every data file a sweep's trials can read, placeholders
// in file names included, so that a server can check them all before it
// accepts the sweep.
#include "sweep/sweep_data.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace dnnlab::sweep {
namespace sweep_data_test {

// A sweep whose data file's name is made of two parameters; the files exist
// (the parser reads their headers).
struct DataFiles {
  std::filesystem::path base =
      std::filesystem::temp_directory_path() / ("dnnlab-sweepdata-" + std::to_string(::getpid()));
  DataFiles() {
    std::string csv = "a,b,label\n";
    for (int i = 0; i < 40; ++i)
      csv += std::to_string(i % 3) + ",1," + std::to_string(i % 2) + "\n";
    for (const char* dir : {"data/a", "data/b", "."}) {
      std::filesystem::create_directories(base / dir);
      for (const char* f : {"train.csv", "x.csv"}) std::ofstream(base / dir / f) << csv;
    }
  }
  ~DataFiles() {
    std::error_code ec;
    std::filesystem::remove_all(base, ec);
  }
  std::string sweep() const {
    return R"(name: p
template:
  data: {path: ")" +
           (base / "data").string() + R"(/${set}/${part}.csv", validation: 8}
  model:
    layers:
      - dense: ${width}
      - dense: 2
  train: {optimizer: {type: sgd, lr: ${lr}}}
search:
  method: random
  budget: 10
  parameters:
    set: [a, "..", b]
    part: [train, x]
    width: [4, 8, 16]
    lr: {loguniform: [0.001, 0.1]}
)";
  }
};

TEST(SweepData, EveryCombinationOfTheParametersThatNameFiles) {
  DataFiles files;
  SweepSpec s = parse_sweep(files.sweep(), "p.yaml");
  std::set<std::string> paths;
  for (const auto& d : data_specs(s)) paths.insert(d.path);
  const std::string root = (files.base / "data").string();
  std::set<std::string> want;
  for (const char* set : {"a", "..", "b"})
    for (const char* part : {"train", "x"}) want.insert(root + "/" + set + "/" + part + ".csv");
  EXPECT_EQ(paths, want);
}

TEST(SweepData, OneSpecWhenNoParameterNamesAFile) {
  SweepSpec s = parse_sweep(R"(name: q
template:
  data: {dataset: synthetic, limit_train: 64, validation: 8}
  model:
    layers:
      - dense: ${width}
      - dense: 10
search:
  method: grid
  parameters:
    width: [4, 8]
)",
                            "q.yaml");
  auto specs = data_specs(s);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].dataset, "synthetic");
}

}  // namespace sweep_data_test
}  // namespace dnnlab::sweep
