// The hybrid trainer's server: it holds the `classifier` part and the master
// copy of `features`, hands out gradient tickets (a version and batch
// indices), trains the classifier on every client's activations as one
// batch, returns each client the gradient of its activations, averages the
// weight gradients that come back, steps the features optimizer and
// publishes the next version. docs/distributed.md states every rule.
//
//   hybrid::InProcessHub hub;                       // or another ServerTransport
//   ... clients connect and run hybrid::run_client ...
//   hybrid::HybridServer server(spec, input, classes, hub, options);
//   for (int e = 0; e < spec.train.epochs; ++e) server.run_epoch(e, train, &val, &obs);
//   server.finish();                                // bye to every client
//   nn::Model& m = server.whole();                  // evaluate, save
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/checks.hpp"
#include "hybrid/parts.hpp"
#include "hybrid/transport.hpp"
#include "nn/model.hpp"
#include "nn/spec.hpp"
#include "nn/train.hpp"

namespace dnnlab::hybrid {

inline constexpr int kMaxClients = 64;
inline constexpr int kMaxStaleness = 16;

// How a gradient ticket ended (docs/distributed.md, "A ticket's life").
enum class TicketEnd {
  kApplied,       // its weight gradient went into a step, on the current version
  kAppliedStale,  // went into a step, computed on an older version (`age`)
  kDropped,       // its weight gradient did not count (`why`)
  kReissued,      // given up before its activations counted: its batch went back first in line
  kLate,          // an answer on a ticket that had ended already, discarded (a second record)
};
const char* ticket_end_name(TicketEnd e);  // "applied", "applied_stale", ...

// One ticket's end, as it happened: the record that outlives the run
// (`train --ticket-log`). Times are seconds since the server was made
// (HybridServer::seconds), negative for a step that did not happen.
struct TicketRecord {
  uint64_t ticket = 0;
  int client = -1;
  int epoch = 0;                // 1-based: the epoch in progress when it was written
  uint64_t version = 0;         // the features' version it was issued on
  int64_t begin = 0, rows = 0;  // the batch: the epoch order's [begin, begin + rows)
  double leased = -1, activations = -1, gradients = -1;
  TicketEnd end = TicketEnd::kApplied;
  uint64_t age = 0;  // kAppliedStale (and a too-stale kDropped): versions behind
  // kDropped: "too_stale", "norm" (the step's screens: norm or finiteness),
  // "deadline", "client_gone", "quarantined"; kReissued: "deadline",
  // "client_gone", "quarantined"; otherwise empty.
  std::string why;
  bool rechecked = false, recheck_passed = false;
};

// Receives each ticket's record as it ends, on the server's thread; `round`
// after each round's features step (a log flushes there).
class TicketRecorder {
 public:
  virtual ~TicketRecorder() = default;
  virtual void record(const TicketRecord& r) = 0;
  virtual void round() {}
};

struct HybridOptions {
  // Staleness bound s: a weight gradient computed on version v is applied
  // while v >= current - s, weighted 1 / (1 + age); 0 = synchronous.
  int staleness = 0;
  // How long a ticket may wait at each stage (activations, then weight
  // gradients) before it is given up: reissued, or its gradient dropped.
  std::chrono::milliseconds deadline{60000};
  // How long the run waits, once every client has left, for one to come
  // back or join before it fails with "no client is left": 0 for
  // in-process clients (threads never come back); `train --listen` sets it
  // (docs/distributed.md, "Reconnecting").
  std::chrono::milliseconds rejoin_grace{0};
  // Abandoned tickets: a ticket past its deadline at either stage is charged
  // to its client; after `max_abandons` in a row (an accepted weight
  // gradient clears them) it gets no ticket for `abandon_cooldown`. The rule
  // of browser trials (experiment::AbandonRule; the gateway's
  // --max-abandons and --abandon-cooldown, the same defaults). A departure
  // is not charged: its ticket is reissued at once, stalling nobody.
  int max_abandons = 3;
  std::chrono::milliseconds abandon_cooldown{600000};
  CheckLimits limits;
  // How activations and their gradients travel (tickets ask the client to
  // answer in it); weights and weight gradients are always float32.
  Dtype wire = Dtype::kFloat32;
  // Error feedback with int8 (docs/distributed.md "Bytes"): each client
  // carries the quantisation error of its activations into its next ones
  // (the tickets ask it to), and the server carries, per client, that of
  // the activation gradients it sends. Ignored with float32 and float16.
  bool feedback_acts = false, feedback_grads = false;
  // Native re-checks (docs/distributed.md, "Re-checks"): the server re-runs
  // a ticket's features forward and backward on its own copy and compares.
  // Which tickets: the rule of browser trials (experiment::Replication),
  // `recheck_first` playing --trust-after and `recheck_rate` the floor
  // (--verify-fraction): every ticket of a client until it has passed
  // `recheck_first` re-checks, then its k-th ticket since with probability
  // max(recheck_rate, 2^-(k+1)) (1/2, 1/4, ... down to the rate); with
  // `recheck_first` 0, the rate alone. Drawn with recheck_draw below, where
  // the client cannot see it. Activations off by more than
  // `recheck_tolerance`, or a weight gradient or state tensor off by more
  // than `recheck_grad_tolerance` (relative RMS errors), quarantine the
  // client. Honest clients of another build (the wasm core) measured at most
  // 1.8e-6 on activations and 3.1e-2 on gradients (docs/distributed.md
  // "Re-checks"): a gradient's error jumps when a value near 0 falls on the
  // other side of a ReLU or a max-pool picks another of two near-equal
  // values, so gradients get the looser bound.
  // HybridServer refuses recheck_first < 0 and a rate outside [0, 1].
  int recheck_first = 3;
  double recheck_rate = 0.05;
  double recheck_tolerance = 1e-3;
  double recheck_grad_tolerance = 0.1;
  uint64_t recheck_seed = 0;  // the draws' key; 0: from std::random_device (tests fix it)
  // Where each ticket's end goes (not owned; nullptr: nowhere).
  TicketRecorder* tickets = nullptr;
};

// The draw that decides whether a client's ticket is re-checked: for the
// n-th (0-based) of client `client`'s tickets whose activations arrived,
// uniform in [0, 1), a function of the key (`recheck_seed`) alone, so that a
// client's re-checks do not depend on when other clients answered (a test
// replays them). Not a cryptographic MAC: the client sees no draw, at most
// how long its ticket took, and the key is 64 random bits.
double recheck_draw(uint64_t key, int client, int64_t n);

// One client's share of the run, as the server sees it (the live run page,
// docs/distributed.md "Watching a run"). The server cannot see inside a
// client: its turnarounds hold the client's compute and both transfers.
struct ClientStats {
  int64_t tickets = 0;    // issued to it
  int64_t answered = 0;   // its weight gradients in, shape and values finite (the step's
                          // norm screen may still drop one)
  int64_t rows = 0;       // the rows of those tickets
  int64_t reissued = 0;   // its tickets given up before activations
  int64_t abandoned = 0;  // its tickets past a deadline, at either stage (charged to it)
  int64_t rechecks = 0, recheck_failures = 0;
  // The largest relative error among its passed re-checks (activations and
  // gradients alike): the honest spread of its build against the server's.
  double recheck_worst = 0;
  // Ticket sent -> its activations in; activation gradients sent -> its
  // weight gradients in. Seconds, summed over its tickets.
  double forward_seconds = 0, backward_seconds = 0;
  // Of those, what the client says it computed (each frame's compute time,
  // clamped to the turnaround it ends: a client cannot claim more); the rest
  // is the two transfers and the queues on either side.
  double forward_compute_seconds = 0, backward_compute_seconds = 0;
  int64_t bytes_to = 0, bytes_from = 0;
  // Seconds since the server started: its first ticket, its last frame.
  double first_ticket = -1, last_seen = -1;
  bool gone = false, quarantined = false;
};

// What happened to the tickets, for tests, logs and docs.
struct HybridStats {
  int64_t rounds = 0, tickets = 0;
  std::vector<int64_t> tickets_by_client;  // tickets issued, indexed by client id
  int64_t reissued = 0;       // tickets given up before activations (deadline, departure, reject)
  int64_t late = 0;           // results of given-up tickets, discarded
  int64_t grads_applied = 0;  // weight gradients averaged into a step
  int64_t grads_stale = 0;    // of those, computed on an older version
  int64_t grads_dropped = 0;  // too stale, or their client went away
  int64_t weights_sent = 0;   // weights frames: only to a client whose copy is stale
  int64_t rechecks = 0;       // tickets re-run natively and compared (passed or not)
  int64_t recheck_failures = 0;
  int64_t bytes_to_clients = 0, bytes_from_clients = 0;  // frames, as encoded
  // Where the server's time went: its own compute (classifier steps,
  // averaging, features steps) and waiting for the clients (their compute
  // and the transfers).
  double server_seconds = 0, wait_seconds = 0;
  double classifier_seconds = 0;     // of server_seconds: the classifier's steps
  int64_t classifier_rows = 0;       // rows the classifier trained on
  int64_t features_rows = 0;         // rows whose weight gradients were applied
  std::vector<ClientStats> clients;  // indexed by client id
  std::vector<int> quarantined;
  std::vector<std::string> log;  // one line per reissue, quarantine and departure
};

class HybridServer {
 public:
  // `link` must outlive the server. Throws SpecError as check_hybrid_spec
  // and Model::build_part.
  HybridServer(const nn::RunSpec& spec, const nn::Shape& input, int64_t num_classes,
               ServerTransport& link, const HybridOptions& options);
  ~HybridServer();
  HybridServer(const HybridServer&) = delete;
  HybridServer& operator=(const HybridServer&) = delete;

  // One epoch (0-based) over `train`, with the clients connected to the
  // link, then evaluation on `val`. The batches are those of nn::Trainer
  // (nn::epoch_order cut into train.batch_size), one per ticket. Throws
  // std::runtime_error when no client is left, NumericError on divergence.
  nn::EpochResult run_epoch(int epoch, const nn::LabeledData& train, const nn::LabeledData* val,
                            nn::TrainObserver* obs);
  // All epochs, as nn::Trainer::fit.
  std::vector<nn::EpochResult> fit(const nn::LabeledData& train, const nn::LabeledData* val,
                                   nn::TrainObserver* obs);
  // Tells every client the run is over.
  void finish();
  // The whole model with the current weights (features and classifier).
  nn::Model& whole();
  uint64_t version() const;
  const HybridStats& stats() const;
  // Seconds since the server was made (the clock of ClientStats).
  double seconds() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dnnlab::hybrid
