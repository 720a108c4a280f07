// Schedulers on scripted learning curves: which trials stop, at which epoch.
#include "sweep/scheduler.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace dnnlab::sweep {
namespace {

struct Report {
  int64_t trial;
  int64_t epoch;
  double value;
  Decision expected;
};
constexpr Decision C = Decision::kContinue;
constexpr Decision S = Decision::kStop;

void play(Scheduler& s, const std::vector<Report>& script) {
  for (size_t i = 0; i < script.size(); ++i) {
    const Report& r = script[i];
    EXPECT_EQ(s.on_epoch(r.trial, r.epoch, r.value), r.expected)
        << "step " << i << ": trial " << r.trial << " epoch " << r.epoch << " value " << r.value;
  }
}

// ASHA, eta = 3, rungs at epochs 1 and 3 (9 is the last epoch: no rung).
// At a rung a trial continues iff fewer than max(1, floor(n / 3)) of the n
// values recorded there so far (its own included) are better.
//
//   trial | e1   decision (n, keep)  | e2   | e3   decision (n, keep)
//   0     | 0.50 C (1, 1)            | 0.52 | 0.58 C (1, 1)
//   1     | 0.60 C (2, 1)            | 0.62 | 0.66 C (2, 1)
//   2     | 0.40 S (3, 1): 2 better  |      |
//   3     | 0.70 C (4, 1)            | 0.72 | 0.57 S (3, 1): 2 better
//   4     | 0.55 S (5, 1): 2 better  |      |
//   5     | 0.65 C (6, 2): 1 better  | 0.66 | 0.70 C (4, 1)
const std::vector<Report> kAshaScript = {
    {0, 1, 0.50, C}, {1, 1, 0.60, C}, {2, 1, 0.40, S}, {0, 2, 0.52, C}, {3, 1, 0.70, C},
    {0, 3, 0.58, C}, {1, 2, 0.62, C}, {4, 1, 0.55, S}, {1, 3, 0.66, C}, {3, 2, 0.72, C},
    {3, 3, 0.57, S}, {5, 1, 0.65, C}, {5, 2, 0.66, C}, {5, 3, 0.70, C}, {0, 9, 0.10, C},
};

TEST(AshaScheduler, PrunesTheExpectedTrials) {
  AshaScheduler asha(true, 1, 3, 9);
  EXPECT_EQ(asha.rungs(), (std::vector<int64_t>{1, 3}));
  play(asha, kAshaScript);
}

TEST(AshaScheduler, ModeMinMirrorsModeMax) {
  AshaScheduler asha(false, 1, 3, 9);
  std::vector<Report> script = kAshaScript;
  for (Report& r : script) r.value = -r.value;
  play(asha, script);
}

TEST(AshaScheduler, RungsFromMinEpochs) {
  EXPECT_EQ(AshaScheduler(true, 2, 2, 20).rungs(), (std::vector<int64_t>{2, 4, 8, 16}));
  EXPECT_EQ(AshaScheduler(true, 1, 3, 3).rungs(), (std::vector<int64_t>{1}));
  EXPECT_EQ(AshaScheduler(true, 4, 3, 4).rungs(), (std::vector<int64_t>{}));
}

TEST(AshaScheduler, NanIsWorst) {
  AshaScheduler asha(true, 1, 3, 9);
  EXPECT_EQ(asha.on_epoch(0, 1, std::nan("")), S);
  EXPECT_EQ(asha.on_epoch(1, 1, 0.1), C);
}

TEST(AshaScheduler, ReplayRebuildsTheState) {
  // The first 8 reports were stored before a restart; replaying them gives a
  // scheduler that decides the rest exactly as the uninterrupted one did.
  AshaScheduler fresh(true, 1, 3, 9);
  for (size_t i = 0; i < 8; ++i)
    fresh.replay(kAshaScript[i].trial, kAshaScript[i].epoch, kAshaScript[i].value);
  play(fresh, std::vector<Report>(kAshaScript.begin() + 8, kAshaScript.end()));
  // A repeated report (a redelivered message) returns the first decision and
  // changes nothing.
  EXPECT_EQ(fresh.on_epoch(2, 1, 0.99), S);
  EXPECT_EQ(fresh.on_epoch(6, 1, 0.60), S);  // 3 of 7 better, keep 2
}

// Median rule, grace 1, at least 3 other trials at the epoch.
//   trial | values          | decisions
//   0,1,2 | complete curves | C (fewer than 3 others)
//   3     | e1 0.30         | S: others' averages at e1 {0.5, 0.4, 0.6}, median 0.5
//   4     | 0.55 0.45 0.46  | e1 C (median of {0.5,0.4,0.6,0.3} = 0.45)
//         |                 | e2 C (best 0.55, averages {0.55,0.45,0.65}, median 0.55: not worse)
//         |                 | e3 S (best 0.55, averages {0.6,0.5,0.7}, median 0.6)
const std::vector<Report> kMedianScript = {
    {0, 1, 0.5, C},  {1, 1, 0.4, C},  {0, 2, 0.6, C},  {2, 1, 0.6, C}, {1, 2, 0.5, C},
    {0, 3, 0.7, C},  {2, 2, 0.7, C},  {1, 3, 0.6, C},  {2, 3, 0.8, C}, {3, 1, 0.3, S},
    {4, 1, 0.55, C}, {4, 2, 0.45, C}, {4, 3, 0.46, S},
};

TEST(MedianStoppingScheduler, StopsBelowTheMedian) {
  MedianStoppingScheduler median(true, 1);
  play(median, kMedianScript);
}

TEST(MedianStoppingScheduler, GraceEpochs) {
  MedianStoppingScheduler median(true, 2);
  std::vector<Report> script(kMedianScript.begin(), kMedianScript.begin() + 9);
  script.push_back({3, 1, 0.3, C});  // within the grace period
  script.push_back({3, 2, 0.3, S});  // averages at e2 {0.55, 0.45, 0.65}
  play(median, script);
}

TEST(MedianStoppingScheduler, ModeMin) {
  MedianStoppingScheduler median(false, 1);
  std::vector<Report> script = kMedianScript;
  for (Report& r : script) r.value = -r.value;
  play(median, script);
}

TEST(FifoScheduler, NeverStops) {
  FifoScheduler fifo(true);
  for (const Report& r : kAshaScript) EXPECT_EQ(fifo.on_epoch(r.trial, r.epoch, r.value), C);
}

}  // namespace
}  // namespace dnnlab::sweep
