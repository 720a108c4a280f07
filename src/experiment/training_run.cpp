#include "experiment/training_run.hpp"

#include "experiment/build_provenance.hpp"
#include "nn/safetensors.hpp"

namespace dnnlab::experiment {
namespace {
// A value or null: no validation data means no validation metric.
nlohmann::json or_null(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
}  // namespace

data::LoadOptions load_options(const nn::DataSpec& spec, const std::string& data_dir) {
  return data::load_options(spec, data_dir);
}

RunResult train_run(const nn::RunSpec& spec, const data::Dataset& data, nn::TrainObserver* obs,
                    nn::Model* model_out, std::optional<nn::Model>* keep_model,
                    TestWhenStopped stopped) {
  nn::Model model = nn::Model::build(spec.model, nn::model_input(spec.model, data.sample_shape),
                                     data.num_classes, spec.train.seed);
  nn::Trainer trainer(model, spec.train);
  nn::LabeledData train{data.train.x.view(), data.train.y.data()};
  nn::LabeledData val{data.val.x.view(), data.val.y.data()};
  RunResult r;
  r.num_params = model.num_params();
  r.curve = trainer.fit(train, data.val.size() ? &val : nullptr, obs);
  r.stopped_early = static_cast<int>(r.curve.size()) < spec.train.epochs;
  for (const auto& e : r.curve) r.train_seconds += e.seconds;
  if (data.test.size() && !(r.stopped_early && stopped == TestWhenStopped::skip)) {
    nn::LossAndAccuracy t = model.evaluate(data.test.x.view(), data.test.y.data());
    r.test_loss = t.loss;
    r.test_acc = t.accuracy;
    r.tested = true;
  }
  if (model_out)
    *model_out = std::move(model);
  else if (keep_model)
    keep_model->emplace(std::move(model));
  return r;
}

std::string weights_file(const nn::RunSpec& spec, nn::Model& model,
                         const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> meta = extra;
  meta["name"] = spec.name;
  meta["seed"] = std::to_string(spec.train.seed);
  meta["build_id"] = build_provenance().value("build_id", "");
  meta["spec"] = spec.source;
  return nn::to_safetensors(model.saved_tensors(), meta);
}

nlohmann::json provenance(const data::Dataset& data) {
  nlohmann::json p = build_provenance();
  p["dataset"] = data.name;
  p["dataset_sha256"] = data.sha256;
  return p;
}

nlohmann::json result_json(const nn::RunSpec& spec, const RunResult& r, const data::Dataset& data) {
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& e : r.curve)
    curve.push_back({{"epoch", e.epoch},
                     {"train_loss", e.train_loss},
                     {"train_acc", e.train_acc},
                     {"val_loss", or_null(e.val_loss)},
                     {"val_acc", or_null(e.val_acc)},
                     {"seconds", e.seconds},
                     {"samples_per_second", e.samples_per_second},
                     {"lr", e.lr}});
  return {{"name", spec.name},
          {"seed", spec.train.seed},
          {"spec", spec.source},
          {"num_params", r.num_params},
          {"epochs", curve},
          {"val_acc", r.curve.empty() ? nlohmann::json(nullptr) : or_null(r.curve.back().val_acc)},
          {"test_loss", r.tested ? nlohmann::json(r.test_loss) : nlohmann::json(nullptr)},
          {"test_acc", r.tested ? nlohmann::json(r.test_acc) : nlohmann::json(nullptr)},
          {"train_seconds", r.train_seconds},
          {"provenance", provenance(data)}};
}

}  // namespace dnnlab::experiment
