// One training run from a RunSpec on a loaded data set: build, train with an
// observer, evaluate on the test split, and describe how it was made. Used
// by `dnnlab train`, by sweep workers and by `dnnlab rerun`.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "nn/model.hpp"
#include "nn/spec.hpp"
#include "nn/train.hpp"

namespace dnnlab::experiment {

struct RunResult {
  std::vector<nn::EpochResult> curve;
  double test_loss = 0, test_acc = 0;  // 0 without a test split (result_json: null)
  double train_seconds = 0;
  bool stopped_early = false;  // the observer ended it (pruned, cancelled)
  bool tested = false;         // the test split was evaluated (test_loss, test_acc hold)
  int64_t num_params = 0;
};

// Whether a run the observer stopped early (a pruned trial) is still
// evaluated on the test split. A sweep's own worker skips it: a pruned net's
// test accuracy answers nothing, and on small trials the 10,000 Fashion-MNIST
// test images cost more than the training. A native re-run checking a
// client's result evaluates it, since the client reports one.
enum class TestWhenStopped { evaluate, skip };

// Trains `spec` on `data`. Throws SpecError for a model that does not fit the
// data, NumericError when the loss diverges. `model_out` / `keep_model`,
// when given, receive the trained model (for saving weights).
RunResult train_run(const nn::RunSpec& spec, const data::Dataset& data, nn::TrainObserver* obs,
                    nn::Model* model_out = nullptr, std::optional<nn::Model>* keep_model = nullptr,
                    TestWhenStopped stopped = TestWhenStopped::evaluate);

// A trained model as a safetensors file with the metadata `dnnlab train`
// writes (name, seed, build_id, spec) and `extra` (a trial's id and params).
std::string weights_file(const nn::RunSpec& spec, nn::Model& model,
                         const std::map<std::string, std::string>& extra = {});

// Options for loading the data set a spec names (`data_dir` overrides the
// default location; empty keeps it).
data::LoadOptions load_options(const nn::DataSpec& spec, const std::string& data_dir);

// How a result was made: build id, compiler, kernel target, data set hash.
nlohmann::json provenance(const data::Dataset& data);

// The result as JSON (spec, seed, curve, test metrics, provenance).
nlohmann::json result_json(const nn::RunSpec& spec, const RunResult& r, const data::Dataset& data);

}  // namespace dnnlab::experiment
