// Kept weights end to end: `dnnlab run` keeps the best keep_weights trials'
// files (a native worker's safetensors with the trial's metadata), `dnnlab
// export --weights` writes them, refusing a corrupt one by name, and `dnnlab
// pin` marks a trial.
#include <nlohmann/json.hpp>
#include <set>

#include "cli_util.hpp"
#include "nn/safetensors.hpp"
#include "store/result_store.hpp"

namespace dnnlab::cli_test::weights_cmds {
namespace {

const std::string kSweep = R"(name: keep
template:
  data: {dataset: synthetic, limit_train: 128, validation: 64}
  model:
    layers:
      - dense: 8
        activation: relu
      - dense: 10
  train:
    epochs: 2
    batch_size: 32
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: grid
  keep_weights: 2
  parameters:
    lr: [0.3, 0.1, 0.03, 0.01, 0.003, 0.001]
)";

TEST(WeightsCmds, TheBestKAreKeptExportedAndACorruptFileIsNamed) {
  TempDir dir;
  const std::string url = "sqlite:" + (dir.path / "t.db").string();
  Result r =
      run("run -q -w 1 --no-server --store " + url + " " + dir.write("s.yaml", kSweep).string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto s = store::open_result_store(url);
  const std::int64_t exp = s->experiments().at(0).id;
  const auto kept = s->weights_of(exp);
  ASSERT_EQ(kept.size(), 2u);
  store::TrialQuery best;
  best.sort_by = "val_acc";
  best.descending = true;
  best.limit = 2;
  std::set<std::int64_t> top, got;
  for (const auto& t : s->trials(exp, best)) top.insert(t.id);
  for (const auto& w : kept) got.insert(w.trial_id);
  EXPECT_EQ(got, top) << "the two best by val_acc";

  const auto out = dir.path / "w";
  r = run("export keep --weights --out " + out.string() + " --store " + url);
  ASSERT_EQ(r.code, 0) << r.err;
  for (std::int64_t id : top) {
    const std::string bytes = slurp(out / (std::to_string(id) + ".safetensors"));
    nn::SafetensorsFile f = nn::read_safetensors(bytes, "exported");
    EXPECT_EQ(f.metadata.at("trial_id"), std::to_string(id));
    EXPECT_EQ(nlohmann::json::parse(f.metadata.at("params")),
              nlohmann::json::parse(s->trial(id)->config_json));
    EXPECT_FALSE(f.metadata.at("spec").empty());
    EXPECT_FALSE(f.tensors.empty());
  }

  // A file that is not safetensors: named, not written; the others are.
  const std::int64_t bad = *top.begin();
  s->put_weights(bad, "not safetensors");
  s.reset();
  std::filesystem::remove_all(out);
  r = run("export keep --weights --out " + out.string() + " --store " + url);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("trial " + std::to_string(bad) + ": not a safetensors file"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(out / (std::to_string(bad) + ".safetensors")));
  EXPECT_TRUE(std::filesystem::exists(out / (std::to_string(*top.rbegin()) + ".safetensors")));

  r = run("pin " + std::to_string(bad) + " --store " + url);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(store::open_result_store(url)->trial(bad)->pinned);
  EXPECT_EQ(run("pin 999999 --store " + url).code, 2);
}

}  // namespace
}  // namespace dnnlab::cli_test::weights_cmds
