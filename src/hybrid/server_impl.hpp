// HybridServer::Impl: the step engine's state and its parts, shared by
// server.cpp (rounds, tickets, frames, clients) and server_step.cpp (the
// classifier step and the features update). Private to src/hybrid.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "experiment/abandons.hpp"
#include "experiment/replication.hpp"
#include "experiment/ticket_ledger.hpp"
#include "hybrid/aggregate.hpp"
#include "hybrid/checks.hpp"
#include "hybrid/feedback.hpp"
#include "hybrid/server.hpp"
#include "hybrid/wire.hpp"

namespace dnnlab::hybrid {
namespace server_detail {

constexpr uint64_t kNoVersion = ~uint64_t{0};

// A ticket's life (its holder, stage, deadline, the batch it covers, the
// version it was issued on) is the ledger's (experiment/ticket_ledger.hpp):
// stage 0 waits for activations, stage 1 for weight gradients.
using Ledger = experiment::TicketLedger;
enum Stage : int { kForward = 0, kBackward = 1 };

// What the engine keeps of a live ticket: its activations, their norms,
// what a re-check needs.
struct Ticket {
  nn::Tensor act;  // the arrived activations (kForward, until the classifier step)
  bool has_act = false;
  std::string nonfinite;  // why act is not finite: a liar, or the run diverged
  double act_rms = 0;     // act's L2 norm / sqrt(its size), when finite
  // Re-checked (chosen when its activations arrive): the activations and
  // the activation gradients sent, kept for the comparison.
  bool recheck = false;
  bool rechecked = false, recheck_passed = false;  // ran, and agreed (the record)
  nn::Tensor act_kept, grad_sent;
  Dtype act_dtype = Dtype::kFloat32;  // how its activations came
  bool act_feedback = false;          // int8 with the client's error feedback asked for
  // With that feedback: the block scales of the client's previous int8
  // activations (the carried error is within half of them), empty if none.
  std::vector<float> prev_scales;
};

struct Peer {
  bool gone = false;
  uint64_t version = kNoVersion;  // the weights it was last sent
  // Its record for the re-check rule (experiment::Replication): re-checks
  // passed, tickets drawn since it had a record; and its tickets decided so
  // far (the index of its next recheck_draw). Both outlive a reconnect.
  experiment::ReplicationRecord record;
  int64_t draws = 0;
  experiment::AbandonRecord
      abandons;                   // its tickets past a deadline in a row (outlives a reconnect)
  int small_in_a_row = 0;         // weight gradients below the step's median / 5 (CheckLimits)
  ErrorFeedback grad_feedback;    // its activation gradients' (feedback_grads)
  std::vector<float> act_scales;  // its last int8 activations' block scales (feedback_acts)
};

struct GradResult {
  uint64_t ticket = 0;
  int client = -1;
  int64_t rows = 0;
  uint64_t version = 0;
  std::vector<nn::Tensor> tensors;  // parameter gradients, then state
  std::string nonfinite;            // as Ticket::nonfinite
  double norm = 0;                  // the parameter gradients' L2 norm, when finite
  TicketRecord record;              // its end, once known (apply_grads)
};

}  // namespace server_detail

struct HybridServer::Impl {
  using Stage = server_detail::Stage;
  static constexpr Stage kForward = server_detail::kForward, kBackward = server_detail::kBackward;
  using Ledger = server_detail::Ledger;
  using Ticket = server_detail::Ticket;
  using Peer = server_detail::Peer;
  using GradResult = server_detail::GradResult;
  static constexpr uint64_t kNoVersion = server_detail::kNoVersion;

