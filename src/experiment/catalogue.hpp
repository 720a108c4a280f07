// The catalogue: what a process knows of each experiment, built once per
// experiment from the store and shared by everything in that thread that
// works on its trials (the lease service, the verifier's re-runs, `rerun`):
// the parsed sweep, its scheduler feed and the data set its first trial
// trains on. And the data sets themselves, loaded once per data key.
//
//   experiment::Catalogue cat(store);
//   experiment::ExperimentEntry& e = cat.get(trial.experiment_id);  // parsed once
//   nn::RunSpec run = cat.run_spec(trial);                           // the trial's spec
//   experiment::DataCache data(data_dir);
//   const experiment::LoadedData& d = data.get(run.data);           // loaded once
//
// Not thread-safe: one per thread (each thread has its own store connection).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "experiment/scheduler_feed.hpp"
#include "nn/spec.hpp"
#include "store/result_store.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::experiment {

// What the catalogue keeps of one experiment.
struct ExperimentEntry {
  std::int64_t id = 0;
  std::string spec_hash;
  std::unique_ptr<sweep::SweepSpec> sweep;
  std::unique_ptr<SchedulerFeed> scheduler;
  // The data its lowest-index trial trains on (nearly always every
  // trial's), once first_data() asked: what a gateway prepares a shard of.
  std::optional<nn::DataSpec> data;
};

class Catalogue {
 public:
  explicit Catalogue(store::ResultStore& store) : store_(store) {}

  // The experiment's entry, read and parsed the first time it is asked
  // for. Throws std::invalid_argument when the experiment does not exist
  // (deleted), SpecError when its stored sweep no longer parses.
  ExperimentEntry& get(std::int64_t experiment_id);
  // A trial's run spec: the sweep's template with the trial's values.
  nn::RunSpec run_spec(const store::TrialRecord& trial);
  // The data the experiment's first trial trains on (nullopt: no trial yet).
  const std::optional<nn::DataSpec>& first_data(std::int64_t experiment_id);
  // Running experiments' ids, read from the store at most every `max_age` seconds.
  const std::vector<std::int64_t>& running(double max_age = 1.0);
  // The next running() reads the store.
  void relist() { listed_at_ = -1; }
  void forget(std::int64_t experiment_id) { entries_.erase(experiment_id); }

  store::ResultStore& store() { return store_; }

 private:
  store::ResultStore& store_;
  std::map<std::int64_t, ExperimentEntry> entries_;
  std::vector<std::int64_t> running_;
  double listed_at_ = -1;
};

// A loaded data set and the provenance trials trained on it record.
struct LoadedData {
  data::Dataset data;
  nlohmann::json provenance;
};

// Data sets by DataSpec::key(), at most `capacity` at once (a worker rarely needs
// more than one; a full cache is emptied before the next load).
class DataCache {
 public:
  explicit DataCache(std::string data_dir, std::size_t capacity = 2)
      : dir_(std::move(data_dir)), capacity_(capacity) {}
  // Loads it the first time (throws data errors); the reference stays valid
  // until the next get() of a data set not cached.
  const LoadedData& get(const nn::DataSpec& spec);
  // Only when cached already (no load).
  const LoadedData* find(const nn::DataSpec& spec) const;

 private:
  std::string dir_;
  std::size_t capacity_;
  std::map<std::string, LoadedData> sets_;
};

}  // namespace dnnlab::experiment
