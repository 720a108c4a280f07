// `dnnlab worker`: one worker process; local ones are started by `dnnlab run`.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/sweep_cmds.hpp"
#include "worker/worker_loop.hpp"

namespace dnnlab::cli {
namespace {
// Lock-free, hence async-signal-safe; see WorkerOptions::stop.
static_assert(std::atomic<bool>::is_always_lock_free);
std::atomic<bool> g_worker_stop{false};
void on_worker_signal(int) {
  g_worker_stop.store(true, std::memory_order_relaxed);
}
}  // namespace

Command add_worker(CLI::App& app) {
  auto o = std::make_shared<worker::WorkerOptions>();
  o->store_url = kDefaultDb;
  CLI::App* c =
      app.add_subcommand("worker", "Lease trials from running experiments and train them");
  c->add_option("--store", o->store_url, "Result store URL")->capture_default_str();
  c->add_option("--broker", o->broker_url, "Task queue URL (default: the store's)");
  c->add_option("--experiment", o->experiment, "Serve only this experiment (id); exit when it ends")
      ->check(whole_number(1));
  c->add_option("--id", o->worker_id, "Worker id (default: host-pid)");
  c->add_option("--data", o->data_dir, "Data set directory override");
  c->add_option("--lease", o->lease_seconds, "Lease length in seconds")->check(number_in(1, 3600));
  c->add_option("--idle-exit", o->idle_exit_seconds, "Exit after this many idle seconds (0: never)")
      ->check(number_in(0, 1e9));
  c->add_flag("-v,--verbose", o->verbose, "Log each trial");
  auto parent = std::make_shared<int64_t>(0);
  c->add_option("--exit-with-parent", *parent,
                "Stop (giving the trial back) when process PID exits")
      ->check(whole_number(1, INT32_MAX))
      ->group("");  // set by `dnnlab run` for its local workers
  return [o, parent] {
    if (o->broker_url.empty()) o->broker_url = o->store_url;
    // A worker for an experiment that does not exist would end at once with
    // nothing done and exit 0: say so instead.
    if (o->experiment > 0 && !store::open_result_store(o->store_url)->experiment(o->experiment))
      throw UsageError("--experiment: no experiment with id " + std::to_string(o->experiment) +
                       " in " + o->store_url + " (see `dnnlab status`)");
    struct sigaction sa {};
    sa.sa_handler = on_worker_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    o->stop = &g_worker_stop;
    if (*parent > 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != static_cast<pid_t>(*parent)) return 0;  // the parent is already gone
    }
    const int64_t n = worker::run_worker(*o);
    if (o->verbose) std::cerr << "worker: " << n << " trials ended\n";
    return 0;
  };
}

}  // namespace dnnlab::cli