  nn::RunSpec spec;
  ServerTransport& link;
  HybridOptions opt;
  nn::Model features, classifier, whole_model;
  nn::Optimizer opt_f, opt_c;
  std::vector<nn::Param*> f_params, f_state;
  nn::Shape act_row;  // one sample's activation shape
  uint64_t version = 0;
  std::vector<Peer> peers;
  // The tickets' life, and the batch starts still to train this epoch (its
  // line); the engine's part of each live ticket in `open`, same ids.
  Ledger ledger;
  std::map<uint64_t, Ticket> open;
  std::vector<int64_t> order;
  int epoch = 0;  // 0-based, the one in progress
  const nn::LabeledData* train = nullptr;
  std::vector<GradResult> grads;  // arrived, not yet applied
  NormHistory act_history, grad_history;
  // Kept across rounds, so that a round allocates (and the OS zeroes) no
  // fresh pages for them: the round's activations as one batch, and one
  // client's activation gradients before they are encoded.
  nn::Tensor round_acts, grad_out;
  HybridStats stats;
  const Clock::time_point born = Clock::now();
  // Re-checks: a second copy of the features part, loaded with the master
  // weights before each (and the ticket's dropout seed). Which tickets: the
  // rule of trials (recheck_first as trust_after, recheck_rate as the
  // floor), each drawn with recheck_draw under the run's key.
  nn::Model checker;
  bool recheck_possible = false;
  experiment::Replication replication;
  uint64_t recheck_key = 0;
  // The trials' abandon rule (max_abandons, abandon_cooldown), on the
  // clock of since_born().
  experiment::AbandonRule abandon_rule;
  // The epoch in progress.
  double loss_sum = 0, acc_sum = 0;
  int64_t done = 0;

  Impl(const nn::RunSpec& s, const nn::Shape& input, int64_t classes, ServerTransport& l,
       const HybridOptions& o)
      : spec(s),
        link(l),
        opt(o),
        features(nn::Model::build_part(s.model, "features", input, classes, s.train.seed)),
        classifier(nn::Model::build_part(s.model, "classifier", input, classes, s.train.seed)),
        whole_model(nn::Model::build(s.model, input, classes, s.train.seed)),
        opt_f(s.train.optimizer, features.params()),
        opt_c(s.train.optimizer, classifier.params()),
        checker(nn::Model::build_part(s.model, "features", input, classes, s.train.seed)),
        replication(o.recheck_first, o.recheck_rate),
        abandon_rule(o.max_abandons, std::chrono::duration<double>(o.abandon_cooldown).count()) {
    f_params = features.params();
    f_state = features.state();
    act_row = features.output_shape();
    classifier.set_input_grad(true);
    init_rechecks();
  }

  int64_t batch_size() const { return spec.train.batch_size; }
  bool quarantined(int c) const { return ledger.quarantined(c); }

  void note(const std::string& line) {
    if (stats.log.size() < 10000) stats.log.push_back(line);
  }

  void sync_peers() {
    const int n = link.clients();
    if (static_cast<int>(peers.size()) < n) peers.resize(n);
    if (static_cast<int>(stats.clients.size()) < n) stats.clients.resize(n);
  }
  ClientStats& client(int c) {
    if (static_cast<int>(stats.clients.size()) <= c) stats.clients.resize(c + 1);
    return stats.clients[c];
  }
  double since_born(Clock::time_point t = Clock::now()) const {
    return std::chrono::duration<double>(t - born).count();
  }
  static double between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }

  // A client leaves (or is made to): its forward tickets go back to the
  // queue, its unfinished backward ones are lost.
  void drop_client(int c, const std::string& why, bool quarantine);

  void rejoin(int c);

  const Ledger::Unit& unit(uint64_t id) const { return *ledger.find(id); }

  // A ticket the ledger gave up on (expired, given back, lost): its
  // counters, its log line, its record; the engine forgets it. `why` is
  // the record's reason, `line` the log's.
  void given_up(const Ledger::Ended& e, const std::string& why, const std::string& line);

  // A ticket of client c passed its deadline: charged to c (abandon_rule).
  void abandoned(int c);
  // Seconds until client c may take a ticket again (0: now).
  double cooldown_left(int c) {
    return abandon_rule.cooldown_left(peers[c].abandons, since_born());
  }

