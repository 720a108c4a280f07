#include "hybrid/checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "nn/errors.hpp"

namespace dnnlab::hybrid {
namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
    m = (m + lower) / 2;
  }
  return m;
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

}  // namespace

void NormHistory::add(double norm, int keep) {
  norms_.push_back(norm);
  while (static_cast<int>(norms_.size()) > keep) norms_.pop_front();
}

double NormHistory::median(int min) const {
  if (static_cast<int>(norms_.size()) < std::max(1, min)) return 0;
  return median_of(std::vector<double>(norms_.begin(), norms_.end()));
}

std::string shape_problem(const nn::TensorView& t, const nn::Shape& shape) {
  if (t.shape() == shape) return {};
  return "shape " + t.shape().str() + ", expected " + shape.str();
}

std::string finite_problem(const nn::TensorView& t) {
  const float* p = t.data();
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    if (!std::isfinite(p[i])) return "value " + std::to_string(i) + " is " + fmt(p[i]);
  return {};
}

double sum_of_squares(const nn::TensorView& t, double s) {
  const float* p = t.data();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) s += static_cast<double>(p[i]) * p[i];
  return s;
}

double l2_norm(std::span<const nn::TensorView> tensors) {
  double s = 0;
  for (const auto& t : tensors) s = sum_of_squares(t, s);
  return std::sqrt(s);
}

std::string norm_problem(size_t i, std::span<const double> step_norms, const NormHistory& history,
                         const CheckLimits& limits) {
  const double norm = step_norms[i];
  if (static_cast<int>(step_norms.size()) >= limits.min_peers) {
    const double m = median_of(std::vector<double>(step_norms.begin(), step_norms.end()));
    if (m > 0 && (norm > m * limits.step_factor || norm < m / limits.step_factor))
      return "norm " + fmt(norm) + " against the step's median " + fmt(m) + " (allowed x" +
             fmt(limits.step_factor) + " either way)";
  }
  const double bound = history.median(limits.history_min) * limits.history_factor;
  if (bound > 0 && norm > bound) {
    for (size_t j = 0; j < step_norms.size(); ++j)
      if (j != i && step_norms[j] <= bound)
        return "norm " + fmt(norm) + " against the recent median " +
               fmt(bound / limits.history_factor) + " (allowed x" + fmt(limits.history_factor) +
               ")";
  }
  return {};
}

std::vector<bool> below_step_median(std::span<const std::string> nonfinite,
                                    std::span<const double> norms, const CheckLimits& limits) {
  std::vector<double> finite;
  for (size_t i = 0; i < nonfinite.size(); ++i)
    if (nonfinite[i].empty()) finite.push_back(norms[i]);
  std::vector<bool> small(nonfinite.size(), false);
  if (static_cast<int>(finite.size()) < limits.min_peers) return small;
  const double m = median_of(finite);
  for (size_t i = 0; i < nonfinite.size(); ++i)
    small[i] = nonfinite[i].empty() && m > 0 && norms[i] < m / limits.step_factor;
  return small;
}

std::vector<std::string> screen_step(std::span<const std::string> nonfinite,
                                     std::span<const double> norms, NormHistory& history,
                                     const CheckLimits& limits, const std::string& what) {
  std::vector<std::string> why(nonfinite.begin(), nonfinite.end());
  std::vector<size_t> finite;
  std::vector<double> finite_norms;
  for (size_t i = 0; i < nonfinite.size(); ++i)
    if (nonfinite[i].empty()) {
      finite.push_back(i);
      finite_norms.push_back(norms[i]);
    }
  if (!nonfinite.empty() && finite.empty())
    throw NumericError(what + " are not finite on any client (diverged): " + nonfinite[0]);
  for (size_t k = 0; k < finite.size(); ++k)
    why[finite[k]] = norm_problem(k, finite_norms, history, limits);
  for (size_t i : finite)
    if (why[i].empty()) history.add(norms[i], limits.history_size);
  return why;
}

}  // namespace dnnlab::hybrid
