// The tree-structured Parzen estimator (Bergstra et al. 2011), independent per
// parameter as in Optuna's default TpeSampler: observed trials are split into
// the best n_below ("good", density l) and the rest ("bad", density g); each
// parameter takes, among n_ei_candidates draws from l, the one maximizing
// l(x)/g(x). Numeric parameters use truncated Gaussian kernels (in log space
// for loguniform) with a prior kernel over the whole range and bandwidths from
// the distances to the neighbouring points; choices use smoothed counts.
#include <algorithm>
#include <cmath>
#include <limits>

#include "sweep/sampler.hpp"

namespace dnnlab::sweep {
namespace {

constexpr uint64_t kTpeTag = 0x545045ull;  // "TPE"
constexpr double kPriorWeight = 1.0;

double uniform01(nn::Rng& rng) {
  return static_cast<double>(rng.next_u64() >> 11) * 0x1.0p-53;
}

// Optuna's default gamma: the best 10%, at most 25 trials, at least one.
size_t n_below(size_t n) {
  return std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::ceil(0.1 * n)), 25));
}

double log_sum_exp(const std::vector<double>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : v) m = std::max(m, x);
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

double normal_cdf(double z) {
  return 0.5 * std::erfc(-z / std::sqrt(2.0));
}

// A mixture of Gaussians truncated to [lo, hi], one per observation plus the prior.
struct Parzen {
  std::vector<double> mu, sigma, weight;
  double lo, hi;

  Parzen(std::vector<double> points, double lo_, double hi_) : lo(lo_), hi(hi_) {
    const double range = hi - lo;
    points.push_back(0.5 * (lo + hi));  // the prior's centre
    const size_t prior = points.size() - 1;
    std::vector<size_t> order(points.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return points[a] < points[b]; });
    mu.resize(points.size());
    sigma.resize(points.size());
    weight.assign(points.size(), 1.0);
    // Bandwidth: the larger gap to a neighbour (the range's ends count as
    // neighbours), clipped to [range / min(100, n + 1), range].
    const double min_sigma = range / std::min(100.0, 1.0 + static_cast<double>(points.size()));
    for (size_t k = 0; k < order.size(); ++k) {
      size_t i = order[k];
      double left = points[i] - (k > 0 ? points[order[k - 1]] : lo);
      double right = (k + 1 < order.size() ? points[order[k + 1]] : hi) - points[i];
      mu[i] = points[i];
      sigma[i] = std::clamp(std::max(left, right), min_sigma, range);
    }
    sigma[prior] = range;
    weight[prior] = kPriorWeight;
    double total = 0;
    for (double w : weight) total += w;
    for (double& w : weight) w /= total;
  }

  double sample(nn::Rng& rng) const {
    double u = uniform01(rng), acc = 0;
    size_t k = weight.size() - 1;
    for (size_t i = 0; i < weight.size(); ++i) {
      acc += weight[i];
      if (u < acc) {
        k = i;
        break;
      }
    }
    for (int tries = 0; tries < 100; ++tries) {
      double x = mu[k] + sigma[k] * static_cast<double>(rng.normal());
      if (x >= lo && x <= hi) return x;
    }
    return std::clamp(mu[k], lo, hi);
  }

  double log_pdf(double x) const {
    std::vector<double> terms(mu.size());
    for (size_t i = 0; i < mu.size(); ++i) {
      double z = (x - mu[i]) / sigma[i];
      double mass = normal_cdf((hi - mu[i]) / sigma[i]) - normal_cdf((lo - mu[i]) / sigma[i]);
      terms[i] = std::log(weight[i]) - 0.5 * z * z - std::log(sigma[i] * std::sqrt(2 * M_PI)) -
                 std::log(std::max(mass, 1e-300));
    }
    return log_sum_exp(terms);
  }
};

// The parameter's internal (continuous) scale and its inverse.
double to_internal(const ParamSpec& p, double v) {
  return p.kind == ParamKind::kLogUniform ? std::log(v) : v;
}

}  // namespace

void TpeSampler::observe(int64_t index, double value) {
  if (index < 0 || index >= static_cast<int64_t>(params_.size())) return;
  for (const Observed& o : observed_)
    if (o.index == index) return;  // observations are final; a repeat changes nothing
  double loss = search_.maximize() ? -value : value;
  if (std::isnan(loss)) loss = std::numeric_limits<double>::infinity();
  observed_.push_back({index, loss});
}

void TpeSampler::resume(const TrialConfig& issued) {
  Sampler::resume(issued);
  if (params_.size() <= static_cast<size_t>(issued.index))
    params_.resize(static_cast<size_t>(issued.index) + 1);
  params_[static_cast<size_t>(issued.index)] = issued.params;
}

