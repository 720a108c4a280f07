// The study's numbers: fits, bests, the chance and plateau rules (study.hpp
// states them), and the conclusions they lead to.
#include "report/study.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

namespace dnnlab::report {

std::string fmt_num(double v, const char* format) {
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

std::optional<LinearFit> least_squares(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = std::min(x.size(), y.size());
  if (n < 2) return std::nullopt;
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx <= 0) return std::nullopt;
  LinearFit f;
  f.n = n;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  double ss_res = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double r = y[i] - (f.intercept + f.slope * x[i]);
    ss_res += r * r;
  }
  f.r2 = syy > 0 ? 1.0 - ss_res / syy : (ss_res <= 1e-300 ? 1.0 : 0.0);
  return f;
}

std::vector<DepthValue> best_per_depth(const std::vector<DepthValue>& points) {
  std::map<double, double> best;
  for (const auto& p : points) {
    auto [it, added] = best.emplace(p.depth, p.value);
    if (!added) it->second = std::max(it->second, p.value);
  }
  std::vector<DepthValue> out;
  for (auto [d, v] : best) out.push_back({d, v});
  return out;
}

bool at_chance(double accuracy, double chance, const Rules& rules) {
  return accuracy <= chance + rules.chance_fraction * (1.0 - chance);
}

std::optional<double> chance_depth(const std::vector<DepthValue>& best, double chance,
                                   const Rules& rules) {
  std::optional<double> from;
  for (auto it = best.rbegin(); it != best.rend() && at_chance(it->value, chance, rules); ++it)
    from = it->depth;
  return from;
}

Plateau find_plateau(const std::vector<DepthValue>& best, const Rules& rules) {
  Plateau p;
  if (best.empty()) return p;
  for (const auto& b : best) p.peak = std::max(p.peak, b.value);
  std::size_t first = 0;
  while (best[first].value < p.peak - rules.plateau_tolerance) ++first;
  p.peak_depth = best[first].depth;
  if (best.size() < 3) return p;
  if (first + 1 == best.size()) {
    p.kind = Plateau::Kind::rising;
    return p;
  }
  p.kind = Plateau::Kind::plateau;
  for (std::size_t i = first + 1; i < best.size(); ++i)
    if (best[i].value < p.peak - rules.plateau_tolerance) {
      p.kind = Plateau::Kind::declines;
      p.falls_at = best[i].depth;
      break;
    }
  return p;
}

std::string describe(const Plateau& p, const std::string& depth_name) {
  const std::string peak = fmt_num(p.peak, "%.4f");
  switch (p.kind) {
    case Plateau::Kind::too_few:
      return "too few " + depth_name + " values (under 3) to judge a plateau";
    case Plateau::Kind::rising:
      return "still rising at the largest " + depth_name + " tried (" + peak + " at " +
             fmt_num(p.peak_depth) + ")";
    case Plateau::Kind::plateau:
      return "plateaus from " + depth_name + " " + fmt_num(p.peak_depth) + " at " + peak +
             " (every larger " + depth_name + " stays within the tolerance of it)";
    case Plateau::Kind::declines:
      return "peaks at " + peak + " (" + depth_name + " " + fmt_num(p.peak_depth) +
             "), then falls below the peak from " + depth_name + " " + fmt_num(p.falls_at);
  }
  return {};
}

bool counts(const TrialRow& row) {
  return row.accuracy && !row.provisional && (row.status == "finished" || row.status == "pruned");
}

