// The ticket ledger (src/experiment/ticket_ledger.hpp): each way a short
// unit's life ends, who may answer on it afterwards, and its memory's bound.
#include "experiment/ticket_ledger.hpp"

#include <gtest/gtest.h>

namespace dnnlab::experiment {
namespace ticket_ledger_test {

using Time = TicketLedger::Time;
using std::chrono::seconds;

const Time t0{};

TEST(TicketLedger, LeasedReportedFinished) {
  TicketLedger l;
  l.fill_line({0, 32, 64});
  auto u = l.lease(/*holder=*/0, /*version=*/5, /*size=*/32, t0, t0 + seconds(10));
  ASSERT_TRUE(u);
  EXPECT_EQ(u->id, 1u);
  EXPECT_EQ(u->item, 0);
  EXPECT_EQ(u->version, 5u);
  EXPECT_FALSE(l.free(0)) << "it owes its first report";
  EXPECT_TRUE(l.free(1));
  EXPECT_EQ(l.earliest_deadline(0), t0 + seconds(10));

  l.arrived(u->id, t0 + seconds(1));
  EXPECT_TRUE(l.free(0)) << "its report is in";
  EXPECT_EQ(l.earliest_deadline(0), Time::max()) << "no deadline while the report is judged";
  EXPECT_TRUE(l.overdue(0, t0 + seconds(100)).empty());

  l.report(u->id, t0 + seconds(2), t0 + seconds(12));
  EXPECT_EQ(l.reported(0), 1);
  EXPECT_FALSE(l.any_at(0));
  EXPECT_TRUE(l.any_at(1));
  EXPECT_EQ(l.earliest_deadline(1), t0 + seconds(12));
  EXPECT_EQ(l.find(u->id)->stage_began, t0 + seconds(2));

  const TicketLedger::Ended e = l.finish(u->id, t0 + seconds(3));
  EXPECT_EQ(e.end, TicketLedger::End::kFinished);
  EXPECT_FALSE(e.back_in_line);
  ASSERT_EQ(e.unit.arrivals.size(), 2u);
  EXPECT_EQ(e.unit.arrivals[0], t0 + seconds(1));
  EXPECT_EQ(e.unit.arrivals[1], t0 + seconds(3));
  EXPECT_EQ(l.reported(0), 0);
  EXPECT_EQ(l.find(u->id), nullptr);
  EXPECT_EQ(l.line_size(), 2u);
  EXPECT_EQ(l.charged(0), 0);
  // Its holder answering on it again: late, not foreign.
  EXPECT_EQ(l.answer(u->id, 0), TicketLedger::Answer::kLate);
}

TEST(TicketLedger, ExpiredBeforeAReportGoesBackFirstAndChargesItsHolder) {
  TicketLedger l;
  l.fill_line({0, 32, 64});
  auto a = l.lease(0, 0, 32, t0, t0 + seconds(10));
  auto b = l.lease(1, 0, 32, t0, t0 + seconds(20));
  EXPECT_EQ(l.overdue(0, t0 + seconds(15)), std::vector<uint64_t>{a->id});
  const TicketLedger::Ended e = l.expire(a->id, t0 + seconds(15));
  EXPECT_EQ(e.end, TicketLedger::End::kExpired);
  EXPECT_TRUE(e.back_in_line);
  EXPECT_EQ(l.charged(0), 1);
  EXPECT_EQ(l.next_in_line(), 0) << "back first in line, before 64";
  EXPECT_FALSE(l.free(0)) << "it still owes its answer";
  // The silent holder's answer comes at last: late, and it owes nothing more.
  EXPECT_EQ(l.answer(a->id, 0), TicketLedger::Answer::kLate);
  EXPECT_TRUE(l.free(0));
  // The next free holder gets the batch again, as a new unit.
  auto again = l.lease(2, 1, 32, t0 + seconds(16), t0 + seconds(26));
  EXPECT_EQ(again->item, 0);
  EXPECT_GT(again->id, b->id);
}

TEST(TicketLedger, ExpiredAfterAReportIsLost) {
  TicketLedger l;
  l.fill_line({0});
  auto a = l.lease(0, 0, 32, t0, t0 + seconds(10));
  l.arrived(a->id, t0 + seconds(1));
  l.report(a->id, t0 + seconds(1), t0 + seconds(5));
  EXPECT_TRUE(l.overdue(0, t0 + seconds(6)).empty()) << "stage 0 has none";
  ASSERT_EQ(l.overdue(1, t0 + seconds(6)), std::vector<uint64_t>{a->id});
  const TicketLedger::Ended e = l.expire(a->id, t0 + seconds(6));
  EXPECT_FALSE(e.back_in_line);
  EXPECT_FALSE(l.work_left()) << "what it reported counted; nothing to redo";
  EXPECT_EQ(l.charged(0), 1);
  EXPECT_EQ(l.reported(0), 0);
  EXPECT_FALSE(l.free(0)) << "it owes its last answer";
  EXPECT_EQ(l.answer(a->id, 0), TicketLedger::Answer::kLate);
  EXPECT_TRUE(l.free(0));
}

TEST(TicketLedger, GivenBackWhenItsHolderLeavesUncharged) {
  TicketLedger l;
  l.fill_line({0, 32, 64, 96});
  auto a = l.lease(0, 0, 32, t0, t0 + seconds(10));  // will be reported
  auto b = l.lease(1, 0, 32, t0, t0 + seconds(10));
  l.arrived(a->id, t0);
  l.report(a->id, t0, t0 + seconds(10));
  auto c = l.lease(0, 0, 32, t0, t0 + seconds(10));  // holder 0's second, not reported
  const std::vector<TicketLedger::Ended> gone = l.release_holder(0, /*quarantine=*/false);
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0].unit.id, a->id);
  EXPECT_EQ(gone[0].end, TicketLedger::End::kGivenBack);
  EXPECT_FALSE(gone[0].back_in_line);
  EXPECT_EQ(gone[1].unit.id, c->id);
  EXPECT_TRUE(gone[1].back_in_line);
  EXPECT_EQ(l.charged(0), 0) << "leaving is not its fault";
  EXPECT_EQ(l.next_in_line(), 64);
  EXPECT_NE(l.find(b->id), nullptr) << "another holder's unit is untouched";
  EXPECT_FALSE(l.quarantined(0));
  // Back on a new link: it owes nothing and may lease again.
  l.holder_back(0);
  EXPECT_TRUE(l.free(0));
  EXPECT_TRUE(l.lease(0, 0, 32, t0, t0 + seconds(10)));
}

