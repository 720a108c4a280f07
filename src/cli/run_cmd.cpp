// `dnnlab run SWEEP`: the embedded deployment. One process coordinates the
// sweep over an SQLite queue and store; N local worker processes (`dnnlab
// worker`) train the trials. Running the same command again, or --resume,
// continues an interrupted experiment; once it has finished, running it
// again shows its results (--new trains it again).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "cli/sweep_cmds.hpp"
#include "db/backend_url.hpp"
#include "experiment/backends.hpp"
#include "experiment/coordinator.hpp"
#include "nn/memory.hpp"
#include "server/server.hpp"
#include "sweep/sweep_spec.hpp"

extern char** environ;

namespace dnnlab::cli {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

struct RunOptions {
  std::string sweep_path;
  std::string store_url = kDefaultDb, broker_url;
  std::string data_dir;
  std::string resume;
  bool fresh = false;
  int workers = 0;
  double lease = 30;
  bool quiet = false;
  std::string listen = "127.0.0.1:8080";
  bool no_server = false;
  bool serve_after = false;      // keep the dashboard up once the sweep has ended
  std::string max_memory;        // "": this machine's memory / workers
  server::ServerOptions server;  // limits, origins, hosts, private reads
};

// `dnnlab run`'s exit status when the sweep ended with failed trials (the
// others' results are kept); docs/errors.md lists every code.
constexpr int kExitTrialsFailed = 6;

// Refuses a sweep whose largest trial would not fit in the memory one worker
// may use, before any worker starts (each would fail it, or be killed).
void check_memory(const sweep::SweepSpec& sw, const RunOptions& o) {
  const sweep::LargestTrial t = sweep::largest_trial(sw);
  const int64_t limit = max_memory_bytes(o.max_memory, o.workers);
  if (t.memory.total() <= limit) return;
  const std::string params = sweep::describe_params(t.params);
  throw UsageError("the sweep's largest trial" + (params.empty() ? "" : " (" + params + ")") +
                   " needs an estimated " + nn::format_bytes(t.memory.total()) + " (" +
                   t.memory.describe(t.batch_size) + "), more than the limit of " +
                   nn::format_bytes(limit) +
                   memory_limit_source(o.max_memory, o.workers, "worker") +
                   "; narrow the search, use fewer --workers, or raise --max-memory");
}

// Failed trials by reason (the first line of their error), most common first.
std::string failure_summary(store::ResultStore& st, int64_t exp) {
  store::TrialQuery q;
  q.status = store::TrialStatus::failed;
  q.limit = 0;
  std::map<std::string, int64_t> reasons;
  for (const store::TrialRecord& t : st.trials(exp, q)) {
    std::string why = t.error.substr(0, t.error.find('\n'));
    if (why.size() > 300) why = why.substr(0, 300) + "...";
    ++reasons[why.empty() ? "(no reason recorded)" : why];
  }
  std::vector<std::pair<int64_t, std::string>> sorted;
  for (auto& [why, n] : reasons) sorted.emplace_back(-n, why);
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (auto& [n, why] : sorted) out += "  " + std::to_string(-n) + " x " + why + "\n";
  return out;
}

// The dashboard and REST API on their own thread (with their own store
// connection) while this thread coordinates.
class DashboardThread {
 public:
  DashboardThread(const RunOptions& o, int64_t exp) {
    server::ServerOptions so = o.server;
    so.listen = o.listen;
    so.store_url = o.store_url;
    so.broker_url = o.broker_url;
    so.web_root = find_web_root();
    so.run_coordinators = false;  // this process coordinates its experiment
    so.data_dir = o.data_dir;
    try {
      srv_ = std::make_unique<server::Server>(io_, so);
    } catch (const std::exception& e) {  // port taken: any free one will do
      so.listen = server::parse_listen(o.listen).first + ":0";
      srv_ = std::make_unique<server::Server>(io_, so);
    }
    srv_->adopt(exp);
    srv_->start();
    thread_ = std::thread([this] {
      for (;;) try {
          io_.run();
          return;
        } catch (const std::exception& e) {
          std::cerr << "dashboard: " << e.what() << "\n";
        }
    });
  }
  ~DashboardThread() {
    boost::asio::post(io_, [this] { srv_->stop(); });
    thread_.join();
  }
  // Carries the read token with --private-reads, never the write token.
  std::string url() const { return srv_->dashboard_url() + "#/experiments/"; }
  const server::Server& server() const { return *srv_; }

 private:
  boost::asio::io_context io_;
  std::unique_ptr<server::Server> srv_;
  std::thread thread_;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw SpecError({path, 0, 0}, "", "cannot read the sweep file");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

pid_t spawn_worker(const RunOptions& o, int64_t exp, int n) {
  // The URLs go in the environment, not on the command line (sweep_cmds.hpp).
  std::vector<std::string> args = {"dnnlab",
                                   "worker",
                                   "--experiment",
                                   std::to_string(exp),
                                   "--lease",
                                   std::to_string(o.lease),
                                   "--id",
                                   "local-" + std::to_string(getpid()) + "-" + std::to_string(n),
                                   "--exit-with-parent",
                                   std::to_string(getpid())};
  if (!o.data_dir.empty()) args.insert(args.end(), {"--data", o.data_dir});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  const auto env = worker_environment(o.store_url, o.broker_url, envp);
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) != 0)
    throw std::runtime_error("cannot start a worker process");
  return pid;
}

