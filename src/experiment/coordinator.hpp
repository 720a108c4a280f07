// Coordinator: drives one experiment (a sweep) through the TaskQueue and the
// ResultStore. It turns sampler output into trials and queued tasks, keeps
// enough tasks in flight, feeds finished results back to adaptive samplers
// (TPE), and marks the experiment finished when every trial has ended (failed
// when every one of them failed). All
// its state can be rebuilt from the store, so a restarted coordinator (or
// `dnnlab run --resume`) continues where the last one stopped.
//
//   auto b = experiment::open_backends("sqlite:dnnlab.db", "sqlite:dnnlab.db");  // backends.hpp
//   int64_t id = experiment::Coordinator::submit(*b.store, *b.queue, yaml, "sweep.yaml");
//   experiment::Coordinator c(*b.store, *b.queue, id);
//   while (!c.tick().done) sleep(100ms);   // workers run the tasks meanwhile
//
// Single-threaded: call tick() from one thread (a timer on the server's
// io_context, or the main loop of `dnnlab run`).
//
// One coordinator per experiment, across processes: each holds a lease in
// the store (ResultStore::acquire_coordinator) that tick() renews. A second
// Coordinator of the same experiment (a second `dnnlab run` of the sweep, a
// server) creates no trials; its tick() reports (Progress::coordinating is
// false) until the first one releases the lease (destroyed) or lets it
// expire (killed), and then takes over, rebuilt from the store.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "queue/task_queue.hpp"
#include "store/result_store.hpp"
#include "sweep/sampler.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::experiment {

struct Progress {
  store::TrialCounts counts;
  int64_t planned = 0;           // trials the sweep will run in all (Sampler::planned)
  bool done = false;             // every planned trial has ended
  double trials_per_second = 0;  // ended trials per second, recent average
  std::optional<store::TrialRecord> best;
  // False when another coordinator holds the experiment (`coordinator` names
  // it): this one then only reports, and takes over if that one stops.
  bool coordinating = false;
  std::string coordinator;
};

// What submit() does when the store already holds an experiment with the
// same name and spec text.
enum class SubmitMode {
  kNew,           // creates another experiment all the same
  kResumeIfSame,  // returns it if it is still running, else creates another
  kReuseIfSame,   // returns it unless it was cancelled: running, it is resumed;
                  // finished or failed, the caller shows its results (`dnnlab run`)
};

class Coordinator {
 public:
  // Validates the sweep text (SpecError, nothing written, when it is bad) and
  // creates the experiment; with kResumeIfSame (kReuseIfSame) returns the
  // newest experiment with the same name and spec text instead when it is
  // unfinished (not cancelled), if there is one.
  static int64_t submit(store::ResultStore& store, queue::TaskQueue& queue,
                        const std::string& sweep_text, const std::string& path,
                        SubmitMode mode = SubmitMode::kResumeIfSame);
  // The writing half of submit(kNew), for a sweep already parsed from
  // `sweep_text` (a server parses on a worker thread, then writes here).
  static int64_t create(store::ResultStore& store, const sweep::SweepSpec& sweep,
                        const std::string& sweep_text, const std::string& path);

  // Takes the experiment's coordinator lease if it is free, and then
  // rebuilds sampler state from the store (the trials it already holds).
  // `holder` names this coordinator in the lease (default: host-pid-n).
  Coordinator(store::ResultStore& store, queue::TaskQueue& queue, int64_t experiment_id,
              std::string holder = {});
  // The same, with the experiment's sweep already parsed (not parsed again).
  Coordinator(store::ResultStore& store, queue::TaskQueue& queue, int64_t experiment_id,
              std::unique_ptr<sweep::SweepSpec> parsed, std::string holder);
  ~Coordinator();  // releases the lease

  // How long a coordinator that stopped ticking keeps the experiment.
  static constexpr std::chrono::duration<double> kCoordinatorLease{10.0};

  // Publishes new trials while fewer than `in_flight` are queued or running,
  // observes finished ones, fails the trials whose task died in the queue
  // (its dead letters), and finishes the experiment when all have ended.
  Progress tick(int64_t in_flight = 4);
  // Drops queued tasks, marks unfinished trials cancelled, the experiment cancelled.
  void cancel();

  int64_t experiment_id() const { return id_; }
  const std::string& holder() const { return holder_; }
  const sweep::SweepSpec& sweep() const { return *sweep_; }

 private:
  int64_t fail_dead_tasks();
  // Takes or renews the lease (a store write every kCoordinatorLease / 4);
  // rebuilds when it was not ours. False: another coordinator has it.
  bool hold();
  void rebuild();

  store::ResultStore& store_;
  queue::TaskQueue& queue_;
  int64_t id_;
  std::string holder_;
  bool holding_ = false;
  std::chrono::steady_clock::time_point renewed_;
  std::unique_ptr<sweep::SweepSpec> sweep_;
  std::unique_ptr<sweep::Sampler> sampler_;
  int64_t generated_ = 0;                 // trials created so far
  bool exhausted_ = false;                // the sampler has no more
  std::unordered_set<int64_t> observed_;  // trial ids already fed to the sampler
  std::chrono::steady_clock::time_point rate_t0_;
  int64_t rate_ended0_ = -1;
  double rate_ = 0;
};

}  // namespace dnnlab::experiment
