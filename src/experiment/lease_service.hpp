// The lease service: the one owner of a trial's life on whoever runs it. A
// native worker (worker/worker_loop.cpp), the browser gateway's ticket desk
// (server/gateway_tickets.cpp) and anything later that runs units of work
// are adapters of it: they decide when to lease and where the training
// happens; every rule about what a lease, an epoch, an end or a give-back
// does to the queue and the store is here, once.
//
//   experiment::Catalogue cat(store);
//   experiment::LeaseService svc(store, queue, cat, {});
//   experiment::TrialLease l;
//   if (svc.lease(exp_id, "w1", 30, l) == LeaseService::Got::kLeased &&
//       svc.start(l, data.provenance)) {
//     for (each epoch m)
//       if (!svc.report_epoch(l, m, /*counts=*/true).go) { pruned = true; break; }
//     svc.finish(std::move(l), pruned ? TrialStatus::pruned : TrialStatus::finished, metrics);
//   }
//   svc.commit();  // the ends and buffered epochs in one batch, then their acks
//
// A lease's life:
//   lease      queue lease -> decode the task -> the trial still waits (read
//              only when the task carries no values) -> run spec resolved.
//              An unreadable task is dead-lettered, a duplicate acked, a
//              trial whose spec cannot be resolved failed: none is handed out.
//   start      mark_running under this worker; refused (a duplicate, a newer
//              attempt owns it, the trial is gone): the task is acked.
//   epoch      written (buffered up to kFlushRows / kFlushSeconds, at once
//              when the scheduler compares trials) and judged by the
//              experiment's SchedulerFeed. A refused epoch: the lease is lost.
//   finish     the end (and the held-back last epoch) written at commit(),
//              then the task acked: acked only once its result is stored.
//   give_back  not the trial's fault (a worker stopping, a browser leaving):
//              the trial goes back to the queue as a newer attempt without
//              spending one of the queue's max_attempts.
//   lost       someone else owns it now: nothing written, nothing acked.
//
// Not thread-safe: one per thread, with that thread's store and queue.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiment/catalogue.hpp"
#include "queue/task_queue.hpp"
#include "store/result_store.hpp"

namespace dnnlab::experiment {

// A leased trial, its spec resolved.
struct TrialLease {
  queue::TaskLease task;     // the queue's lease
  int attempt = 0;           // the store attempt it runs
  store::TrialRecord trial;  // id, experiment_id, index, config_json, seed
  std::string worker;        // who runs it (the queue lease's and the store's holder)
  nn::RunSpec run;
  bool started = false;                           // mark_running accepted it
  std::optional<store::EpochMetrics> last_epoch;  // held back, written with the end
};

struct LeaseServiceOptions {
  // Hold a trial's last epoch back and write it with its end (one commit
  // fewer per trial); false writes it like the others.
  bool hold_last_epoch = true;
  // Called before the service lets go of a lease (ack, nack, lost): a
  // LeaseKeeper that extends leases on its own stops extending it.
  std::function<void(const queue::TaskLease&)> on_release;
};

class LeaseService {
 public:
  LeaseService(store::ResultStore& store, queue::TaskQueue& queue, Catalogue& catalogue,
               LeaseServiceOptions options);

  enum class Got {
    kNone,     // nothing queued for this experiment
    kSkipped,  // the task needed no training and is done with (see above)
    kLeased,   // `out` holds the lease, not started yet
  };
  // Leases the next task of the experiment for `worker_id`, for `seconds`.
  // Throws std::invalid_argument when the experiment is gone.
  Got lease(std::int64_t experiment_id, const std::string& worker_id, double seconds,
            TrialLease& out);

  // mark_running with the provenance of the data it trains on. False: the
  // task was acked and the lease is done with.
  bool start(TrialLease& l, const nlohmann::json& provenance);
  // start() for many in one store batch (one commit); refused ones are
  // acked. The answers in order.
  std::vector<bool> start_all(const std::vector<TrialLease*>& leases,
                              const std::vector<const nlohmann::json*>& provenance);

  struct Verdict {
    bool go = true;     // false: the scheduler stops it (pruned)
    bool lost = false;  // the store refused the epoch: a newer attempt owns the trial
  };
  // Records epoch `m` of a started trial and asks the experiment's
  // scheduler. `counts`: the value joins the scheduler's history (false for
  // a result that is provisional until verified). `write_now`: written
  // before the verdict, whatever the buffering.
  Verdict report_epoch(TrialLease& l, const store::EpochMetrics& m, bool counts,
                       bool write_now = false);
  // The buffered epochs, written now when kFlushRows or kFlushSeconds is
  // reached; false when one of `l`'s was refused (the lease is lost).
  bool flush_epochs_if_due(const TrialLease& l);

