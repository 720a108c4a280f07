// Sweep files: one run-spec template with ${param} placeholders, a search
// space over those parameters, and an early-stopping rule. The format, with a
// full example, is in docs/sweep.md.
//
//   sweep::SweepSpec sweep = sweep::load_sweep("examples/depth-sweep.yaml");
//   auto sampler = sweep::make_sampler(sweep.search);            // sampler.hpp
//   auto scheduler = sweep::make_scheduler(sweep);               // scheduler.hpp
//   while (auto trial = sampler->next()) {
//     nn::RunSpec run = sweep.materialize(*trial);  // name "<sweep>-<index>", seed derived
//     ...  // train, calling scheduler->on_epoch(trial->index, epoch, metric) each epoch
//     sampler->observe(trial->index, final_metric);
//   }
//
// Everything that can be checked before a trial runs is checked by
// parse_sweep: unknown keys, bad ranges, unknown method/scheduler/metric/mode,
// placeholders without a parameter, parameters never used, and templates that
// give an invalid run (impossible shapes, say) for some parameter values —
// the template is parsed with every choice (extremes of ranges) of the
// parameters used in its model section. Each problem is a dnnlab::SpecError
// with the sweep file's line:column and a dotted field path
// (`search.parameters.lr.loguniform`, `template.model.layers[0].dense`).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/errors.hpp"
#include "nn/memory.hpp"
#include "nn/spec.hpp"

namespace dnnlab::sweep {

struct TrialConfig;  // sampler.hpp
class RunTemplate;   // run_template.hpp

enum class ParamKind { kChoice, kInt, kUniform, kLogUniform };

// One dimension of the search space.
struct ParamSpec {
  std::string name;
  ParamKind kind = ParamKind::kChoice;
  std::vector<nlohmann::json> choices;  // kChoice: scalars (number, string, bool)
  int64_t int_low = 0, int_high = 0;    // kInt: inclusive bounds
  int64_t step = 0;                     // kInt: 0 = not given (any integer; not griddable)
  double low = 0, high = 0;             // kUniform/kLogUniform: [low, high); kInt: as doubles
  SpecLocation where;                   // the parameter's key in the sweep file
  bool in_model = false;                // some placeholder for it is inside template.model

  // Choice lists and int ranges with a step can be enumerated.
  bool griddable() const {
    return kind == ParamKind::kChoice || (kind == ParamKind::kInt && step > 0);
  }
  // The grid points, in file order (choices) or ascending (int range).
  std::vector<nlohmann::json> grid_values() const;
  // The values the template is checked with before anything runs: every
  // choice; a range's two ends (an int range's last reachable point).
  std::vector<nlohmann::json> check_values() const;
};

struct SearchSpec {
  std::string method = "grid";        // grid | random | tpe
  int64_t budget = 0;                 // max trials; 0 = all grid points (random/tpe need one)
  uint64_t seed = 1;                  // base seed of samplers and trial seeds
  int64_t max_concurrent = 0;         // 0 = one per worker
  std::string metric = "val_acc";     // val_acc | val_loss | train_loss | train_acc
  std::string mode = "max";           // max | min; default: min for *_loss, max otherwise
  int64_t n_startup = 10;             // tpe: random trials before the model is used
  int64_t n_ei_candidates = 24;       // tpe: candidates drawn from l(x) per parameter
  int64_t keep_weights = 10;          // finished trials whose weights are kept (best by metric)
  std::vector<ParamSpec> parameters;  // in file order
  SpecLocation where;

  bool maximize() const { return mode == "max"; }
  const ParamSpec* find(const std::string& name) const;
};

struct SchedulerSpec {
  std::string type = "fifo";     // fifo | asha | median
  int64_t min_epochs = 1;        // asha: the first rung
  int64_t reduction_factor = 3;  // asha: eta
  int64_t grace_epochs = 1;      // median: no stopping before this epoch
  SpecLocation where;
};

class SweepSpec {
 public:
  std::string name;  // default: the file's stem
  std::string file;
  SearchSpec search;
  SchedulerSpec scheduler;
  // The most epochs any checked trial trains (train.epochs may be a parameter);
  // ASHA's last rung lies below it.
  int64_t max_epochs = 0;
  std::string source;  // the sweep file's text, for provenance

  // The run for one trial: the template with the trial's values substituted
  // and parsed by the run-spec parser, train.seed = trial.seed, name
  // "<sweep>-<index>". Errors are SpecErrors located in the sweep file, their
  // message naming the parameter values. Thread-safe (const, no shared state).
  nn::RunSpec materialize(const TrialConfig& trial) const;
  // Same, from bare values (no name or seed change): used by the checks.
  nn::RunSpec instantiate(const nlohmann::json& params) const;

  const RunTemplate& run_template() const { return *template_; }

 private:
  friend SweepSpec parse_sweep(const std::string& text, const std::string& file);
  std::shared_ptr<const RunTemplate> template_;
};

// Parses and checks a sweep file's text; `file` names it in errors.
SweepSpec parse_sweep(const std::string& text, const std::string& file);
// Reads and parses a sweep file; a missing file is a SpecError naming it.
SweepSpec load_sweep(const std::string& path);

// The trial of a sweep that needs the most memory to train, among every
// combination of the parameters' check values (each choice, each range's
// ends; when there are too many, the ends one parameter at a time): what
// `dnnlab run` compares with --max-memory before it starts any worker.
struct LargestTrial {
  nn::MemoryEstimate memory;
  nlohmann::json params;  // its parameter values
  int64_t batch_size = 0;
};
LargestTrial largest_trial(const SweepSpec& sweep);

// "depth=4, activation=relu": parameter values as the error messages show them.
std::string describe_params(const nlohmann::json& params);

}  // namespace dnnlab::sweep
