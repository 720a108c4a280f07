// `dnnlab worker`: the process that trains trials, on this machine (started
// by `dnnlab run`) or on any other that reaches the broker and the store.
//
//   dnnlab worker --slots 8 --broker amqp://dnnlab:PW@queue-host/%2f
//                 --store postgres://dnnlab:PW@db-host/dnnlab   (one line)
//
// `--slots N` runs N trials at once on this host as N worker processes (this
// one supervises them): each has its own broker and store connections, its
// own lease keeper and its own row in `dnnlab status` (ID-0 … ID-N-1), so a
// crash or a lost connection costs one trial, never the host's N. A slot
// killed by a signal is started again; Ctrl-C / SIGTERM stops them all, each
// giving its trial back.
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/sweep_cmds.hpp"
#include "db/backend_url.hpp"
#include "nn/memory.hpp"
#include "store/result_store.hpp"
#include "sweep/sweep_spec.hpp"
#include "worker/worker_loop.hpp"

extern char** environ;

namespace dnnlab::cli {
namespace {
// Lock-free, hence async-signal-safe; see WorkerOptions::stop.
static_assert(std::atomic<bool>::is_always_lock_free);
std::atomic<bool> g_worker_stop{false};
void on_worker_signal(int) {
  g_worker_stop.store(true, std::memory_order_relaxed);
}

// A worker loop holds the trial it trains and leases the next one before it
// acks the last (the end and the next lease are written together), so it
// needs a broker prefetch of 2: with 1 it would wait for a push after every
// trial. Only amqp[s]:// URLs take `prefetch`; one the user set is kept.
std::string with_default_prefetch(const std::string& url) {
  if (url.rfind("amqp://", 0) != 0 && url.rfind("amqps://", 0) != 0) return url;
  const auto q = url.find('?');
  if (q != std::string::npos && (url.find("?prefetch=", q) != std::string::npos ||
                                 url.find("&prefetch=", q) != std::string::npos))
    return url;
  return url + (q == std::string::npos ? "?" : "&") + "prefetch=2";
}

}  // namespace

std::vector<std::string> worker_environment(const std::string& store_url,
                                            const std::string& broker_url,
                                            std::vector<char*>& pointers) {
  std::vector<std::string> env;
  const std::string store_key = std::string(kStoreUrlEnv) + "=";
  const std::string broker_key = std::string(kBrokerUrlEnv) + "=";
  for (char** e = environ; *e; ++e) {
    const std::string_view v(*e);
    if (v.rfind(store_key, 0) != 0 && v.rfind(broker_key, 0) != 0) env.emplace_back(v);
  }
  env.push_back(store_key + store_url);
  env.push_back(broker_key + broker_url);
  pointers.clear();
  for (auto& s : env) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return env;
}

namespace {

std::string default_worker_id() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + "-" + std::to_string(getpid());
}

// Starts slot `k` of `o`: this binary as a one-slot worker that exits with us.
pid_t spawn_slot(const worker::WorkerOptions& o, int k) {
  std::vector<std::string> args = {"dnnlab",
                                   "worker",
                                   "--id",
                                   o.worker_id + "-" + std::to_string(k),
                                   "--lease",
                                   std::to_string(o.lease_seconds),
                                   "--idle-exit",
                                   std::to_string(o.idle_exit_seconds),
                                   "--exit-with-parent",
                                   std::to_string(getpid())};
  if (o.experiment > 0) args.insert(args.end(), {"--experiment", std::to_string(o.experiment)});
  if (!o.data_dir.empty()) args.insert(args.end(), {"--data", o.data_dir});
  if (o.verbose) args.push_back("-v");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  const auto env = worker_environment(o.store_url, o.broker_url, envp);
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) != 0)
    throw std::runtime_error("worker --slots: cannot start slot " + std::to_string(k));
  return pid;
}

// Refuses an experiment whose largest trial needs more than the memory one
// slot may use.
void check_memory(const store::ExperimentRecord& e, const std::string& max_memory, int64_t slots) {
  const sweep::LargestTrial t = sweep::largest_trial(sweep::parse_sweep(e.spec_text, e.spec_path));
  const int64_t limit = max_memory_bytes(max_memory, slots);
  if (t.memory.total() <= limit) return;
  const std::string params = sweep::describe_params(t.params);
  throw UsageError("experiment " + std::to_string(e.id) + "'s largest trial" +
                   (params.empty() ? "" : " (" + params + ")") + " needs an estimated " +
                   nn::format_bytes(t.memory.total()) + " (" + t.memory.describe(t.batch_size) +
                   "), more than the limit of " + nn::format_bytes(limit) +
                   memory_limit_source(max_memory, slots, "slot"));
}

