// `dnnlab train SPEC`: train one model, print validation and test accuracy,
// write weights (.safetensors) and a metrics JSON. With --distributed, the
// hybrid trainer (src/hybrid) trains it: `features` on N native clients,
// `classifier` here; the same outputs.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/hybrid_train.hpp"
#include "cli/progress.hpp"
#include "data/dataset.hpp"
#include "experiment/training_run.hpp"
#include "hybrid/server.hpp"
#include "nn/kernels.hpp"
#include "nn/memory.hpp"
#include "nn/model.hpp"
#include "nn/safetensors.hpp"
#include "spec/run_spec.hpp"
#include "tls/tls.hpp"
#include "worker/thread_pool.hpp"

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
  bool dry_run = false;
  std::string max_memory;  // "": the machine's memory
  bool distributed = false;
  DistributedFlags hybrid;  // --clients, --staleness, --wire, --listen, --client-wait, --tls-*
};

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

std::string kernel_list() {
  std::string s = "auto";
  for (std::string_view k : nn::kernel_targets()) s += ", " + std::string(k);
  return s;
}

// Everything train writes, checked before the first step: a run that cannot
// keep its results should not spend an hour training first.
struct Outputs {
  std::filesystem::path weights, metrics;
};

Outputs plan_outputs(const std::string& out_dir, const std::string& name, bool dry_run) {
  const std::filesystem::path out(out_dir);
  Outputs files{output_file(out, name, ".safetensors", "the run's name"),
                output_file(out, name, ".metrics.json", "the run's name")};
  for (const auto& p : {files.weights, files.metrics})
    if (std::filesystem::is_directory(p))
      throw UsageError("--out: " + p.string() + " is a directory; the run writes a file there");
  std::error_code ec;
  if (dry_run) {  // writes nothing: the directory, or where it would be made, must be writable
    std::filesystem::path at = std::filesystem::absolute(out, ec);
    while (!std::filesystem::exists(at, ec) && at.has_parent_path() && at != at.parent_path())
      at = at.parent_path();
    if (!std::filesystem::is_directory(at, ec) || access(at.c_str(), W_OK) != 0)
      throw UsageError("--out: cannot create or write " + out.string());
    return files;
  }
  std::filesystem::create_directories(out, ec);
  if (ec || !std::filesystem::is_directory(out))
    throw UsageError("--out: cannot create the directory " + out.string() +
                     (ec ? ": " + ec.message() : ""));
  const std::filesystem::path probe = out / (".dnnlab-write-test-" + std::to_string(getpid()));
  if (!std::ofstream(probe)) throw UsageError("--out: cannot write in " + out.string());
  std::filesystem::remove(probe, ec);
  return files;
}

