// Grid and random samplers, trial seeds, and what all samplers share (see sampler.hpp).
#include "sweep/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dnnlab::sweep {
namespace {

// Trial i's random stream; the tag keeps it apart from other uses of the seed.
constexpr uint64_t kDrawTag = 0x5357454550ull;  // "SWEEP"
constexpr int kMaxRedraws = 1000;

}  // namespace

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t trial_seed(uint64_t base_seed, const nlohmann::json& params) {
  // nlohmann::json objects keep sorted keys and print floats in their
  // shortest round-trip form: dump() is canonical.
  return nn::derive_seed(base_seed, fnv1a64(params.dump()));
}

Sampler::Sampler(const SearchSpec& search) : search_(search) {}

TrialConfig Sampler::issue(nlohmann::json params) {
  TrialConfig t;
  t.index = next_index_++;
  t.seed = trial_seed(search_.seed, params);
  seen_.insert(params.dump());
  t.params = std::move(params);
  return t;
}

void Sampler::resume(const TrialConfig& issued) {
  seen_.insert(issued.params.dump());
  next_index_ = std::max(next_index_, issued.index + 1);
}

uint64_t Sampler::space_size() const {
  uint64_t n = 1;
  for (const ParamSpec& p : search_.parameters) {
    uint64_t k = 0;
    if (p.kind == ParamKind::kChoice) k = p.choices.size();
    if (p.kind == ParamKind::kInt)
      k = static_cast<uint64_t>((p.int_high - p.int_low) / std::max<int64_t>(p.step, 1)) + 1;
    if (k == 0) return 0;
    if (n > (uint64_t{1} << 62) / k) return 0;  // too many to matter
    n *= k;
  }
  return n;
}

int64_t Sampler::planned() const {
  const uint64_t size = space_size();
  if (search_.budget == 0) return static_cast<int64_t>(size);
  if (size == 0) return search_.budget;
  return static_cast<int64_t>(std::min<uint64_t>(size, static_cast<uint64_t>(search_.budget)));
}

static double uniform01(nn::Rng& rng) {
  return static_cast<double>(rng.next_u64() >> 11) * 0x1.0p-53;
}

nlohmann::json Sampler::draw_prior(nn::Rng& rng) const {
  nlohmann::json out = nlohmann::json::object();
  for (const ParamSpec& p : search_.parameters) {
    switch (p.kind) {
      case ParamKind::kChoice:
        out[p.name] = p.choices[rng.below(p.choices.size())];
        break;
      case ParamKind::kInt: {
        int64_t s = std::max<int64_t>(p.step, 1);
        uint64_t points = static_cast<uint64_t>((p.int_high - p.int_low) / s) + 1;
        out[p.name] = p.int_low + static_cast<int64_t>(rng.below(points)) * s;
        break;
      }
      case ParamKind::kUniform:
        out[p.name] = p.low + uniform01(rng) * (p.high - p.low);
        break;
      case ParamKind::kLogUniform: {
        double lo = std::log(p.low), hi = std::log(p.high);
        out[p.name] = std::min(std::exp(lo + uniform01(rng) * (hi - lo)), p.high);
        break;
      }
    }
  }
  return out;
}

GridSampler::GridSampler(const SearchSpec& search) : Sampler(search) {
  for (const ParamSpec& p : search_.parameters) {
    if (!p.griddable())
      throw SpecError(p.where, "search.parameters." + p.name,
                      "grid search enumerates choice lists and int ranges with a step; '" + p.name +
                          "' is neither");
    values_.push_back(p.grid_values());
    size_ = values_.back().empty() ? 0 : size_ * values_.back().size();
  }
}

std::optional<TrialConfig> GridSampler::next() {
  if (!budget_left() || static_cast<uint64_t>(next_index_) >= size_) return std::nullopt;
  // Mixed-radix digits of the index, the last parameter varying fastest.
  uint64_t rest = static_cast<uint64_t>(next_index_);
  nlohmann::json params = nlohmann::json::object();
  for (size_t i = values_.size(); i-- > 0;) {
    const auto& v = values_[i];
    params[search_.parameters[i].name] = v[rest % v.size()];
    rest /= v.size();
  }
  return issue(std::move(params));
}

std::optional<TrialConfig> RandomSampler::next() {
  if (!budget_left()) return std::nullopt;
  const uint64_t size = space_size();
  if (size != 0 && static_cast<uint64_t>(next_index_) >= size) return std::nullopt;
  nn::Rng rng(nn::derive_seed(search_.seed ^ kDrawTag, static_cast<uint64_t>(next_index_)));
  nlohmann::json params = draw_prior(rng);
  // Small discrete spaces: draw again rather than repeat a trial.
  for (int i = 0; i < kMaxRedraws && seen(params); ++i) params = draw_prior(rng);
  return issue(std::move(params));
}

std::unique_ptr<Sampler> make_sampler(const SearchSpec& search) {
  if (search.method == "grid") return std::make_unique<GridSampler>(search);
  if (search.method == "random") return std::make_unique<RandomSampler>(search);
  if (search.method == "tpe") return std::make_unique<TpeSampler>(search);
  throw std::invalid_argument("unknown search method '" + search.method + "'");
}

}  // namespace dnnlab::sweep
