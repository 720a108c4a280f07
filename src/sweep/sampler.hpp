// Samplers choose the trials of a sweep: which parameter values, in which
// order. One interface, three strategies:
//
//   GridSampler    the cartesian product of the parameters' values, in file
//                  order with the last parameter varying fastest (like
//                  itertools.product), capped by the budget;
//   RandomSampler  independent draws, seeded: trial i's values depend only
//                  on (seed, i);
//   TpeSampler     a tree-structured Parzen estimator (Bergstra et al. 2011,
//                  as Optuna's default sampler): random for the first
//                  n_startup trials, then per parameter the candidate with the
//                  best l(x)/g(x) ratio among n_ei_candidates drawn from l.
//
//   auto sampler = make_sampler(sweep.search);
//   while (auto t = sampler->next()) { run(*t); sampler->observe(t->index, metric); }
//
// Everything is deterministic: the same seed and the same observations (in
// the same order) give the same trials on every platform. After a
// coordinator restart, build a new sampler and call resume() with each stored
// trial in index order and observe() with each stored result; next() then
// continues where the old one stopped.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "nn/rng.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::sweep {

struct TrialConfig {
  int64_t index = 0;      // 0, 1, 2, ... in the order the sampler issued them
  nlohmann::json params;  // object: parameter name -> value (sorted keys)
  uint64_t seed = 0;      // trial_seed(search.seed, params)
};

// 64-bit FNV-1a: a hash that is the same on every platform (std::hash is not).
uint64_t fnv1a64(std::string_view bytes);
// A trial's training seed: derived from the sweep's base seed and the
// canonical JSON of its values, so the same values train the same way in any
// sweep with the same seed, and different values get different seeds.
uint64_t trial_seed(uint64_t base_seed, const nlohmann::json& params);

class Sampler {
 public:
  explicit Sampler(const SearchSpec& search);
  virtual ~Sampler() = default;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // The next trial, or nullopt when the budget or the space is used up.
  virtual std::optional<TrialConfig> next() = 0;
  // A trial's final metric, or its last metric when it was stopped early.
  // Values are in the metric's own units; search.mode says which way is better.
  virtual void observe(int64_t index, double value) {}
  // Restart: a trial issued by an earlier sampler with the same spec. Call in
  // index order before next().
  virtual void resume(const TrialConfig& issued);

  int64_t issued() const { return next_index_; }
  // Trials next() issues in all: the budget, capped by the number of
  // distinct points when every parameter is discrete (a grid without a
  // budget: all its points). What a progress line may promise.
  int64_t planned() const;
  const SearchSpec& search() const { return search_; }

 protected:
  // A TrialConfig for `params` at the next index, counted as issued.
  TrialConfig issue(nlohmann::json params);
  bool budget_left() const { return search_.budget == 0 || next_index_ < search_.budget; }
  bool seen(const nlohmann::json& params) const { return seen_.count(params.dump()) > 0; }
  // Number of distinct points when every parameter is discrete; 0 otherwise.
  uint64_t space_size() const;
  // One independent draw of every parameter from its prior (choices and int
  // points uniformly, uniform and loguniform ranges on their scale).
  nlohmann::json draw_prior(nn::Rng& rng) const;

  SearchSpec search_;
  int64_t next_index_ = 0;

 private:
  std::set<std::string> seen_;
};

class GridSampler : public Sampler {
 public:
  // SpecError (naming the parameter) if some parameter is not griddable.
  explicit GridSampler(const SearchSpec& search);
  std::optional<TrialConfig> next() override;
  uint64_t size() const { return size_; }  // all grid points, before the budget

 private:
  std::vector<std::vector<nlohmann::json>> values_;
  uint64_t size_ = 1;
};

class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(const SearchSpec& search) : Sampler(search) {}
  std::optional<TrialConfig> next() override;
};

class TpeSampler : public Sampler {
 public:
  explicit TpeSampler(const SearchSpec& search) : Sampler(search) {}
  std::optional<TrialConfig> next() override;
  void observe(int64_t index, double value) override;
  void resume(const TrialConfig& issued) override;

 private:
  struct Observed {
    int64_t index;
    double loss;  // lower is better (the value, negated for mode max)
  };
  nlohmann::json suggest(nn::Rng& rng) const;
  std::vector<nlohmann::json> params_;  // by index, issued so far
  std::vector<Observed> observed_;
};

// The sampler the spec's search.method names.
std::unique_ptr<Sampler> make_sampler(const SearchSpec& search);

}  // namespace dnnlab::sweep