int run_train(const TrainOptions& o) {
  if (!nn::select_kernels(o.kernels))
    throw UsageError("--kernels: '" + o.kernels +
                     "' is not a kernel target of this build on this CPU; "
                     "available: " +
                     kernel_list());
  // Before the data: a bad certificate or key stops the run naming the file.
  DistributedFlags hybrid = o.hybrid;
  if (!hybrid.tls_cert.empty()) hybrid.tls = tls::server_context(hybrid.tls_cert, hybrid.tls_key);
  nn::RunSpec spec = spec::load_run_spec(o.spec_path, o.overrides);
  // The same bits on any thread count: the kernels split work by shape only.
  if (o.distributed && o.hybrid.listen.empty() && o.threads != 1)
    throw UsageError(
        "--threads: with --distributed each in-process client runs its kernels on one thread; "
        "leave --threads at 1");
  if (o.hybrid.feedback != "off" && o.hybrid.wire != "int8")
    throw UsageError("--error-feedback " + o.hybrid.feedback +
                     ": error feedback carries int8's quantisation error; add --wire int8");
  worker::ParallelScope threads(o.threads);
  // What is trained, overrides included: `dnnlab train` on this text repeats the run.
  spec.source = spec::to_yaml(spec);
  const Outputs files = plan_outputs(o.out_dir, spec.name, o.dry_run);

  // The model against the data's real shape (from its header) and its memory
  // against the limit, before the data is read.
  const data::LoadOptions load_options = experiment::load_options(spec.data, o.data_dir);
  const data::SampleShape shape = data::sample_shape(load_options);
  const nn::Shape input = nn::model_input(spec.model, shape.sample);
  nn::Model::validate(spec.model, input, shape.num_classes);
  if (o.distributed) hybrid::check_hybrid_spec(spec.model);
  const nn::MemoryEstimate memory = nn::Model::estimate_memory(spec.model, input, spec.train);
  const int64_t limit = max_memory_bytes(o.max_memory, 1);
  const std::string limit_text =
      nn::format_bytes(limit) +
      (o.max_memory.empty() ? " (this machine's memory)" : " (--max-memory)");
  if (o.dry_run) {
    std::printf("%s: input %s, %s\n", spec.name.c_str(), input.str().c_str(),
                spec.data.dataset.c_str());
    std::printf("memory estimate: %s\n", memory.describe(spec.train.batch_size).c_str());
    std::printf("memory limit: %s\n", limit_text.c_str());
    std::printf("would write %s and %s\n", files.weights.string().c_str(),
                files.metrics.string().c_str());
  }
  if (memory.total() > limit)
    throw UsageError("the model needs an estimated " + nn::format_bytes(memory.total()) + " (" +
                     memory.describe(spec.train.batch_size) + "), more than the limit of " +
                     limit_text +
                     "; lower train.batch_size or the layer sizes, or raise --max-memory");
  if (o.dry_run) return 0;
  if (!hybrid.ticket_log.empty())
    hybrid.tickets = std::make_shared<TicketLogFile>(hybrid.ticket_log);

  if (!o.quiet) std::cerr << "loading " << spec.data.dataset << " ...\n";
  data::Dataset data = data::load(load_options);
  if (!o.quiet)
    std::cerr << spec.name << ": " << data.train.size() << " train / " << data.val.size()
              << " val / " << data.test.size() << " test samples from " << data.dir << ", kernels "
              << nn::kernels().name << ", seed " << spec.train.seed << "\n";

  nn::Model model = nn::Model::build(spec.model, nn::model_input(spec.model, data.sample_shape),
                                     data.num_classes, spec.train.seed);
  if (!o.quiet) std::cerr << model.summary();
  EpochProgress progress(spec.train.epochs, o.quiet);
  nlohmann::json distributed;
  experiment::RunResult r =
      o.distributed ? distributed_run(hybrid, spec, data, &progress, &model, &distributed)
                    : experiment::train_run(spec, data, &progress, &model);

  nlohmann::json result = experiment::result_json(spec, r, data);
  if (o.distributed) result["distributed"] = distributed;
  write_file(files.weights, nn::to_safetensors(model.saved_tensors(),
                                               {{"name", spec.name},
                                                {"seed", std::to_string(spec.train.seed)},
                                                {"build_id", result["provenance"]["build_id"]},
                                                {"spec", spec.source}}));
  write_file(files.metrics, result.dump(2) + "\n");

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
    std::cerr << "wrote " << files.weights.string() << " and " << files.metrics.string() << "\n";
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
  c->add_option("--kernels", o->kernels,
                "Kernel target: " + kernel_list() + " (this build, this CPU)")
      ->capture_default_str();
  c->add_option("--max-memory", o->max_memory,
                "Refuse a model whose estimated training memory (weights, gradients, optimizer "
                "state, activations) is above this, e.g. 4G (default: this machine's memory)")
      ->check(memory_size());
  c->add_flag("--dry-run", o->dry_run,
              "Check the spec against the data's shape, print the memory estimate and the "
              "output files, and stop before loading the data");
  c->add_option("--threads", o->threads,
                "Threads per batch for the conv kernels (results are identical for any count)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  CLI::Option* distributed = c->add_flag(
      "--distributed", o->distributed,
      "Hybrid training: model.parts `features` on --clients native clients (threads of this "
      "process, or processes that join with --listen), `classifier` here; see "
      "docs/distributed.md");
  c->add_option("--clients", o->hybrid.clients,
                "Clients for --distributed (with --listen: how many to wait for)")
      ->check(CLI::Range(1, hybrid::kMaxClients))
      ->needs(distributed)
      ->capture_default_str();
  c->add_option("--staleness", o->hybrid.staleness,
                "With --distributed: apply a features gradient up to this many versions old "
                "(0: synchronous)")
      ->check(CLI::Range(0, hybrid::kMaxStaleness))
      ->needs(distributed)
      ->capture_default_str();
  c->add_option("--wire", o->hybrid.wire,
                "With --distributed: how activations and their gradients travel: fp32, fp16 "
                "(half the bytes) or int8 (a quarter: 8 bits a value and a float32 scale per "
                "128); weights and weight gradients stay fp32")
      ->check(CLI::IsMember({"fp32", "fp16", "int8"}))
      ->needs(distributed)
      ->capture_default_str();
  c->add_option("--error-feedback", o->hybrid.feedback,
                "With --wire int8: carry each sender's quantisation error into its next "
                "message: off, grads (the server's activation gradients, per client), acts "
                "(each client's activations) or both; docs/distributed.md \"Bytes\"")
      ->check(CLI::IsMember({"off", "grads", "acts", "both"}))
      ->needs(distributed)
      ->capture_default_str();
  CLI::Option* listen =
      c->add_option("--listen", o->hybrid.listen,
                    "With --distributed: serve the hybrid protocol on HOST:PORT (e.g. "
                    "127.0.0.1:8470; port 0: any) for clients in other processes "
                    "(see `dnnlab join`); prints the URL and the join token")
          ->needs(distributed);
  CLI::Option* cert =
      c->add_option("--tls-cert", o->hybrid.tls_cert,
                    "With --listen: PEM certificate chain; the port then speaks only TLS (wss:// "
                    "to join, https:// for the join and run pages; TLS 1.2+). Needs --tls-key; "
                    "see docs/distributed.md \"Over TLS\"")
          ->needs(listen);
  CLI::Option* key =
      c->add_option("--tls-key", o->hybrid.tls_key,
                    "With --listen: PEM private key of --tls-cert (mode 0600 or stricter)")
          ->needs(listen);
  cert->needs(key);
  key->needs(cert);
  c->add_option("--client-wait", o->hybrid.client_wait_s,
                "With --listen: seconds to wait for --clients clients to join")
      ->check(CLI::Range(1, 86400))
      ->needs(listen)
      ->capture_default_str();
  c->add_option("--ticket-log", o->hybrid.ticket_log,
                "With --distributed: write each gradient ticket's end to FILE as a JSON line "
                "(client, batch, version, times, applied / dropped / reissued / late and why), "
                "flushed after every round; docs/distributed.md \"A ticket's life\"")
      ->needs(distributed);
  c->add_flag("-q,--quiet", o->quiet, "Print only the final accuracies");
  return [o] {
    o->hybrid.quiet = o->quiet;
    return run_train(*o);
  };
}

}  // namespace dnnlab::cli
