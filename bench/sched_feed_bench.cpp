// Cost of one early-stopping verdict against an experiment of 1k, 10k and
// 100k stored trials (SQLite store, populated here): SchedulerFeed, which
// follows the store incrementally (issue 25), against the replay path it
// replaced (every trial's stored row at the epoch read and replayed into a
// sweep::Scheduler on each verdict), measured in the same run.
//
// Each iteration is what the gateway does at a rung: a browser's trial
// starts (provisional) and stores epoch 1 (untimed), then asks for its
// verdict (timed, in this thread's CPU time: the feed's catch-up with the
// store included). Provisional epochs do not count, so the counted history
// stays at N trials however many iterations run. The replay baseline keeps its scheduler between
// verdicts (the worker's old path; the gateway's built a fresh one each time, which cost more).
// Results in bench/RESULTS.md.
//
// Command (one line): build/release/bench/sched_feed_bench --benchmark_repetitions=5
//   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <time.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiment/scheduler_feed.hpp"
#include "store/result_store.hpp"
#include "sweep/scheduler.hpp"

namespace {

using namespace dnnlab;

constexpr std::int64_t kEpochs = 4;  // per trial; ASHA rungs 1 and 2 (eta 2)

sweep::SweepSpec bench_sweep(const std::string& scheduler) {
  sweep::SweepSpec s;
  s.search.metric = "val_acc";
  s.search.mode = "max";
  s.scheduler.type = scheduler;
  s.scheduler.min_epochs = 1;
  s.scheduler.reduction_factor = 2;
  s.scheduler.grace_epochs = 1;
  s.max_epochs = kEpochs;
  return s;
}

double accuracy(std::int64_t trial, std::int64_t epoch) {
  std::uint64_t x = static_cast<std::uint64_t>(trial * 7919 + epoch * 104729 + 17);
  x ^= x >> 13;
  x *= 0x9E3779B97F4A7C15ull;
  return 0.05 + 0.9 * static_cast<double>((x >> 11) % 1000) / 1000.0;
}

store::EpochMetrics at(std::int64_t epoch, double v) {
  store::EpochMetrics m;
  m.epoch = epoch;
  m.val_acc = v;
  return m;
}

// One populated store per size: `n` finished trials of kEpochs epochs, and
// queued probe trials that the iterations start one by one.
struct Populated {
  std::filesystem::path dir;
  std::unique_ptr<store::ResultStore> store;
  std::int64_t experiment = 0, n = 0;
  std::vector<std::int64_t> probes;
  std::size_t next_probe = 0;
};

constexpr std::size_t kProbes = 4000;

Populated& populated(std::int64_t n) {
  static std::map<std::int64_t, Populated> all;
  Populated& p = all[n];
  if (p.store) return p;
  p.dir = std::filesystem::temp_directory_path() / ("dnnlab-sched-bench-" + std::to_string(n));
  std::filesystem::remove_all(p.dir);
  std::filesystem::create_directories(p.dir);
  p.store = store::open_result_store("sqlite:" + (p.dir / "r.db").string());
  store::ExperimentRecord e;
  e.name = "bench";
  e.spec_text = std::to_string(n);
  p.experiment = p.store->create_experiment(e);
  p.n = n;
  std::vector<store::NewTrial> trials;
  for (std::int64_t i = 0; i < n + static_cast<std::int64_t>(kProbes); ++i)
    trials.push_back({i, "{}", 1});
  const std::vector<std::int64_t> ids = p.store->add_trials(p.experiment, trials);
  p.probes.assign(ids.begin() + n, ids.end());
  // Written as a worker writes: starts, epochs and ends in batches.
  constexpr std::int64_t kBatch = 2000;
  for (std::int64_t first = 0; first < n; first += kBatch) {
    store::ResultBatch b;
    for (std::int64_t i = first; i < std::min(n, first + kBatch); ++i)
      b.starts.push_back({ids[i], 1, "w", {}});
    p.store->record_results(b);
    b = {};
    for (std::int64_t i = first; i < std::min(n, first + kBatch); ++i) {
      for (std::int64_t ep = 1; ep <= kEpochs; ++ep)
        b.epochs.push_back({ids[i], 1, at(ep, accuracy(ids[i], ep))});
      store::TrialEnd end;
      end.trial_id = ids[i];
      end.attempt = 1;
      end.metrics.val_acc = accuracy(ids[i], kEpochs);
      end.metrics.epochs_done = kEpochs;
      b.ends.push_back(end);
    }
    p.store->record_results(b);
  }
  return p;
}

// The replay path before issue 25 (SchedulerFeed's verdict as it was): every
// trial's stored row at the epoch replayed into a scheduler kept per
// experiment, then the trial's own value decided.
class ReplayFeed {
 public:
  explicit ReplayFeed(const sweep::SweepSpec& s, std::int64_t exp)
      : sweep_(s), exp_(exp), scheduler_(sweep::make_scheduler(s)) {}
  bool verdict(store::ResultStore& st, const experiment::EpochPoint& a,
               const store::EpochMetrics& m) {
    for (const auto& te : st.epochs_for(exp_, a.epoch))
      if (te.trial_id != a.trial_id)
        if (auto v = store::metric(te.metrics, sweep_.search.metric))
          scheduler_->replay(te.trial_index, a.epoch, *v);
    const double value = store::metric(m, sweep_.search.metric).value_or(NAN);
    return scheduler_->on_epoch(a.index, a.epoch, value) != sweep::Decision::kStop;
  }