std::string progress_line(const experiment::Progress& p, double elapsed,
                          const std::string& metric) {
  const auto& c = p.counts;
  const int64_t ended = c.finished + c.pruned + c.failed + c.cancelled;
  char buf[320];
  const double eta = p.trials_per_second > 0 ? (p.planned - ended) / p.trials_per_second : -1;
  std::snprintf(buf, sizeof buf,
                "[%s] %lld/%lld done  %lld running  %lld queued  %lld pruned  %lld failed  %.2f "
                "trials/s  ETA %s",
                format_duration(elapsed).c_str(), static_cast<long long>(ended),
                static_cast<long long>(p.planned), static_cast<long long>(c.running),
                static_cast<long long>(c.queued), static_cast<long long>(c.pruned),
                static_cast<long long>(c.failed), p.trials_per_second,
                format_duration(eta).c_str());
  std::string s = buf;
  if (p.best)
    if (auto v = store::metric(p.best->metrics, metric)) {
      std::snprintf(buf, sizeof buf, "  best %s %.4f (trial %lld)", metric.c_str(), *v,
                    static_cast<long long>(p.best->id));
      s += buf;
    }
  return s;
}

// The end of a sweep: the best trials, the failures by reason, the exit status.
int print_outcome(store::ResultStore& st, int64_t exp, const sweep::SweepSpec& sw) {
  print_best_table(st, exp, sw.search.metric, sw.search.maximize(), 10);
  const store::TrialCounts counts = st.trial_counts(exp);
  if (counts.failed > 0) {
    std::cerr << counts.failed << " of " << counts.total() << " trials failed:\n"
              << failure_summary(st, exp) << "(`dnnlab results " << exp
              << " --csv --top 0` shows each trial's error)\n";
    return kExitTrialsFailed;
  }
  return 0;
}

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// --serve-after: the finished study stays browsable (plots, trial pages,
// downloads) until Ctrl-C.
void serve_until_stopped(const DashboardThread& dashboard, int64_t exp) {
  catch_stop_signals();
  std::cerr << "serving the finished study at " << dashboard.url() << exp << " until Ctrl-C\n";
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

int run_sweep(RunOptions o) {
  if (o.broker_url.empty()) o.broker_url = o.store_url;
  if (o.workers <= 0)
    o.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  experiment::Backends b = experiment::open_backends(o.broker_url, o.store_url);
  int64_t exp;
  if (o.resume.empty()) check_memory(sweep::load_sweep(o.sweep_path), o);
  if (!o.resume.empty()) {
    exp = find_experiment(*b.store, o.resume);
    b.store->set_status(exp, store::ExperimentStatus::running);
  } else {
    exp = experiment::Coordinator::submit(
        *b.store, *b.queue, read_file(o.sweep_path), o.sweep_path,
        o.fresh ? experiment::SubmitMode::kNew : experiment::SubmitMode::kReuseIfSame);
    // The same sweep ran to its end before: its results, not a second study.
    const auto e = b.store->experiment(exp);
    if (e && (e->status == store::ExperimentStatus::finished ||
              e->status == store::ExperimentStatus::failed)) {
      const sweep::SweepSpec sw = sweep::parse_sweep(e->spec_text, e->spec_path);
      std::cerr << "experiment " << exp << " (" << sw.name << ") ran this sweep to its end ("
                << store::to_string(e->status) << "): its results below; `dnnlab run --new "
                << o.sweep_path << "` trains it again as a new experiment\n";
      const int outcome = print_outcome(*b.store, exp, sw);
      if (o.serve_after && !o.no_server) serve_until_stopped(DashboardThread(o, exp), exp);
      return outcome;
    }
  }
  experiment::Coordinator coord(*b.store, *b.queue, exp);
  const auto& sw = coord.sweep();
  const bool tty = isatty(STDERR_FILENO);
  if (!o.quiet)
    std::cerr << "experiment " << exp << " (" << sw.name << "): " << sw.search.method << " search, "
              << o.workers << " workers, store " << backend_url::redact(o.store_url) << "\n";

  std::unique_ptr<DashboardThread> dashboard;
  if (!o.no_server) {
    dashboard = std::make_unique<DashboardThread>(o, exp);
    if (!o.quiet) std::cerr << "dashboard: " << dashboard->url() << exp << "\n";
    if (!o.quiet && dashboard->server().token_is_new())
      std::cerr << "write token (kept in " << dashboard->server().token_file()
                << "): " << dashboard->server().token() << "\n";
    if (!o.quiet && dashboard->server().read_token_is_new())
      std::cerr << "read token (kept in " << dashboard->server().read_token_file()
                << "): " << dashboard->server().read_token() << "\n";
    if (!o.quiet) std::cerr << "browsers join at " << dashboard->server().join_url() << "\n";
  }

  catch_stop_signals();

  std::vector<pid_t> workers;
  for (int i = 0; i < o.workers; ++i) workers.push_back(spawn_worker(o, exp, i));
  int spawned = o.workers;

  const auto t0 = std::chrono::steady_clock::now();
  auto last_print = t0 - std::chrono::hours(1);
  experiment::Progress p;
  bool coordinating = true;
  while (!g_stop) {
    p = coord.tick(2 * o.workers);
    if (!p.done && p.coordinating != coordinating) {  // even with -q: it explains the wait
      coordinating = p.coordinating;
      std::cerr << (tty ? "\r\033[K" : "") << "experiment " << exp
                << (coordinating ? ": took over coordinating it\n"
                                 : " is coordinated by another process (" + p.coordinator +
                                       "); this run adds its workers and takes over if that one "
                                       "stops\n");
    }
    // Keep N workers: a crashed one is replaced; its trial comes back when the lease expires.
    for (auto& pid : workers) {
      int status = 0;
      if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
        pid = p.done ? -1 : spawn_worker(o, exp, spawned++);
        if (!o.quiet && !p.done && tty) std::cerr << "\r\033[K";
        if (!o.quiet && !p.done)
          std::cerr << "a worker exited (status " << status << "); started another\n";
      }
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!o.quiet && (p.done || std::chrono::steady_clock::now() - last_print >
                                   std::chrono::milliseconds(tty ? 250 : 5000))) {
      const std::string line = progress_line(p, elapsed, sw.search.metric);
      std::cerr << (tty ? "\r\033[K" : "") << line << (tty ? "" : "\n") << std::flush;
      last_print = std::chrono::steady_clock::now();
    }
    if (p.done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!o.quiet && tty) std::cerr << "\n";
  // Workers stop by themselves once the experiment has ended; on Ctrl-C they
  // give their trials back first.
  for (pid_t pid : workers)
    if (pid > 0 && g_stop) kill(pid, SIGTERM);
  for (pid_t pid : workers)
    if (pid > 0) waitpid(pid, nullptr, 0);
  if (g_stop) {
    std::cerr << "interrupted: experiment " << exp << " keeps its results; continue with ";
    if (!o.sweep_path.empty()) std::cerr << "`dnnlab run " << o.sweep_path << "` or ";
    std::cerr << "`dnnlab run --resume " << exp << "`\n";
    return 130;
  }
  const int outcome = print_outcome(*b.store, exp, sw);
  if (dashboard && o.serve_after) serve_until_stopped(*dashboard, exp);
  return outcome;
}

}  // namespace

