// FIFO, ASHA and median-rule schedulers (see scheduler.hpp).
#include "sweep/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace dnnlab::sweep {

Decision Scheduler::on_epoch(int64_t trial, int64_t epoch, double value) {
  auto key = std::make_pair(trial, epoch);
  auto it = decided_.find(key);
  if (it != decided_.end()) return it->second;
  Decision d = decide(trial, epoch, value);
  decided_.emplace(key, d);
  return d;
}

bool better(double a, double b, bool maximize) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return maximize ? a > b : a < b;
}

bool asha_continues(std::size_t better_than_it, std::size_t recorded, int64_t eta, bool is_nan) {
  if (is_nan) return false;
  const std::size_t keep = std::max<std::size_t>(1, recorded / static_cast<std::size_t>(eta));
  return better_than_it < keep;
}

bool Scheduler::better(double a, double b) const {
  return sweep::better(a, b, maximize_);
}

AshaScheduler::AshaScheduler(bool maximize, int64_t min_epochs, int64_t reduction_factor,
                             int64_t max_epochs)
    : Scheduler(maximize), eta_(reduction_factor) {
  if (min_epochs < 1 || reduction_factor < 2)
    throw std::invalid_argument("ASHA needs min_epochs >= 1 and reduction_factor >= 2");
  for (int64_t r = min_epochs; rungs_.size() < 64; r *= eta_) {
    if (max_epochs > 0 && r >= max_epochs) break;
    rungs_.push_back(r);
    if (r > (int64_t{1} << 40)) break;
  }
}

Decision AshaScheduler::decide(int64_t trial, int64_t epoch, double value) {
  if (!std::binary_search(rungs_.begin(), rungs_.end(), epoch)) return Decision::kContinue;
  std::vector<double>& rung = recorded_[epoch];
  rung.push_back(value);
  // Rank among everything recorded at this rung so far, ties in its favour.
  size_t ahead = 0;
  for (double v : rung) ahead += better(v, value) ? 1 : 0;
  return asha_continues(ahead, rung.size(), eta_, std::isnan(value)) ? Decision::kContinue
                                                                     : Decision::kStop;
}

MedianStoppingScheduler::MedianStoppingScheduler(bool maximize, int64_t grace_epochs,
                                                 int64_t min_others)
    : Scheduler(maximize), grace_(grace_epochs), min_others_(min_others) {}

Decision MedianStoppingScheduler::decide(int64_t trial, int64_t epoch, double value) {
  std::map<int64_t, double>& curve = curves_[trial];
  curve[epoch] = value;
  if (epoch < grace_) return Decision::kContinue;
  double best = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [e, v] : curve)
    if (e <= epoch && (std::isnan(best) || better(v, best))) best = v;
  // Other trials' running averages over epochs 1..epoch, for those that got there.
  std::vector<double> averages;
  for (const auto& [other, c] : curves_) {
    if (other == trial || !c.count(epoch)) continue;
    double sum = 0;
    int64_t n = 0;
    for (const auto& [e, v] : c)
      if (e <= epoch) sum += v, ++n;
    averages.push_back(sum / static_cast<double>(n));
  }
  if (static_cast<int64_t>(averages.size()) < min_others_) return Decision::kContinue;
  std::sort(averages.begin(), averages.end());
  size_t m = averages.size();
  double median = m % 2 ? averages[m / 2] : 0.5 * (averages[m / 2 - 1] + averages[m / 2]);
  return better(median, best) ? Decision::kStop : Decision::kContinue;
}

std::unique_ptr<Scheduler> make_scheduler(const SweepSpec& sweep) {
  const SchedulerSpec& s = sweep.scheduler;
  const bool max = sweep.search.maximize();
  if (s.type == "fifo") return std::make_unique<FifoScheduler>(max);
  if (s.type == "asha")
    return std::make_unique<AshaScheduler>(max, s.min_epochs, s.reduction_factor, sweep.max_epochs);
  if (s.type == "median") return std::make_unique<MedianStoppingScheduler>(max, s.grace_epochs);
  throw std::invalid_argument("unknown scheduler '" + s.type + "'");
}

}  // namespace dnnlab::sweep