 private:
  const sweep::SweepSpec& sweep_;
  std::int64_t exp_;
  std::unique_ptr<sweep::Scheduler> scheduler_;
};

// Starts the next probe trial and stores its epoch 1 (untimed); the point to judge.
experiment::EpochPoint next_point(Populated& p, store::EpochMetrics& m) {
  if (p.next_probe == p.probes.size()) throw std::runtime_error("out of probe trials");
  const std::int64_t index = p.n + static_cast<std::int64_t>(p.next_probe);
  const std::int64_t id = p.probes[p.next_probe++];
  p.store->mark_running(id, 1, "probe");
  p.store->set_provisional(id, 1, true);
  m = at(1, accuracy(id, 1));
  p.store->record_epoch(id, 1, m);
  return {id, index, 1, kEpochs};
}

// This thread's CPU seconds: the verdict runs in this thread (SQLite is
// embedded), and on a machine shared with other builds the wall clock
// measures their load more than the verdict.
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <typename Verdict>
void time_verdicts(benchmark::State& state, Populated& p, Verdict&& verdict) {
  std::int64_t stopped = 0;
  for (auto _ : state) {
    store::EpochMetrics m;
    const experiment::EpochPoint point = next_point(p, m);
    const double start = thread_seconds();
    const bool go = verdict(point, m);
    state.SetIterationTime(thread_seconds() - start);
    stopped += go ? 0 : 1;
  }
  state.counters["trials"] = static_cast<double>(state.range(0));
  state.counters["stopped"] = static_cast<double>(stopped);
}

void BM_FeedVerdict(benchmark::State& state, const char* scheduler) {
  Populated& p = populated(state.range(0));
  const sweep::SweepSpec sweep = bench_sweep(scheduler);
  experiment::SchedulerFeed feed(sweep, p.experiment);
  feed.catch_up(*p.store);  // the one full read a feed makes when it starts (untimed)
  time_verdicts(state, p, [&](const experiment::EpochPoint& a, const store::EpochMetrics& m) {
    return feed.verdict(*p.store, a, m, false);
  });
}

void BM_ReplayVerdict(benchmark::State& state, const char* scheduler) {
  Populated& p = populated(state.range(0));
  const sweep::SweepSpec sweep = bench_sweep(scheduler);
  ReplayFeed feed(sweep, p.experiment);
  time_verdicts(state, p, [&](const experiment::EpochPoint& a, const store::EpochMetrics& m) {
    return feed.verdict(*p.store, a, m);
  });
}

// A feed's first read: every trial of the experiment (once per process and experiment).
void BM_FeedFirstRead(benchmark::State& state) {
  Populated& p = populated(state.range(0));
  const sweep::SweepSpec sweep = bench_sweep("median");
  for (auto _ : state) {
    experiment::SchedulerFeed feed(sweep, p.experiment);
    benchmark::DoNotOptimize(feed.catch_up(*p.store));
  }
  state.counters["trials"] = static_cast<double>(state.range(0));
}

// The replay path's first verdict replays every row, and each later one
// reads every row again; the median scheduler's first replay is quadratic
// (each replayed row averages every curve seen), so its baseline stops at 10k.
BENCHMARK_CAPTURE(BM_FeedVerdict, asha, "asha")
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Iterations(300)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayVerdict, asha, "asha")
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Iterations(20)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FeedVerdict, median, "median")
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Iterations(300)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ReplayVerdict, median, "median")
    ->Arg(1000)
    ->Arg(10000)
    ->Iterations(20)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FeedFirstRead)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
