// The store stays bounded on a 10,000-trial experiment: with the retention
// rule (K = 10) at most K weights rows exist at any time, and the database
// file grows with the trials' own rows only: the same experiment with K = 0
// ends within a few files' size of it. Trials end in batches as a worker's
// do, and each one offers its weights only when the rule could keep it (the
// native worker's cheap check), so the test takes seconds.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "experiment/weights_retention.hpp"
#include "queue/test_support.hpp"

namespace dnnlab::weights_bound_test {
namespace {

constexpr int kTrials = 10000;
constexpr std::int64_t kKeep = 10;
constexpr std::size_t kFileBytes = 16 << 10;  // a tiny net's safetensors file

struct Outcome {
  std::size_t max_rows = 0;
  std::uintmax_t bytes_at_2000 = 0, bytes_at_end = 0;
  std::int64_t puts = 0;
};

Outcome run(const std::string& dir, std::int64_t keep) {
  auto s = store::open_result_store("sqlite:" + dir + "/w.db");
  store::ExperimentRecord e;
  e.name = "bound";
  e.spec_text = "x";
  const std::int64_t exp = s->create_experiment(e);
  std::vector<store::NewTrial> trials;
  for (int i = 0; i < kTrials; ++i) trials.push_back({i, "{\"lr\":0.1}", std::uint64_t(i)});
  const std::vector<std::int64_t> ids = s->add_trials(exp, trials);
  experiment::WeightsRule rule;
  rule.keep = keep;
  experiment::WeightsRetention retention(*s, rule);
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> acc(0, 1);
  const std::string file(kFileBytes, 'w');
  Outcome out;
  auto size = [&] {
    std::uintmax_t n = 0;
    for (const char* f : {"/w.db", "/w.db-wal"})
      if (std::filesystem::exists(dir + f)) n += std::filesystem::file_size(dir + f);
    return n;
  };
  for (int first = 0; first < kTrials; first += 100) {
    store::ResultBatch batch;
    for (int i = first; i < first + 100; ++i) batch.starts.push_back({ids[i], 1, "w", {}});
    s->record_results(batch);
    batch = {};
    for (int i = first; i < first + 100; ++i) {
      store::TrialMetrics m;
      m.val_acc = acc(rng);
      m.epochs_done = 1;
      batch.ends.push_back({ids[i], 1, store::TrialStatus::finished, m, ""});
    }
    s->record_results(batch);
    for (const store::TrialEnd& end : batch.ends) {
      if (!retention.could_keep(end.trial_id, exp, end.metrics)) continue;
      ++out.puts;
      retention.offer(end.trial_id, file);
      out.max_rows = std::max(out.max_rows, s->weights_of(exp).size());
    }
    if (first + 100 == 2000) out.bytes_at_2000 = size();
  }
  out.bytes_at_end = size();
  return out;
}

TEST(WeightsBound, TenThousandTrialsKeepAtMostKFilesAndTheFileGrowsByTheirRowsOnly) {
  dnnlab::testing::TempDir with_dir, without_dir;
  const Outcome with = run(with_dir.path().string(), kKeep);
  const Outcome without = run(without_dir.path().string(), 0);
  EXPECT_LE(with.max_rows, static_cast<std::size_t>(kKeep));
  EXPECT_GT(with.puts, kKeep) << "later trials displaced earlier ones";
  EXPECT_EQ(without.puts, 0);
  // The weights cost about K files whatever the trial count: the freed
  // pages of dropped files are reused (no VACUUM needed).
  const double extra_end = double(with.bytes_at_end) - double(without.bytes_at_end);
  const double extra_2000 = double(with.bytes_at_2000) - double(without.bytes_at_2000);
  EXPECT_LT(extra_end, 3.0 * kKeep * kFileBytes)
      << "with " << with.bytes_at_end << " B, without " << without.bytes_at_end << " B";
  EXPECT_LT(extra_end - extra_2000, 1.0 * kKeep * kFileBytes)
      << "from 2,000 to 10,000 trials the weights' share did not grow";
  std::cout << "10,000 trials: " << with.puts << " files stored, at most " << with.max_rows
            << " at once; store " << with.bytes_at_end << " B with K = 10, " << without.bytes_at_end
            << " B with K = 0 (at 2,000 trials: " << with.bytes_at_2000 << " / "
            << without.bytes_at_2000 << ")\n";
}

}  // namespace
}  // namespace dnnlab::weights_bound_test