  // Extends the lease: false when it was lost.
  bool extend(TrialLease& l, double seconds);
  // A call on the holder's own connection (the broker hears from it).
  bool keep_alive(TrialLease& l);

  // Ends the trial: its end is written at the next commit() and then its
  // task is acked. `provisional`: the result does not count before a
  // re-run agreed with it (a browser's).
  // `weights`: the trained model as a safetensors file, offered to the
  // experiment's retention rule (weights_retention.hpp) once the end counted
  // (finished and not provisional only; empty: none).
  void finish(TrialLease&& l, store::TrialStatus status, const store::TrialMetrics& metrics,
              std::string error = {}, bool provisional = false, std::string weights = {});
  // Whether a trial ending with `metrics` could keep its weights now: ask
  // before serialising a model (no bytes moved for a trial the rule drops).
  // Against the experiment's kept files as read within the last second and
  // the trial's pin as read at its lease: a trial pinned while it trains
  // keeps its weights only if it ranks among the best K.
  bool wants_weights(const TrialLease& l, const store::TrialMetrics& metrics);
  // Offers a verified trial's weights to the experiment's retention rule
  // (the gateway, once a native re-run agreed). False: not kept. Store
  // errors are the caller's; a file over store::kMaxWeightsBytes throws
  // std::invalid_argument.
  bool offer_weights(std::int64_t experiment_id, std::int64_t trial_id,
                     std::string_view safetensors);
  // A trial that cannot run (its spec, its data): failed, counted once.
  void fail(TrialLease&& l, const std::string& error);
  // Writes the buffered epochs and the pending ends in one batch and acks
  // their tasks. Returns, per end since the last commit, whether it
  // counted (false: it had ended already or a newer attempt owns it). A
  // store that cannot be reached throws; everything stays pending.
  std::vector<bool> commit();
  bool pending() const { return !ends_.empty() || !epochs_.empty(); }

  // Not the trial's fault: back to the queue as a newer attempt (the task
  // is acked and published again, so no max_attempts is spent). Nothing
  // when the lease was lost.
  void give_back(const TrialLease& l);
  // Someone else owns the trial now: let go without writing anything.
  void lost(const TrialLease& l);

  // Fails a trial that waits in the queue (a browser's failure a native
  // re-run confirmed); its task, when leased, is then acked as a duplicate.
  void fail_queued(std::int64_t trial_id, const std::string& worker_id, const std::string& error);
  // Puts every ended trial these workers ran back in the queue as newer
  // attempts (their results are not to be trusted), dropping any weights
  // they kept. Returns how many.
  std::int64_t reopen_trials_of(const std::vector<std::string>& worker_ids);

  Catalogue& catalogue() { return catalogue_; }
  const LeaseServiceOptions& options() const { return o_; }

  // Epochs wait at most this long, or until there are this many: the
  // dashboard still sees progress within a second, and a worker training
  // many short epochs writes them a few hundred at a time.
  static constexpr double kFlushSeconds = 0.5;
  static constexpr std::size_t kFlushRows = 256;

 private:
  struct PendingEnd {
    TrialLease lease;
    store::TrialEnd end;
    bool provisional = false;
    std::string weights;
  };
  bool ack(const queue::TaskLease& t);
  bool nack(const queue::TaskLease& t, bool requeue, const std::string& why);
  bool flush_epochs(const TrialLease* l);
  bool epochs_due() const;

  store::ResultStore& store_;
  queue::TaskQueue& queue_;
  Catalogue& catalogue_;
  LeaseServiceOptions o_;
  std::vector<store::EpochWrite> epochs_;  // not written yet
  double epochs_since_ = 0;                // the last flush (steady seconds)
  std::vector<PendingEnd> ends_;           // written at commit()
  // Per experiment, its kept weights (no bytes) as last read, and when
  // (steady seconds): wants_weights() reads them at most once a second, not
  // once per trial (the cluster's trials/s fell 17% with a read per trial).
  struct KeptCache {
    double read_at = -1e9;
    std::vector<store::WeightsRecord> kept;
  };
  std::map<std::int64_t, KeptCache> kept_cache_;
};

}  // namespace dnnlab::experiment
