// Kept weights from the command line: `dnnlab export EXP --weights` writes
// every kept file as DIR/<trial id>.safetensors, each checked against the
// sha256 taken when it was stored and parsed as safetensors first; `dnnlab
// pin TRIAL` (and --unpin) keeps a trial's weights whatever its rank.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/sweep_cmds.hpp"
#include "nn/errors.hpp"
#include "nn/safetensors.hpp"
#include "store/sha256.hpp"

namespace dnnlab::cli {

int64_t export_weights(store::ResultStore& store, int64_t experiment, const std::string& out_dir) {
  std::filesystem::create_directories(out_dir);
  int64_t written = 0;
  std::vector<std::string> problems;
  for (const store::WeightsRecord& listed : store.weights_of(experiment)) {
    const std::string id = std::to_string(listed.trial_id);
    const std::optional<store::WeightsRecord> w = store.weights(listed.trial_id);
    if (!w) {  // dropped by the retention rule since it was listed
      std::cerr << "trial " << id << ": its weights were dropped meanwhile (not kept any more)\n";
      continue;
    }
    const std::string sha = store::sha256_hex(w->bytes);
    if (sha != w->sha256 || static_cast<int64_t>(w->bytes.size()) != w->size) {
      problems.push_back("trial " + id + ": the stored weights are corrupt (" +
                         std::to_string(w->bytes.size()) + " bytes with sha256 " + sha +
                         ", stored " + std::to_string(w->size) + " bytes with sha256 " + w->sha256 +
                         ")");
      continue;
    }
    try {
      nn::read_safetensors(w->bytes, "trial " + id + "'s weights");
    } catch (const std::exception& e) {
      problems.push_back(std::string("trial ") + id + ": not a safetensors file: " + e.what());
      continue;
    }
    const std::filesystem::path path = std::filesystem::path(out_dir) / (id + ".safetensors");
    std::ofstream f(path, std::ios::binary);
    f.write(w->bytes.data(), static_cast<std::streamsize>(w->bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + path.string());
    ++written;
  }
  std::cerr << "wrote " << written << " weights files (<trial id>.safetensors) to " << out_dir
            << "\n";
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += "\n  " + p;
    throw std::runtime_error(std::to_string(problems.size()) +
                             " kept weights files were not written:" + all);
  }
  return written;
}

namespace {

struct PinOptions {
  std::string store_url = kDefaultDb;
  int64_t trial = 0;
  bool unpin = false;
};

}  // namespace

Command add_pin(CLI::App& app) {
  auto o = std::make_shared<PinOptions>();
  CLI::App* c = app.add_subcommand(
      "pin", "Keep a trial's weights whatever its rank (--unpin: leave it to the rule)");
  c->add_option("trial", o->trial, "Trial id (the `trial` column of `dnnlab results`)")
      ->required()
      ->check(whole_number(1));
  c->add_option("--store", o->store_url, "Result store URL")->capture_default_str();
  c->add_flag("--unpin", o->unpin, "Unpin: its weights follow the retention rule again");
  return [o] {
    auto s = store::open_result_store(o->store_url);
    try {
      s->set_pinned(o->trial, !o->unpin);
    } catch (const std::invalid_argument&) {
      throw UsageError("no trial with id " + std::to_string(o->trial) +
                       " (`dnnlab results EXPERIMENT` lists them)");
    }
    std::cerr << "trial " << o->trial << (o->unpin ? " unpinned" : " pinned") << "\n";
    return 0;
  };
}

}  // namespace dnnlab::cli
