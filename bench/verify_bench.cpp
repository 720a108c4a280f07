// Verification overhead (issue 12, point 2): native CPU seconds the
// gateway's verifier spends re-running browser results, per CPU second of
// the accepted trials themselves, with honest clients. The clients are
// simulated browsers (tests/server/browser_client.hpp) that train natively,
// so they agree with every re-run; each runs on its own thread from its own
// loopback address against a real server on 127.0.0.1.
//
//   cmake --build build-rel --target verify_bench
//   ./build-rel/bench/verify_bench --clients 4 --trials 160
//       [--verify-fraction F] [--trust-after N] [--max-pending N] [--limit-train N]
//       [--verify-top-k K] [--metric val_acc|val_loss] [--order rising|shuffled]
//
// Reports, overall and at steady state (each client's results after its
// first `--trust-after`): results, results re-run, verify CPU s, trial CPU s,
// and their ratio. The verifier's CPU per re-run is its thread's CPU time
// (data loading included), logged in each trial.verified event.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "browser_client.hpp"
#include "server/server.hpp"

namespace {

using dnnlab::server::testing::BrowserResult;
using dnnlab::server::testing::HonestBrowser;
using nlohmann::json;
namespace fs = std::filesystem;

std::string sweep_text(int trials, int limit_train, const std::string& metric, bool shuffle) {
  // One lr per trial, spread over a range where the MLP trains; in rising
  // order (results tend to improve as they come: the worst case for the
  // top-K rule) or shuffled (as a random search would meet them).
  std::vector<double> lr(trials);
  for (int i = 0; i < trials; ++i) lr[i] = 0.01 + 0.19 * i / std::max(1, trials - 1);
  if (shuffle) std::shuffle(lr.begin(), lr.end(), std::mt19937(42));
  std::string lrs;
  for (int i = 0; i < trials; ++i) lrs += (i ? ", " : "") + std::to_string(lr[i]);
  return "name: verify-bench\n"
         "template:\n"
         "  data: {dataset: synthetic, limit_train: " +
         std::to_string(limit_train) +
         ", validation: 256}\n"
         "  model:\n"
         "    layers:\n"
         "      - dense: 64\n"
         "        activation: relu\n"
         "      - dense: 10\n"
         "  train:\n"
         "    epochs: 2\n"
         "    batch_size: 32\n"
         "    optimizer: {type: sgd, lr: ${lr}, momentum: 0.9}\n"
         "search:\n"
         "  method: grid\n"
         "  metric: " +
         metric +
         "\n"
         "  parameters:\n"
         "    lr: [" +
         lrs +
         "]\n"
         "scheduler:\n"
         "  type: fifo\n";
}

struct Totals {
  int results = 0, verified = 0;
  double verify_cpu = 0, trial_cpu = 0;
  void print(const char* label) const {
    std::printf(
        "%-12s results %4d  re-run %4d (%5.1f%%)  verify CPU %7.3f s  trial CPU %7.3f s"
        "  overhead %5.1f%%\n",
        label, results, verified, results ? 100.0 * verified / results : 0.0, verify_cpu, trial_cpu,
        trial_cpu > 0 ? 100.0 * verify_cpu / trial_cpu : 0.0);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int clients = 4, trials = 160, limit_train = 1024;
  double verify_fraction = -1;
  int trust_after = -1, max_pending = -1, top_k = -1;
  std::string metric = "val_acc";
  bool shuffle = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--clients")
      clients = std::atoi(argv[i + 1]);
    else if (a == "--trials")
      trials = std::atoi(argv[i + 1]);
    else if (a == "--limit-train")
      limit_train = std::atoi(argv[i + 1]);
    else if (a == "--verify-fraction")
      verify_fraction = std::atof(argv[i + 1]);
    else if (a == "--trust-after")
      trust_after = std::atoi(argv[i + 1]);
    else if (a == "--max-pending")
      max_pending = std::atoi(argv[i + 1]);
    else if (a == "--verify-top-k")
      top_k = std::atoi(argv[i + 1]);
    else if (a == "--metric")
      metric = argv[i + 1];
    else if (a == "--order")
      shuffle = std::string(argv[i + 1]) == "shuffled";
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  char tmpl[] = "/tmp/dnnlab-verify-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  const fs::path dir = tmpl;
  int rc = 0;
  try {
    dnnlab::server::ServerOptions o;
    o.store_url = "sqlite:" + (dir / "dnnlab.db").string();
    o.listen = "127.0.0.1:0";
    if (verify_fraction >= 0) o.verify_fraction = verify_fraction;
    if (top_k >= 0) o.gateway.verify_top_k = top_k;
    if (trust_after >= 0) o.gateway.trust_after = trust_after;
    if (max_pending >= 0) o.gateway.max_pending_verifications = max_pending;
    boost::asio::io_context io;
    dnnlab::server::Server srv(io, o);
    srv.start();
    std::thread io_thread([&] { io.run(); });

    auto posted = dnnlab::server::http_request(
        srv.url(), "POST", "/api/experiments",
        json{{"spec", sweep_text(trials, limit_train, metric, shuffle)},
             {"name", "verify-bench.yaml"}}
            .dump(),
        srv.token());
    if (posted.status != 202) throw std::runtime_error("submit: " + posted.body);
    const std::int64_t exp = json::parse(posted.body)["id"];

    std::vector<std::vector<BrowserResult>> results(clients);
    std::vector<std::string> workers(clients);
    std::vector<std::thread> threads;
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < clients; ++c)
      threads.emplace_back([&, c] {
        try {
          HonestBrowser b(srv.port(), srv.join_token(), o.store_url,
                          "127.0.2." + std::to_string(c + 1));
          workers[c] = b.worker_id();
          results[c] = b.work(exp, std::chrono::steady_clock::now() + std::chrono::minutes(20));
        } catch (const std::exception& e) {
          std::fprintf(stderr, "client %d: %s\n", c, e.what());
        }
      });
    for (auto& t : threads) t.join();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Every re-run decided (the experiment finishes only then), then read.
    auto st = dnnlab::store::open_result_store(o.store_url);
    std::map<std::pair<std::string, std::int64_t>, double> verify_cpu;  // (worker, trial)
    bool disagreed = false;
    for (const auto& e : st->events_of_type("trial.verified")) {
      verify_cpu[{e.data.value("worker", ""), e.data.value("trial", std::int64_t{0})}] +=
          e.data.value("cpu_seconds", 0.0);
      disagreed |= !e.data.value("agree", true);
    }
    const int skip = o.gateway.trust_after;
    Totals all, steady;
    for (int c = 0; c < clients; ++c)
      for (std::size_t i = 0; i < results[c].size(); ++i) {
        const auto& r = results[c][i];
        auto it = verify_cpu.find({workers[c], r.trial});
        for (Totals* t : {&all, i >= static_cast<std::size_t>(skip) ? &steady : nullptr}) {
          if (!t) continue;
          ++t->results;
          t->trial_cpu += r.cpu_seconds;
          if (it != verify_cpu.end()) {
            ++t->verified;
            t->verify_cpu += it->second;
          }
        }
      }
    std::printf(
        "verify_bench: %d clients, %d trials (%d train samples, 2 epochs), "
        "--verify-fraction %.3g, --trust-after %d, --max-pending-verifications %d; %.1f s wall\n",
        clients, trials, limit_train, o.verify_fraction, skip, o.gateway.max_pending_verifications,
        wall);
    for (int c = 0; c < clients; ++c)
      std::printf("  client %d (%s): %zu results\n", c, workers[c].c_str(), results[c].size());
    all.print("overall");
    steady.print("steady");
    if (disagreed) {
      std::printf("a re-run disagreed with an honest client\n");
      rc = 1;
    }
    if (all.results != trials) {
      std::printf("%d of %d trials came back\n", all.results, trials);
      rc = 1;
    }
    boost::asio::post(io, [&] { srv.stop(); });
    io_thread.join();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "verify_bench: %s\n", e.what());
    rc = 1;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return rc;
}