namespace {

SeriesResult series_result(const Study& s, const std::string& family, const std::string* activation,
                           const Rules& rules) {
  SeriesResult r;
  r.family = family;
  r.activation = activation ? *activation : "";
  std::vector<DepthValue> points;
  for (const auto& t : s.trials)
    if (counts(t) && t.family == family && (!activation || t.activation == *activation))
      points.push_back({t.depth, *t.accuracy});
  r.best = best_per_depth(points);
  if (s.classes > 0) r.chance_depth = chance_depth(r.best, s.chance(), rules);
  r.plateau = find_plateau(r.best, rules);
  return r;
}

// Seconds per epoch (or per sample) against depth, over the rows `keep` takes.
template <class Keep>
std::optional<LinearFit> time_fit(const Study& s, bool per_sample, Keep keep) {
  std::vector<double> x, y;
  for (const auto& t : s.trials) {
    const auto& v = per_sample ? t.sample_seconds : t.epoch_seconds;
    if (v && !t.provisional && keep(t)) {
      x.push_back(t.depth);
      y.push_back(*v);
    }
  }
  return least_squares(x, y);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string family_label(const Study& s, const std::string& f) {
  return s.family_param.empty() ? "all trials" : s.family_param + " " + f;
}

void add_conclusions(const Study& s, Analysis& a) {
  const std::string& dn = s.depth_param;
  for (const auto& f : a.families) {
    const std::string who = family_label(s, f.overall.family) + ": ";
    if (f.overall.best.empty()) {
      a.conclusions.push_back(who + "no trial reported an accuracy");
      continue;
    }
    if (s.classes > 0) {
      if (f.overall.chance_depth)
        a.conclusions.push_back(who + "falls to chance (" + fmt_num(s.chance(), "%.4f") +
                                ") from " + dn + " " + fmt_num(*f.overall.chance_depth) +
                                " on: no trial at or beyond it learned");
      else
        a.conclusions.push_back(who + "stays above chance up to the largest " + dn + " tried (" +
                                fmt_num(f.overall.best.back().depth) + ")");
    }
    a.conclusions.push_back(who + "accuracy: " + describe(f.overall.plateau, dn));
    if (!f.gap.empty()) {
      auto widest = std::max_element(f.gap.begin(), f.gap.end(),
                                     [](auto& l, auto& r) { return l.value < r.value; });
      a.conclusions.push_back(who + "against " + s.family_param + " " + a.plain_family + ", " +
                              fmt_num(f.gap.back().value, "%+.4f") + " at " + dn + " " +
                              fmt_num(f.gap.back().depth) + " (the largest " + dn +
                              " both measured); the widest gap " + fmt_num(widest->value, "%+.4f") +
                              " at " + dn + " " + fmt_num(widest->depth));
    }
    if (f.epoch_fit)
      a.conclusions.push_back(who + "each unit of " + dn + " costs " + fmt_num(f.epoch_fit->slope) +
                              " s per epoch (least squares over " + std::to_string(f.epoch_fit->n) +
                              " trials, R² = " + fmt_num(f.epoch_fit->r2, "%.3f") + ")");
  }
  if (a.epoch_fit) {
    const bool linear = a.epoch_fit->r2 >= 0.9;
    a.conclusions.push_back(
        "time per epoch against " + dn + ", every trial: slope " + fmt_num(a.epoch_fit->slope) +
        " s per unit, R² = " + fmt_num(a.epoch_fit->r2, "%.3f") + ": " +
        (linear ? "linear in " + dn + " (R² ≥ 0.9)"
                : "not well described by a line (R² < 0.9; other parameters such as width also "
                  "set the cost, see the fits per family)"));
  }
}

}  // namespace

Analysis analyse(const Study& s, const Rules& rules) {
  Analysis a;
  a.rules = rules;
  for (const auto& f : s.families) {
    for (const auto& act : s.activations) {
      SeriesResult r = series_result(s, f, &act, rules);
      if (!r.best.empty()) a.series.push_back(std::move(r));
    }
  }
  // Gaps are measured against a family called "plain" (any case), if any.
  for (const auto& f : s.families)
    if (lower(f) == "plain") a.plain_family = f;
  std::vector<DepthValue> plain_best;
  if (!a.plain_family.empty()) plain_best = series_result(s, a.plain_family, nullptr, rules).best;
  for (const auto& f : s.families) {
    FamilyResult r;
    r.overall = series_result(s, f, nullptr, rules);
    auto same = [&f](const TrialRow& t) { return t.family == f; };
    r.epoch_fit = time_fit(s, false, same);
    r.sample_fit = time_fit(s, true, same);
    if (f != a.plain_family && !plain_best.empty())
      for (const auto& b : r.overall.best)
        for (const auto& p : plain_best)
          if (p.depth == b.depth) r.gap.push_back({b.depth, b.value - p.value});
    a.families.push_back(std::move(r));
  }
  auto all = [](const TrialRow&) { return true; };
  a.epoch_fit = time_fit(s, false, all);
  a.sample_fit = time_fit(s, true, all);
  std::map<double, std::size_t> best;
  for (std::size_t i = 0; i < s.trials.size(); ++i) {
    const TrialRow& t = s.trials[i];
    if (!counts(t)) continue;
    auto [it, added] = best.emplace(t.depth, i);
    if (!added && *t.accuracy > *s.trials[it->second].accuracy) it->second = i;
  }
  for (auto [d, i] : best) a.best.push_back({d, i});
  add_conclusions(s, a);
  return a;
}

}  // namespace dnnlab::report
