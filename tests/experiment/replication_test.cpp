// The adaptive replication rule (src/experiment/replication.hpp) as a table:
// for a record and a sequence of draws, which results are re-run. The
// gateway's trials and the hybrid trainer's gradient tickets both ask it.
#include "experiment/replication.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace dnnlab::experiment {
namespace replication_test {

struct Step {
  double u;     // the adapter's draw
  bool rerun;   // the rule's decision
  bool agrees;  // a re-run's outcome, when it was re-run
};

// Runs `steps` through the rule on one record; returns the probabilities
// seen before each decision.
std::vector<double> play(const Replication& rule, ReplicationRecord& r,
                         const std::vector<Step>& steps) {
  std::vector<double> seen;
  for (size_t i = 0; i < steps.size(); ++i) {
    seen.push_back(rule.probability(r));
    EXPECT_EQ(rule.choose(r, steps[i].u), steps[i].rerun)
        << "step " << i << ": u " << steps[i].u << ", p " << seen.back();
    if (steps[i].rerun && steps[i].agrees) ++r.agreed;
  }
  return seen;
}

TEST(Replication, UntrustedIsAlwaysRerunThenTheChanceHalvesToTheFloor) {
  const Replication rule(3, 0.1);
  ReplicationRecord r;
  // Three agreements to earn: every draw re-runs, even the highest.
  const std::vector<double> p = play(rule, r,
                                     {{0.999999, true, true},
                                      {0.5, true, true},
                                      {0.9, true, true},
                                      // trusted: k = 0, 1, 2, 3, 4, 5
                                      {0.49, true, true},    // p 1/2
                                      {0.25, false, true},   // p 1/4: u == p is not below
                                      {0.124, true, true},   // p 1/8
                                      {0.11, false, true},   // p 0.1: the floor
                                      {0.0999, true, true},  // p 0.1
                                      {0.1, false, true}});
  const std::vector<double> want{1, 1, 1, 0.5, 0.25, 0.125, 0.1, 0.1, 0.1};
  EXPECT_EQ(p, want);
  EXPECT_EQ(r.agreed, 3 + 3);
  EXPECT_EQ(r.drawn, 6);
  EXPECT_TRUE(rule.trusted(r));
  EXPECT_EQ(rule.lacking(r), 0);
}

// The count since trusted starts when the record is made, whatever came
// before it: a re-run that disagreed (the adapter quarantines; here the
// record just does not grow) keeps the identity untrusted and uncounted.
TEST(Replication, TheHalvingStartsWhenTheRecordIsMade) {
  const Replication rule(2, 0.05);
  ReplicationRecord r;
  play(rule, r, {{0.7, true, true}, {0.7, true, false}, {0.7, true, false}});
  EXPECT_EQ(r.agreed, 1);
  EXPECT_EQ(r.drawn, 0);
  EXPECT_EQ(rule.lacking(r), 1);
  EXPECT_FALSE(rule.trusted(r));
  const std::vector<double> p = play(rule, r, {{0.7, true, true}, {0.7, false, true}});
  EXPECT_EQ(p, (std::vector<double>{1, 0.5}));
  EXPECT_EQ(rule.probability(r), 0.25);
}

TEST(Replication, TrustAfterZeroIsTheFloorFromTheFirstResult) {
  const Replication rule(0, 0.05);
  ReplicationRecord r;
  EXPECT_TRUE(rule.trusted(r));
  EXPECT_EQ(rule.lacking(r), 0);
  for (int k = 0; k < 10; ++k) {
    EXPECT_EQ(rule.probability(r), 0.05) << k;
    EXPECT_FALSE(rule.choose(r, 0.05)) << k;  // no halving to ride on
  }
  EXPECT_TRUE(rule.choose(r, 0.0499));
  // With a floor of 0 nothing is ever re-run: no draw is below 0.
  const Replication none(0, 0);
  ReplicationRecord n;
  for (int k = 0; k < 10; ++k) EXPECT_FALSE(none.choose(n, 0.0));
}

TEST(Replication, FloorOneRerunsEverything) {
  const Replication rule(2, 1);
  ReplicationRecord r;
  r.agreed = 50;
  for (int k = 0; k < 100; ++k) ASSERT_TRUE(rule.choose(r, 1 - 1e-12)) << k;
  EXPECT_EQ(rule.probability(r), 1);
}

// A long record with a floor of 0: the halving stops at 2^-60 (no
// underflow to 0, no overflow of the count), the same as the gateway's rule
// did before it was shared.
TEST(Replication, ALongRecordBottomsOutAt2ToTheMinus60) {
  const Replication rule(1, 0);
  ReplicationRecord r;
  r.agreed = 1;
  for (int k = 0; k < 1000; ++k) rule.choose(r, 0.5);
  EXPECT_EQ(rule.probability(r), std::ldexp(1.0, -60));
  EXPECT_LE(r.drawn, 60);
  EXPECT_TRUE(rule.choose(r, 0.0));
  EXPECT_FALSE(rule.choose(r, std::ldexp(1.0, -60)));
  EXPECT_TRUE(rule.choose(r, std::ldexp(1.0, -61)));
}

TEST(Replication, BadParametersAreRefusedByName) {
  auto message = [](int trust_after, double floor) -> std::string {
    try {
      Replication(trust_after, floor);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(-1, 0.05).find("trust_after"), std::string::npos);
  EXPECT_NE(message(3, -0.01).find("floor"), std::string::npos);
  EXPECT_NE(message(3, 1.01).find("floor"), std::string::npos);
  EXPECT_NE(message(3, std::numeric_limits<double>::quiet_NaN()).find("floor"), std::string::npos);
  EXPECT_EQ(message(0, 0), "");
  EXPECT_EQ(message(0, 1), "");
}

}  // namespace replication_test
}  // namespace dnnlab::experiment