  // The record of a ticket as the ledger ended it (times, batch, client).
  TicketRecord record_of(const Ledger::Unit& u, const Ticket* t) const;
  void emit(const TicketRecord& r) {
    if (opt.tickets) opt.tickets->record(r);
  }

  void send(int c, Bytes bytes) {
    stats.bytes_to_clients += static_cast<int64_t>(bytes.size());
    client(c).bytes_to += static_cast<int64_t>(bytes.size());
    if (!link.send(c, std::move(bytes))) drop_client(c, "its link is closed", false);
  }

  void send_weights(int c);

  // Tickets for every free client, one batch each, in client order.
  std::vector<uint64_t> issue_round();

  // One inbound event: a frame checked for shape, finiteness and version
  // (norms are checked per step, against the others), or a departure.
  void dispatch(Inbound in);

  void on_activations(int c, Frame& f, Ticket& t);

  void on_weight_grads(int c, Frame& f, Ticket& t);

  // recheck.cpp: whether to re-check a ticket whose activations arrived,
  // and the re-check itself once its weight gradients are in (false: the
  // client was quarantined).
  void init_rechecks();
  bool choose_recheck(int c);
  bool recheck(int c, uint64_t id, const Ledger::Unit& u, const Ticket& t,
               const std::vector<nn::Tensor>& grads);

  // Waits for events until `done()` or the earliest deadline of `stage`
  // tickets, which then expire.
  template <typename Done>
  void pump(Stage stage, Done done) {
    const auto start = Clock::now();
    struct AddTime {
      double& to;
      Clock::time_point from;
      ~AddTime() { to += std::chrono::duration<double>(Clock::now() - from).count(); }
    } add{stats.wait_seconds, start};
    while (!done()) {
      // A ticket whose activations are in waits on the server, not its client.
      const Clock::time_point deadline = ledger.earliest_deadline(stage);
      if (deadline == Clock::time_point::max()) return;
      if (auto in = link.receive(deadline)) {
        dispatch(std::move(*in));
        continue;
      }
      const auto now = Clock::now();
      for (uint64_t id : ledger.overdue(stage, now)) {
        const Ledger::Ended e = ledger.expire(id, now);
        // Its copy ran (or will run) this ticket's forward, which will not
        // count: its BatchNorm running statistics moved where the master's
        // did not. It gets the weights again before its next ticket, or its
        // next re-check would find its state off (a lone straggler's was:
        // no other client's step resent them).
        peers[e.unit.holder].version = kNoVersion;
        given_up(e, "deadline",
                 stage == kForward
                     ? "ticket " + std::to_string(id) + " reissued: no activations by the deadline"
                     : "ticket " + std::to_string(id) + ": no weight gradients by the deadline");
        abandoned(e.unit.holder);
      }
    }
  }

  // The classifier on every accepted activation of the round as one batch;
  // each client gets its rows of dLoss/d activations, scaled to the gradient
  // of its own batch's mean loss (total / rows).
  void classifier_step(const std::vector<uint64_t>& round);

  // Averages the arrived weight gradients into the features' step
  // (mix_weights: by rows, down-weighted by age); beyond the staleness
  // bound, or failing the norm checks, a gradient is dropped.
  void apply_grads();
  void dropped(const GradResult& g, const char* why);

  // Whether a weight gradient still out would be too stale once the next
  // version is published: then the step waits for it (until its deadline),
  // as stale-synchronous parallel does. With s = 0 that is every one.
  bool blocks_next_version() const {
    for (const auto& [id, u] : ledger.live())
      if (u.stage == kBackward && version + 1 - u.version > static_cast<uint64_t>(opt.staleness))
        return true;
    return false;
  }

  // No ticket could be issued: wait for a straggler to answer, or give up
  // on it.
  void wait_for_a_free_client();

  void sync_whole() { assemble_whole(whole_model, features, classifier); }
};

}  // namespace dnnlab::hybrid
