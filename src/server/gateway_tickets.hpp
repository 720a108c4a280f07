// Tickets: the gateway's adapter of the lease service
// (experiment/lease_service.hpp) for browser workers. A ticket is one lease
// of one trial, marked running in the store under the client's worker id
// and sent as a JSON spec plus a data shard URL; its epochs and end go
// through the service as a native worker's do (provisional until a native
// re-run agrees), and when the client goes away it is given back.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "experiment/catalogue.hpp"
#include "experiment/lease_service.hpp"
#include "queue/task_queue.hpp"
#include "server/gateway.hpp"
#include "server/gateway_assets.hpp"
#include "store/result_store.hpp"
#include "sweep/sampler.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::server {

// A result reported by the client, waiting for its weights frame.
struct PendingResult {
  store::TrialStatus status = store::TrialStatus::finished;
  store::TrialMetrics metrics;
};

struct Ticket {
  std::string id;
  experiment::TrialLease work;  // the lease (trial, attempt, spec) it runs
  double issued_at = 0;         // unix seconds: its lifetime counts from here
  int attempt = 0;
  std::int64_t trial_id = 0, experiment_id = 0, index = 0;
  std::int64_t num_params = 0;
  std::shared_ptr<const Shard> shard;             // its data, served while the ticket is held
  int epochs = 0;                                 // planned
  bool has_val = true;                            // the run holds out validation data
  int epochs_done = 0;                            // progress frames accepted
  bool stopped = false;                           // the verdict said stop (pruned)
  std::optional<store::EpochMetrics> last_epoch;  // the last progress accepted
  double seconds = 0;                             // the accepted epochs' seconds, summed
  std::optional<PendingResult> pending;
  // The client was last heard of (any message on the ticket; gateway clock),
  // and the gateway last renewed the queue lease (unix seconds).
  double heard_at = 0, renewed_at = 0;
  // Progress frames it may still send now (a token bucket) and when it was filled.
  double progress_tokens = 0, progress_filled_at = 0;
  // Its work cannot be copied from public curves: the trial's first attempt,
  // in an experiment whose sweep was not run before (gateway_trust.hpp).
  bool fresh = false;
};

// Who a ticket is leased for (what the trial's provenance records).
struct TicketHolder {
  std::string worker_id;
  std::string kernels = "wasm-simd128";  // the core build it runs
  std::optional<bool> fma;               // relaxed build: is its madd fused there
};

class TicketDesk {
 public:
  TicketDesk(store::ResultStore& store, queue::TaskQueue& queue, const GatewayOptions& opt,
             ShardCache& shards)
      : store_(store),
        opt_(opt),
        shards_(shards),
        catalogue_(store),
        svc_(store, queue, catalogue_, {false, {}}) {}

  // The experiment's scheduler feed (one per experiment, the catalogue's).
  experiment::SchedulerFeed& scheduler(std::int64_t id) { return *catalogue_.get(id).scheduler; }

  // Leases the next trial for `holder`: the ticket and its frame, or nullopt
  // when there is none. `preparing` is set when an experiment was passed
  // over because its data shard is still being built.
  std::optional<std::pair<Ticket, nlohmann::json>> next(const TicketHolder& holder,
                                                        bool& preparing);

  // Whether a trial with these final metrics would be among the
  // experiment's best `k` counted trials by its search metric (a new best, a
  // top-K place): then it changes what a user sees first, and is re-run
  // before it counts. Ties go to the counted trials (they are ranked; this
  // one would be shown beside them, never above): on a saturated metric
  // (val_acc 1.0) the top K fills with ties and the rest need no re-run.
  bool would_rank(std::int64_t experiment_id, std::int64_t trial_id, const store::TrialMetrics& m,
                  int k);

  // Extends the ticket's lease by opt.lease_seconds: false when it was lost.
  bool extend(Ticket& t) { return svc_.extend(t.work, opt_.lease_seconds); }
  // Records an accepted progress epoch (written at once) and asks the
  // experiment's scheduler, which judges it without keeping it: a
  // browser's numbers move nothing before a native re-run agreed.
  experiment::LeaseService::Verdict record_epoch(Ticket& t, const store::EpochMetrics& m) {
    return svc_.report_epoch(t.work, m, false, true);
  }
  // Ends the ticket's trial with the client's result, provisional, and
  // acks its lease: whether it counted (false: a newer attempt owns it).
  bool finish(Ticket& t, store::TrialStatus status, const store::TrialMetrics& m);

  // A verified trial's weights (a safetensors file) offered to its
  // experiment's retention rule; whether they are kept.
  bool offer_weights(std::int64_t experiment_id, std::int64_t trial_id, std::string_view file) {
    return svc_.offer_weights(experiment_id, trial_id, file);
  }

  // Gives the ticket's trial back (a browser going away is the client's
  // fault, not the trial's): the service's give_back. Nothing when the
  // lease was lost.
  void give_back(Ticket& t);

  // Ends a queued trial as failed: a browser's failure that a native re-run
  // confirmed. Its task, when leased, is then acked as a duplicate.
  void fail_for_good(std::int64_t trial_id, const std::string& worker_id, const std::string& error);

  // Puts every ended trial of these workers back in their queues, as newer
  // attempts (their results are not to be trusted).
  void reopen_trials_of(const std::vector<std::string>& worker_ids);

 private:
  std::optional<std::pair<Ticket, nlohmann::json>> issue(const TicketHolder& holder,
                                                         experiment::TrialLease& l);
  bool data_ready(std::int64_t exp_id);
  // Another experiment ran the same sweep text (some trial of it started):
  // its trials' curves (the same seeds) are public, so results here earn
  // no trust (gateway_trust.hpp).
  bool replayed(std::int64_t exp_id);

  store::ResultStore& store_;
  const GatewayOptions& opt_;
  ShardCache& shards_;
  experiment::Catalogue catalogue_;
  experiment::LeaseService svc_;
  std::map<std::int64_t, bool> replayed_;
};

}  // namespace dnnlab::server
