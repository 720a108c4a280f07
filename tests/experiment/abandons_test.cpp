// The abandon rule (src/experiment/abandons.hpp): work given up in a row
// buys a cooldown, finished work clears the count, a served cooldown starts
// the record afresh. The gateway (per identity and per address) and the
// hybrid trainer (per client) both ask it.
#include "experiment/abandons.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>

namespace dnnlab::experiment {
namespace abandons_test {

TEST(AbandonRule, MaxInARowBuysTheCooldownFromTheLast) {
  const AbandonRule rule(3, 600);
  AbandonRecord r;
  rule.abandoned(r, 10);
  rule.abandoned(r, 20);
  EXPECT_EQ(rule.cooldown_left(r, 21), 0) << "2 of 3: no cooldown yet";
  rule.abandoned(r, 30);
  EXPECT_EQ(rule.cooldown_left(r, 30), 600);
  EXPECT_EQ(rule.cooldown_left(r, 500), 130);
  EXPECT_EQ(r.in_a_row, 3) << "asking does not clear it";
  EXPECT_TRUE(rule.charged(r, 629));
  // Served: the count starts afresh, so one more abandon is not a cooldown.
  EXPECT_EQ(rule.cooldown_left(r, 630), 0);
  EXPECT_EQ(r.in_a_row, 0);
  rule.abandoned(r, 631);
  EXPECT_EQ(rule.cooldown_left(r, 631), 0);
  EXPECT_TRUE(rule.charged(r, 631));
  EXPECT_FALSE(rule.charged(r, 631 + 600)) << "a charge the cooldown could no longer use";
}

TEST(AbandonRule, FinishedWorkClearsTheCount) {
  const AbandonRule rule(2, 5);
  AbandonRecord r;
  rule.abandoned(r, 1);
  AbandonRule::completed(r);
  rule.abandoned(r, 2);
  EXPECT_EQ(rule.cooldown_left(r, 2), 0) << "not in a row";
  rule.abandoned(r, 3);
  EXPECT_EQ(rule.cooldown_left(r, 4), 4);
  AbandonRule::completed(r);
  EXPECT_EQ(rule.cooldown_left(r, 4), 0) << "a counted result ends the cooldown too";
  EXPECT_FALSE(rule.charged(r, 4));
}

TEST(AbandonRule, OneAndZeroAreBounds) {
  const AbandonRule strict(1, 0);
  AbandonRecord r;
  strict.abandoned(r, 7);
  EXPECT_EQ(strict.cooldown_left(r, 7), 0) << "a cooldown of 0 is served at once";
  EXPECT_EQ(r.in_a_row, 0);
  const AbandonRule one(1, 2);
  one.abandoned(r, 7);
  EXPECT_EQ(one.cooldown_left(r, 8), 1);
}

TEST(AbandonRule, BadParametersAreRefusedByName) {
  auto message = [](int max, double cooldown) -> std::string {
    try {
      AbandonRule(max, cooldown);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(0, 600).find("max_in_a_row"), std::string::npos);
  EXPECT_NE(message(3, -1).find("cooldown_seconds"), std::string::npos);
  EXPECT_NE(message(3, std::numeric_limits<double>::quiet_NaN()).find("cooldown_seconds"),
            std::string::npos);
  EXPECT_EQ(message(1, 0), "");
}

}  // namespace abandons_test
}  // namespace dnnlab::experiment
