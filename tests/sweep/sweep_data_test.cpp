// sweep::data_specs: every data file a sweep's trials can read, placeholders
// in file names included, so that a server can check them all before it
// accepts the sweep.
#include "sweep/sweep_data.hpp"

#include <gtest/gtest.h>

#include <set>

namespace dnnlab::sweep {
namespace sweep_data_test {

const char* kByPath = R"(name: p
template:
  data: {path: "/data/${set}/${part}.csv", validation: 8}
  model:
    layers:
      - dense: ${width}
      - dense: 2
  train: {optimizer: {type: sgd, lr: ${lr}}}
search:
  method: grid
  parameters:
    set: [a, "..", b]
    part: [train, x]
    width: [4, 8, 16]
    lr: {loguniform: [0.001, 0.1]}
)";

TEST(SweepData, EveryCombinationOfTheParametersThatNameFiles) {
  SweepSpec s = parse_sweep(kByPath, "p.yaml");
  std::set<std::string> paths;
  for (const auto& d : data_specs(s)) paths.insert(d.path);
  const std::set<std::string> want = {"/data/a/train.csv",  "/data/a/x.csv",  "/data/../train.csv",
                                      "/data/../x.csv",     "/data/b/train.csv", "/data/b/x.csv"};
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
