// server_bench_populate STORE_URL N: one experiment of N trials with per-trial
// metrics (90% finished, the rest queued), written through the ResultStore,
// for bench/api_bench.sh. Prints the experiment id.
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "store/result_store.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: server_bench_populate STORE_URL N\n";
    return 2;
  }
  using namespace dnnlab::store;
  const auto t0 = std::chrono::steady_clock::now();
  auto st = open_result_store(argv[1]);
  const long n = std::stol(argv[2]);
  ExperimentRecord e;
  e.name = "api-bench";
  e.spec_text = "# populated by server_bench_populate\n";
  e.method = "random";
  const std::int64_t id = st->create_experiment(e);
  std::vector<NewTrial> trials;
  trials.reserve(n);
  for (long i = 0; i < n; ++i)
    trials.push_back({i,
                      nlohmann::json{{"depth", 1 + i % 700},
                                     {"width", 64 << (i % 4)},
                                     {"activation", i % 3 == 0   ? "relu"
                                                    : i % 3 == 1 ? "tanh"
                                                                 : "sigmoid"},
                                     {"lr", 1e-4 * (1 + i % 97)}}
                          .dump(),
                      static_cast<std::uint64_t>(i) * 2654435761u});
  auto ids = st->add_trials(id, trials);
  for (long i = 0; i < n; ++i) {
    if (i % 10 == 9) continue;  // queued
    st->mark_running(ids[i], 1, "bench-" + std::to_string(i % 16));
    TrialMetrics m;
    const double x = static_cast<double>((i * 7919) % n) / n;
    m.val_acc = 0.1 + 0.8 * x;
    m.val_loss = 2.3 * (1 - x);
    m.train_acc = m.val_acc;
    m.train_loss = m.val_loss;
    m.test_acc = *m.val_acc - 0.01;
    m.epochs_done = 5;
    m.seconds = 1 + (i % 50);
    st->finish_trial(ids[i], 1, TrialStatus::finished, m);
  }
  std::cerr << "populated experiment " << id << " with " << n << " trials in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s\n";
  std::cout << id << "\n";
  return 0;
}
