// examples/fashion-cnn.yaml reaches test accuracy >= 0.925 on Fashion-MNIST
// (issue 14). Its twelve epochs cost about 13 CPU-minutes, more than CI can
// spend, so the run's outputs are checked in beside the example
// (fashion-cnn.safetensors, fashion-cnn.metrics.json) and this test ties them
// to the example and to this build:
//   1. the recorded spec (in the weights and the metrics) is the example's
//      canonical form: editing the example without re-recording fails;
//   2. the weights, loaded into the model that spec builds, score >= 0.925 on
//      the real test set, and exactly the recorded test accuracy on the
//      recorded kernel target: a weights file of another run, a corrupted
//      one or a changed model layout (parameter names, shapes, BatchNorm's
//      saved statistics) fails;
//   3. the first epoch, trained again from the example (`--epochs 1`: the
//      cosine schedule's first epoch uses the full rate whatever the epoch
//      count, and each epoch's shuffle depends only on seed and epoch), gives
//      the recorded run's first-epoch losses and accuracies bit for bit. Any
//      change in what the trainer computes (data split, normalization, init,
//      kernels, BatchNorm, dropout, Adam, the schedule) fails here, so a
//      trainer that regressed cannot keep passing on old weights; a change
//      that is meant must re-record the run (12 epochs, ~13 CPU-minutes):
//        dnnlab train examples/fashion-cnn.yaml --out examples
//      and part 2 then checks the new weights against 0.925 again.
//      Part 3 needs the recorded kernel target (avx512): on a CPU without
//      it, it is skipped, and fails under CI.
// About 65 CPU-s (part 3: one epoch of 55,000 samples, run on 2 threads).
#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "data/dataset.hpp"
#include "nn/kernels.hpp"
#include "nn/model.hpp"
#include "nn/safetensors.hpp"
#include "spec/run_spec.hpp"
#include "worker/training_run.hpp"

namespace dnnlab::cli_test {
namespace {

const std::string kExample = std::string(DNNLAB_SOURCE_DIR) + "/examples/fashion-cnn";

nlohmann::json recorded_metrics() {
  return nlohmann::json::parse(slurp(kExample + ".metrics.json"));
}

// The recorded kernel target, selected for this process; false (with the
// test failed under CI, skipped elsewhere) on a CPU without it.
bool select_recorded_kernels(const nlohmann::json& m) {
  const std::string target = m["provenance"]["kernel_target"];
  if (nn::select_kernels(target)) return true;
  const std::string why = "the run was recorded with kernel target " + target +
                          ", which this CPU lacks: its numbers cannot be reproduced here";
  if (std::getenv("CI"))
    ADD_FAILURE() << why;
  else
    std::cerr << "[  SKIPPED ] " << why << "\n";
  return false;
}

TEST(Examples, FashionCnnRecordedRunIsTheExamplesSpec) {
  const nlohmann::json m = recorded_metrics();
  const nn::RunSpec example = spec::load_run_spec(kExample + ".yaml");
  const std::string canonical = spec::to_yaml(example);
  EXPECT_EQ(m["spec"].get<std::string>(), canonical)
      << "examples/fashion-cnn.yaml changed since its run was recorded; re-record it "
         "(see this file's header)";
  const std::string weights = slurp(kExample + ".safetensors");
  const auto meta = nn::read_safetensors(weights, "fashion-cnn.safetensors").metadata;
  EXPECT_EQ(meta.at("spec"), canonical);
  EXPECT_EQ(meta.at("build_id"), m["provenance"]["build_id"].get<std::string>())
      << "the weights and the metrics come from different runs";
  EXPECT_EQ(m["epochs"].size(), static_cast<size_t>(example.train.epochs)) << "a run cut short";
  EXPECT_LE(m["num_params"].get<int64_t>(), 100000) << "the issue's class: under 100k parameters";
}

TEST(Examples, FashionCnnWeightsReachTestAccuracy0925) {
  DNNLAB_NEED_FASHION_MNIST();
  const nlohmann::json m = recorded_metrics();
  nn::RunSpec spec = spec::load_run_spec(kExample + ".yaml");
  data::Dataset data = data::load(worker::load_options(spec.data, ""));
  EXPECT_EQ(data.sha256, m["provenance"]["dataset_sha256"].get<std::string>())
      << "another copy of Fashion-MNIST than the run's";
  nn::Model model = nn::Model::build(spec.model, nn::model_input(spec.model, data.sample_shape),
                                     data.num_classes, spec.train.seed);
  nn::from_safetensors(slurp(kExample + ".safetensors"), model.saved_tensors(),
                       "fashion-cnn.safetensors");
  // The recorded test accuracy is exact only on the recorded kernel target;
  // the >= 0.925 bar holds on any (0.9259 on avx512, avx2 and scalar alike:
  // only the loss's last digits differ).
  const bool exact = nn::select_kernels(m["provenance"]["kernel_target"].get<std::string>());
  const nn::LossAndAccuracy test = model.evaluate(data.test.x.view(), data.test.y.data());
  nn::select_kernels("auto");
  EXPECT_GE(test.accuracy, 0.925) << "test loss " << test.loss;
  if (exact) {
    EXPECT_EQ(test.accuracy, m["test_acc"].get<double>());
    EXPECT_EQ(test.loss, m["test_loss"].get<double>());
  }
}

TEST(Examples, FashionCnnFirstEpochReproducesTheRecordedRun) {
  DNNLAB_NEED_FASHION_MNIST();
  const nlohmann::json m = recorded_metrics();
  if (!select_recorded_kernels(m)) return;
  nn::select_kernels("auto");
  const std::string target = m["provenance"]["kernel_target"];
  TempDir dir;
  Result r = run("train -q " + kExample + ".yaml --epochs 1 --threads 2 --kernels " + target +
                 " --out " + dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json again = nlohmann::json::parse(slurp(dir.path / "fashion-cnn.metrics.json"));
  ASSERT_EQ(again["epochs"].size(), 1u);
  const nlohmann::json &want = m["epochs"][0], &got = again["epochs"][0];
  for (const char* k : {"train_loss", "train_acc", "val_loss", "val_acc", "lr"})
    EXPECT_EQ(got[k].get<double>(), want[k].get<double>())
        << k << ": recorded with " << m["provenance"] << ", now " << again["provenance"];
}

}  // namespace
}  // namespace dnnlab::cli_test