Command add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* c = app.add_subcommand(
      "run", "Run a sweep on this machine: coordinator plus local worker processes");
  c->add_option("sweep", o->sweep_path, "Sweep file (YAML); see docs/sweep.md");
  c->add_option("-w,--workers", o->workers, "Worker processes (default: number of cores)")
      ->check(whole_number(1, INT32_MAX));
  c->add_option("--store", o->store_url, "Result store URL (sqlite:PATH, postgres://...)")
      ->capture_default_str();
  c->add_option("--broker", o->broker_url,
                "Task queue URL (sqlite:PATH, amqp[s]://...); default: the store URL");
  c->add_option("--data", o->data_dir, "Data set directory override");
  c->add_option("--resume", o->resume,
                "Continue experiment ID (or name) instead of reading a sweep file");
  c->add_flag("--new", o->fresh,
              "Start a new experiment even if one with the same sweep exists (by default an "
              "unfinished one is resumed and a finished one's results are shown)");
  c->add_option("--lease", o->lease, "Seconds a worker holds a trial between heartbeats")
      ->check(number_in(1, 3600));
  c->add_flag("-q,--quiet", o->quiet, "No progress line");
  c->add_option("--listen", o->listen, "Dashboard and REST API address (a busy port: any free one)")
      ->capture_default_str();
  c->add_flag("--no-server", o->no_server, "Do not serve the dashboard");
  c->add_flag("--serve-after", o->serve_after,
              "Keep serving the dashboard after the sweep ends, until Ctrl-C (the exit status "
              "is still the sweep's); later, `dnnlab serve` on the same --store serves it too");
  c->add_option("--max-memory", o->max_memory,
                "Refuse a sweep whose largest trial needs more memory than this per worker, "
                "e.g. 4G (default: this machine's memory divided by --workers)")
      ->check(memory_size());
  c->footer(
      "Exit status: 0 every trial finished (or was pruned); 2 bad sweep file or usage, or the "
      "largest trial is over --max-memory; 6 the sweep ended with failed trials (counted by "
      "reason on stderr); 130 interrupted (Ctrl-C); 1 any other error. See docs/errors.md.");
  c->add_flag("!--private-reads", o->server.public_reads,
              "Require a token for reads (the dashboard URL printed carries the read token)");
  add_limit_flags(c, o->server);
  add_tls_flags(c, o->server);
  c->callback([c, o] {
    if (o->sweep_path.empty() && o->resume.empty())
      throw CLI::RequiredError("sweep (or --resume EXP)");
  });
  return [o] { return run_sweep(*o); };
}

}  // namespace dnnlab::cli