// Supervises `slots` one-slot workers until all have exited; 0 when each
// exited 0 (stopped, idle or its experiment ended).
int run_slots(const worker::WorkerOptions& o, int slots) {
  std::vector<pid_t> pids;
  for (int k = 0; k < slots; ++k) pids.push_back(spawn_slot(o, k));
  int live = slots, code = 0;
  bool forwarded = false;
  while (live > 0) {
    if (g_worker_stop.load(std::memory_order_relaxed) && !forwarded) {
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGTERM);
      forwarded = true;
    }
    int status = 0;
    // Polled, not blocking: a signal between the check above and a blocking
    // waitpid would be forwarded only when some slot ends on its own.
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0 || (pid < 0 && errno == EINTR)) {
      usleep(100'000);
      continue;
    }
    if (pid < 0) break;
    for (int k = 0; k < slots; ++k) {
      if (pids[k] != pid) continue;
      // Killed (the OOM killer, a stray kill): its trial comes back through
      // the broker; keep the host's slot count. An exit code is the worker's
      // own verdict (a bad URL, the experiment gone): starting it again
      // would only repeat it.
      if (WIFSIGNALED(status) && !g_worker_stop.load(std::memory_order_relaxed)) {
        std::cerr << "worker: slot " << k << " killed by signal " << WTERMSIG(status)
                  << "; started again\n";
        sleep(1);
        pids[k] = spawn_slot(o, k);
        break;
      }
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !(WIFSIGNALED(status) && forwarded))
        code = 1;
      pids[k] = -1;
      --live;
    }
  }
  return code;
}
}  // namespace

Command add_worker(CLI::App& app) {
  auto o = std::make_shared<worker::WorkerOptions>();
  o->store_url = kDefaultDb;
  CLI::App* c =
      app.add_subcommand("worker", "Lease trials from running experiments and train them");
  c->add_option("--store", o->store_url,
                "Result store URL (sqlite:PATH, postgres://...); or from $DNNLAB_STORE_URL, which "
                "keeps a password off the command line")
      ->envname(kStoreUrlEnv)
      ->capture_default_str();
  c->add_option("--broker", o->broker_url,
                "Task queue URL (sqlite:PATH, amqp[s]://...); default: the store URL; or from "
                "$DNNLAB_BROKER_URL")
      ->envname(kBrokerUrlEnv);
  c->add_option("--experiment", o->experiment, "Serve only this experiment (id); exit when it ends")
      ->check(whole_number(1));
  c->add_option("--id", o->worker_id, "Worker id (default: host-pid; slot k adds -k)");
  auto slots = std::make_shared<int64_t>(1);
  c->add_option("--slots", *slots, "Trials trained at once on this host (one process each)")
      ->check(whole_number(1, 1024))
      ->capture_default_str();
  c->add_option("--data", o->data_dir, "Data set directory override");
  c->add_option("--lease", o->lease_seconds, "Lease length in seconds")->check(number_in(1, 3600));
  c->add_option("--idle-exit", o->idle_exit_seconds, "Exit after this many idle seconds (0: never)")
      ->check(number_in(0, 1e9));
  c->add_flag("-v,--verbose", o->verbose, "Log each trial");
  auto max_memory = std::make_shared<std::string>();
  c->add_option("--max-memory", *max_memory,
                "With --experiment: refuse (exit 2) when its largest trial needs more memory than "
                "this per slot, e.g. 4G (default: this machine's memory divided by --slots)")
      ->check(memory_size());
  auto parent = std::make_shared<int64_t>(0);
  c->add_option("--exit-with-parent", *parent,
                "Stop (giving the trial back) when process PID exits")
      ->check(whole_number(1, INT32_MAX))
      ->group("");  // set by `dnnlab run` and `--slots` for the workers they start
  return [o, parent, slots, max_memory] {
    if (o->broker_url.empty()) o->broker_url = o->store_url;
    o->broker_url = with_default_prefetch(o->broker_url);
    if (o->experiment > 0) {
      // A worker for an experiment that does not exist would end at once with
      // nothing done and exit 0: say so instead.
      const auto e = store::open_result_store(o->store_url)->experiment(o->experiment);
      if (!e)
        throw UsageError("--experiment: no experiment with id " + std::to_string(o->experiment) +
                         " in " + backend_url::redact(o->store_url) + " (see `dnnlab status`)");
      // Trials too large for this host would fail one by one (or be killed
      // by the OOM killer, and come back): refuse them here, before leasing.
      // A process started by `run` or `--slots` was checked by its parent.
      if (*parent == 0) check_memory(*e, *max_memory, *slots);
    }
    struct sigaction sa {};
    sa.sa_handler = on_worker_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    o->stop = &g_worker_stop;
    if (*parent > 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != static_cast<pid_t>(*parent)) return 0;  // the parent is already gone
    }
    if (*slots > 1) {
      if (o->worker_id.empty()) o->worker_id = default_worker_id();
      return run_slots(*o, static_cast<int>(*slots));
    }
    const int64_t n = worker::run_worker(*o);
    if (o->verbose) std::cerr << "worker: " << n << " trials ended\n";
    return 0;
  };
}

}  // namespace dnnlab::cli
