// The checks every tensor a client returns must pass before it counts:
// shape, finiteness, and its norm against the step's own statistics (and,
// loosely, against recent accepted norms). Pure functions and one small
// history; the server (server.cpp) decides what a failure costs (quarantine).
//
//   hybrid::NormHistory h;
//   std::string why = hybrid::norm_problem(i, norms, h, hybrid::CheckLimits{});
//   if (why.empty()) h.add(norms[i]);
#pragma once
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "nn/tensor.hpp"

namespace dnnlab::hybrid {

struct CheckLimits {
  // Against the median of the step's contributions (only with at least
  // `min_peers` of them, the suspect included): outside [median / factor,
  // median * factor] fails.
  double step_factor = 5.0;
  int min_peers = 3;
  // Below median / step_factor is not a danger to the model (a small
  // gradient moves it little), and an honest client's easy batch late in
  // training can land there: such a weight gradient is only dropped, and its
  // client quarantined when it happens this many times in a row (a client
  // sending zeros to skip the work).
  int small_strikes = 3;
  // Against the median of the last accepted norms of the same kind (once
  // `history_min` are known): above median * factor fails, if another
  // contribution of the step is within it. Loose, because norms drift as
  // training goes on; it catches a liar among two.
  double history_factor = 20.0;
  int history_min = 8;
  int history_size = 64;
};

// Recent accepted norms of one kind of tensor (activations, weight gradients).
class NormHistory {
 public:
  void add(double norm, int keep);
  // The median, or 0 while fewer than `min` are known.
  double median(int min) const;

 private:
  std::deque<double> norms_;
};

// Why `t` is not of `shape`, or "".
std::string shape_problem(const nn::TensorView& t, const nn::Shape& shape);
// The index and value of the first non-finite value, or "".
std::string finite_problem(const nn::TensorView& t);
// The L2 norm over several tensors (double accumulation).
double l2_norm(std::span<const nn::TensorView> tensors);
// `sum` plus the squares of t's values in order, in double: l2_norm is the
// square root of these chained over its tensors (bit for bit). A square of a
// finite float cannot overflow a double's sum (at most 2^28 values a tensor),
// so the result is finite exactly when every value is: one read gives the
// norm and the finiteness check, and finite_problem is asked only to name
// the value when it is not.
double sum_of_squares(const nn::TensorView& t, double sum = 0);
// Why step_norms[i] is out of line with the others of its step (every
// contribution to this step, this one included) or with the history, or "".
// The history only condemns a contribution when another one of the step is
// within it: when all of them left it together, the model moved (a run
// going wild), not one client.
std::string norm_problem(size_t i, std::span<const double> step_norms, const NormHistory& history,
                         const CheckLimits& limits);

// Per contribution: whether its norm is below the step's median /
// step_factor (the finite ones, at least min_peers of them, as norm_problem).
std::vector<bool> below_step_median(std::span<const std::string> nonfinite,
                                    std::span<const double> norms, const CheckLimits& limits);

// One step's contributions of one kind (activations, weight gradients):
// why each fails, "" where it passes. nonfinite[i] says why contribution i
// holds a non-finite value ("" when it does not); norms[i] is its norm
// (unused where non-finite). Non-finite values from every contribution are
// the run diverging, not a lie: NumericError naming `what`. The passing
// norms join `history`.
std::vector<std::string> screen_step(std::span<const std::string> nonfinite,
                                     std::span<const double> norms, NormHistory& history,
                                     const CheckLimits& limits, const std::string& what);

}  // namespace dnnlab::hybrid
