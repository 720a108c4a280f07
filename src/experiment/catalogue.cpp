// The catalogue of experiments and the data cache (catalogue.hpp).
#include "experiment/catalogue.hpp"

#include <chrono>
#include <stdexcept>

#include "experiment/training_run.hpp"
#include "sweep/sampler.hpp"

namespace dnnlab::experiment {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ExperimentEntry& Catalogue::get(std::int64_t id) {
  auto it = entries_.find(id);
  if (it != entries_.end()) return it->second;
  auto e = store_.experiment(id);
  if (!e) throw std::invalid_argument("experiment " + std::to_string(id) + " does not exist");
  ExperimentEntry entry;
  entry.id = id;
  entry.spec_hash = e->spec_hash;
  entry.sweep = std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(e->spec_text, e->spec_path));
  entry.scheduler = std::make_unique<SchedulerFeed>(*entry.sweep, id);
  return entries_.emplace(id, std::move(entry)).first->second;
}

nn::RunSpec Catalogue::run_spec(const store::TrialRecord& t) {
  return get(t.experiment_id)
      .sweep->materialize({t.index, nlohmann::json::parse(t.config_json), t.seed});
}

const std::optional<nn::DataSpec>& Catalogue::first_data(std::int64_t id) {
  ExperimentEntry& e = get(id);
  if (!e.data) {
    store::TrialQuery first;
    first.limit = 1;
    first.sort_by = "index";
    auto ts = store_.trials(id, first);
    if (!ts.empty()) e.data = run_spec(ts[0]).data;
  }
  return e.data;
}

const std::vector<std::int64_t>& Catalogue::running(double max_age) {
  const double now = now_seconds();
  if (listed_at_ < 0 || now - listed_at_ > max_age) {
    running_.clear();
    for (const auto& e : store_.experiments())
      if (e.status == store::ExperimentStatus::running) running_.push_back(e.id);
    listed_at_ = now;
  }
  return running_;
}

const LoadedData* DataCache::find(const nn::DataSpec& spec) const {
  auto it = sets_.find(spec.key());
  return it == sets_.end() ? nullptr : &it->second;
}

const LoadedData& DataCache::get(const nn::DataSpec& spec) {
  if (const LoadedData* d = find(spec)) return *d;
  if (sets_.size() >= capacity_) sets_.clear();
  LoadedData d{data::load(load_options(spec, dir_)), {}};
  d.provenance = provenance(d.data);
  return sets_.emplace(spec.key(), std::move(d)).first->second;
}

}  // namespace dnnlab::experiment