nlohmann::json TpeSampler::suggest(nn::Rng& rng) const {
  std::vector<Observed> sorted;
  for (const Observed& o : observed_)
    if (!params_[static_cast<size_t>(o.index)].is_null()) sorted.push_back(o);
  std::sort(sorted.begin(), sorted.end(), [](const Observed& a, const Observed& b) {
    return a.loss != b.loss ? a.loss < b.loss : a.index < b.index;
  });
  const size_t split = n_below(sorted.size());
  const size_t n_cand = static_cast<size_t>(search_.n_ei_candidates);

  nlohmann::json out = nlohmann::json::object();
  for (const ParamSpec& p : search_.parameters) {
    auto value_of = [&](size_t k) -> const nlohmann::json& {
      return params_[static_cast<size_t>(sorted[k].index)][p.name];
    };
    if (p.kind == ParamKind::kChoice) {
      const size_t k = p.choices.size();
      std::vector<double> good(k, kPriorWeight / k), bad(k, kPriorWeight / k);
      for (size_t i = 0; i < sorted.size(); ++i) {
        auto it = std::find(p.choices.begin(), p.choices.end(), value_of(i));
        if (it != p.choices.end()) (i < split ? good : bad)[it - p.choices.begin()] += 1;
      }
      double good_total = 0, bad_total = 0;
      for (size_t c = 0; c < k; ++c) good_total += good[c], bad_total += bad[c];
      size_t best = 0;
      double best_score = -std::numeric_limits<double>::infinity();
      for (size_t n = 0; n < n_cand; ++n) {
        double u = uniform01(rng) * good_total, acc = 0;
        size_t c = k - 1;
        for (size_t j = 0; j < k; ++j) {
          acc += good[j];
          if (u < acc) {
            c = j;
            break;
          }
        }
        double score = std::log(good[c] / good_total) - std::log(bad[c] / bad_total);
        if (score > best_score) best_score = score, best = c;
      }
      out[p.name] = p.choices[best];
      continue;
    }
    // Numeric: int ranges as a continuous range widened by half a step, then rounded.
    const double half = p.kind == ParamKind::kInt ? 0.5 * std::max<int64_t>(p.step, 1) : 0.0;
    const double lo = to_internal(p, p.low) - half, hi = to_internal(p, p.high) + half;
    std::vector<double> good, bad;
    for (size_t i = 0; i < sorted.size(); ++i) {
      const nlohmann::json& v = value_of(i);
      if (!v.is_number()) continue;
      (i < split ? good : bad).push_back(std::clamp(to_internal(p, v.get<double>()), lo, hi));
    }
    Parzen l(good, lo, hi), g(bad, lo, hi);
    double best = l.mu.back(), best_score = -std::numeric_limits<double>::infinity();
    for (size_t n = 0; n < n_cand; ++n) {
      double x = l.sample(rng);
      double score = l.log_pdf(x) - g.log_pdf(x);
      if (score > best_score) best_score = score, best = x;
    }
    if (p.kind == ParamKind::kInt) {
      int64_t s = std::max<int64_t>(p.step, 1);
      int64_t k = static_cast<int64_t>(std::llround((best - p.low) / static_cast<double>(s)));
      int64_t last = (p.int_high - p.int_low) / s;
      out[p.name] = p.int_low + std::clamp<int64_t>(k, 0, last) * s;
    } else if (p.kind == ParamKind::kLogUniform) {
      out[p.name] = std::clamp(std::exp(best), p.low, p.high);
    } else {
      out[p.name] = std::clamp(best, p.low, p.high);
    }
  }
  return out;
}

std::optional<TrialConfig> TpeSampler::next() {
  if (!budget_left()) return std::nullopt;
  const uint64_t size = space_size();
  if (size != 0 && static_cast<uint64_t>(next_index_) >= size) return std::nullopt;
  nn::Rng rng(nn::derive_seed(search_.seed ^ kTpeTag, static_cast<uint64_t>(next_index_)));
  const bool startup = static_cast<int64_t>(observed_.size()) < search_.n_startup;
  auto draw = [&] { return startup ? draw_prior(rng) : suggest(rng); };
  nlohmann::json params = draw();
  for (int i = 0; i < 100 && seen(params); ++i) params = i < 50 ? draw() : draw_prior(rng);
  if (params_.size() <= static_cast<size_t>(next_index_))
    params_.resize(static_cast<size_t>(next_index_) + 1);
  params_[static_cast<size_t>(next_index_)] = params;
  return issue(std::move(params));
}

}  // namespace dnnlab::sweep