TEST(TicketLedger, LostWithAQuarantinedHolderWhoGetsNothingMore) {
  TicketLedger l;
  l.fill_line({0, 32});
  auto a = l.lease(3, 0, 32, t0, t0 + seconds(10));
  const std::vector<TicketLedger::Ended> gone = l.release_holder(3, /*quarantine=*/true);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].end, TicketLedger::End::kLost);
  EXPECT_TRUE(gone[0].back_in_line) << "its batch is still to train, by someone else";
  EXPECT_TRUE(l.quarantined(3));
  EXPECT_FALSE(l.free(3));
  EXPECT_FALSE(l.lease(3, 0, 32, t0, t0 + seconds(10)));
  l.holder_back(3);
  EXPECT_TRUE(l.quarantined(3)) << "quarantine sticks";
  EXPECT_EQ(l.next_in_line(), 0);
  (void)a;
}

TEST(TicketLedger, AnAnswerFromAnyoneButTheHolderIsForeign) {
  TicketLedger l;
  l.fill_line({0, 32});
  auto a = l.lease(0, 0, 32, t0, t0 + seconds(10));
  auto b = l.lease(1, 0, 32, t0, t0 + seconds(10));
  EXPECT_EQ(l.answer(a->id, 0), TicketLedger::Answer::kLive);
  EXPECT_EQ(l.answer(a->id, 1), TicketLedger::Answer::kForeign) << "live, someone else's";
  l.expire(a->id, t0 + seconds(11));
  EXPECT_EQ(l.answer(a->id, 1), TicketLedger::Answer::kForeign) << "given up, someone else's";
  EXPECT_EQ(l.answer(a->id, 2), TicketLedger::Answer::kForeign) << "a holder never seen";
  EXPECT_EQ(l.answer(99, 0), TicketLedger::Answer::kForeign) << "never leased";
  EXPECT_EQ(l.answer(a->id, 0), TicketLedger::Answer::kLate);
  ASSERT_NE(l.remembered(a->id, 0), nullptr);
  EXPECT_EQ(l.remembered(a->id, 0)->item, 0);
  EXPECT_EQ(l.remembered(a->id, 1), nullptr);
  (void)b;
}

TEST(TicketLedger, ItsMemoryIsBoundedPerHolder) {
  TicketLedger l({/*remembered_per_holder=*/4});
  std::vector<int64_t> items(1000);
  for (int i = 0; i < 1000; ++i) items[i] = i;
  l.fill_line(items);
  for (int i = 0; i < 1000; ++i) {
    const int h = i % 2;
    auto u = l.lease(h, 0, 1, t0, t0 + seconds(1));
    l.arrived(u->id, t0);
    l.report(u->id, t0, t0 + seconds(1));
    l.finish(u->id, t0);
  }
  EXPECT_EQ(l.live().size(), 0u);
  EXPECT_EQ(l.remembered(), 8u) << "4 ended units per holder, not 1000";
  EXPECT_EQ(l.answer(1000, 1), TicketLedger::Answer::kLate) << "the last ones are remembered";
  EXPECT_EQ(l.answer(1, 0), TicketLedger::Answer::kForeign) << "the first is long forgotten";
  EXPECT_THROW(TicketLedger({0}), std::invalid_argument);
}

}  // namespace ticket_ledger_test
}  // namespace dnnlab::experiment
