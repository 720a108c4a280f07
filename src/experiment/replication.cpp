// The adaptive replication rule (replication.hpp).
#include "experiment/replication.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dnnlab::experiment {

namespace {
// The halving stops at 2^-60, below any floor worth having (and below the
// gateway's draw's 2^-52 steps): the count stops there instead of running
// into int overflow on a client that never leaves.
constexpr int kDrawnCap = 59;
}  // namespace

Replication::Replication(int trust_after, double floor) : trust_after_(trust_after), floor_(floor) {
  if (trust_after < 0)
    throw std::invalid_argument("trust_after: must be >= 0, got " + std::to_string(trust_after));
  if (!(floor >= 0 && floor <= 1))
    throw std::invalid_argument("floor: must be in [0, 1], got " + std::to_string(floor));
}

int Replication::lacking(const ReplicationRecord& r) const {
  return std::max(0, trust_after_ - r.agreed);
}

double Replication::probability(const ReplicationRecord& r) const {
  if (!trusted(r)) return 1;
  if (trust_after_ == 0) return floor_;
  const int k = std::clamp(r.drawn, 0, kDrawnCap);
  return std::max(floor_, std::ldexp(1.0, -(k + 1)));
}

bool Replication::choose(ReplicationRecord& r, double u) const {
  const double p = probability(r);
  if (trusted(r) && r.drawn < kDrawnCap) ++r.drawn;
  return u < p;
}

}  // namespace dnnlab::experiment
