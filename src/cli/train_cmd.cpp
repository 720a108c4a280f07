// `dnnlab train SPEC`: train one model, print validation and test accuracy,
// write weights (.safetensors) and a metrics JSON.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "data/dataset.hpp"
#include "nn/kernels.hpp"
#include "nn/safetensors.hpp"
#include "spec/run_spec.hpp"
#include "worker/thread_pool.hpp"
#include "worker/training_run.hpp"

namespace dnnlab::cli {
namespace {

struct TrainOptions {
  std::string spec_path;
  std::string out_dir = ".";
  std::string data_dir;
  std::string kernels = "auto";
  int threads = 1;  // threads per batch for the conv kernels (nn/parallel.hpp)
  // Spec fields given as flags, kept as typed: the spec reader checks them
  // like the file's own values.
  std::vector<spec::Override> overrides;
  bool quiet = false;
};

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

int run_train(const TrainOptions& o) {
  if (!nn::select_kernels(o.kernels))
    throw std::invalid_argument("--kernels: '" + o.kernels + "' is not available on this CPU");
  nn::RunSpec spec = spec::load_run_spec(o.spec_path, o.overrides);
  // The same bits on any thread count: the kernels split work by shape only.
  worker::ParallelScope threads(o.threads);
  // What is trained, overrides included: `dnnlab train` on this text repeats the run.
  spec.source = spec::to_yaml(spec);

  if (!o.quiet) std::cerr << "loading " << spec.data.dataset << " ...\n";
  data::Dataset data = data::load(worker::load_options(spec.data, o.data_dir));
  if (!o.quiet)
    std::cerr << spec.name << ": " << data.train.size() << " train / " << data.val.size()
              << " val / " << data.test.size() << " test samples from " << data.dir << ", kernels "
              << nn::kernels().name << ", seed " << spec.train.seed << "\n";

  nn::Model model = nn::Model::build(spec.model, nn::model_input(spec.model, data.sample_shape),
                                     data.num_classes, spec.train.seed);
  if (!o.quiet) std::cerr << model.summary();
  EpochProgress progress(spec.train.epochs, o.quiet);
  worker::RunResult r = worker::train_run(spec, data, &progress, &model);

  std::filesystem::path out(o.out_dir);
  std::filesystem::create_directories(out);
  nlohmann::json result = worker::result_json(spec, r, data);
  write_file(
      out / (spec.name + ".safetensors"),
      nn::to_safetensors(model.saved_tensors(), {{"name", spec.name},
                                                 {"seed", std::to_string(spec.train.seed)},
                                                 {"build_id", result["provenance"]["build_id"]},
                                                 {"spec", spec.source}}));
  write_file(out / (spec.name + ".metrics.json"), result.dump(2) + "\n");

  const std::optional<double> val = r.curve.empty() ? std::nullopt : r.curve.back().val_acc;
  if (val)
    std::printf("validation accuracy: %.4f\n", *val);
  else
    std::printf("validation accuracy: none (data.validation is 0)\n");
  if (data.test.size())
    std::printf("test accuracy: %.4f\n", r.test_acc);
  else
    std::printf("test accuracy: none (no test split)\n");
  if (!o.quiet)
    std::cerr << "wrote " << (out / (spec.name + ".safetensors")).string() << " and "
              << (out / (spec.name + ".metrics.json")).string() << "\n";
  return 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* c =
      app.add_subcommand("train", "Train one model from a spec file and report test accuracy");
  c->add_option("spec", o->spec_path, "Run spec (YAML): model, data, training; see docs/spec.md")
      ->required();
  c->add_option("--out", o->out_dir, "Directory for <name>.safetensors and <name>.metrics.json")
      ->capture_default_str();
  c->add_option(
      "--data", o->data_dir,
      "Data set directory (default: $DNNLAB_DATA_DIR/<name> or /usr/share/datasets/<name>)");
  auto override_flag = [&](const char* flag, const char* field, const std::string& help) {
    c->add_option_function<std::string>(
        flag,
        [o, flag, field](const std::string& v) {
          o->overrides.push_back({field, v, flag});
        },
        help);
  };
  override_flag("--epochs", "train.epochs", "Override train.epochs");
  override_flag("--seed", "train.seed", "Override train.seed (0 to 2^64-1)");
  override_flag("--batch-size", "train.batch_size", "Override train.batch_size");
  override_flag("--lr", "train.optimizer.lr",
                "Override the optimizer's learning rate (train.optimizer.lr)");
  override_flag("--limit-train", "data.limit_train",
                "Use only this many training samples (data.limit_train; 0: all)");
  c->add_option("--kernels", o->kernels, "Kernel target: auto, avx512, avx2, scalar")
      ->capture_default_str();
  c->add_option("--threads", o->threads,
                "Threads per batch for the conv kernels (results are identical for any count)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  c->add_flag("-q,--quiet", o->quiet, "Print only the final accuracies");
  return [o] { return run_train(*o); };
}

}  // namespace dnnlab::cli
