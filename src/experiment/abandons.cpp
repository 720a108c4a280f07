// The abandon rule (abandons.hpp).
#include "experiment/abandons.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dnnlab::experiment {

AbandonRule::AbandonRule(int max_in_a_row, double cooldown_seconds)
    : max_(max_in_a_row), cooldown_(cooldown_seconds) {
  if (max_in_a_row < 1)
    throw std::invalid_argument("max_in_a_row: must be >= 1, got " + std::to_string(max_in_a_row));
  if (!(cooldown_seconds >= 0))
    throw std::invalid_argument("cooldown_seconds: must be >= 0, got " +
                                std::to_string(cooldown_seconds));
}

double AbandonRule::cooldown_left(AbandonRecord& r, double now) const {
  if (r.in_a_row < max_) return 0;
  const double left = r.last + cooldown_ - now;
  if (left <= 0) r.in_a_row = 0;  // served its time
  return std::max(0.0, left);
}

}  // namespace dnnlab::experiment
