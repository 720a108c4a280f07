// The live status of a distributed run (docs/distributed.md "Watching a
// run"): built on the trainer's thread, handed out by the io thread.
#include "hybrid_net/run_status.hpp"

#include <algorithm>
#include <cmath>

#include "hybrid_net/endpoint.hpp"

namespace dnnlab::hybrid_net {
namespace {

using nlohmann::json;

// A number JSON can carry (NaN and infinities would make the body invalid).
double finite(double v) {
  return std::isfinite(v) ? v : 0.0;
}
double per_second(double n, double s) {
  return s > 0 ? finite(n / s) : 0.0;
}

// The kinds of client the page knows; anything else a hello said is "other"
// (a client's free text is never echoed).
const char* kind_of(const std::string& agent) {
  if (agent == "browser") return "browser";
  if (agent == "dnnlab") return "native";
  return "other";
}

}  // namespace

json status_json(const RunStatusInput& in) {
  json j = {{"v", 1},
            {"state", in.state},
            {"seconds", finite(in.seconds)},
            {"train_seconds", finite(in.train_seconds)},
            {"epoch", in.epoch},
            {"epochs", in.epochs},
            {"samples_done", in.samples_done},
            {"samples_total", in.samples_total},
            {"version", in.version},
            {"staleness", in.staleness},
            {"wire", in.wire},
            {"joined", in.agents.size()}};
  json clients = json::array();
  if (const hybrid::HybridStats* s = in.stats) {
    j["rounds"] = s->rounds;
    j["tickets"] = s->tickets;
    j["reissued"] = s->reissued;
    j["late"] = s->late;
    j["grads_applied"] = s->grads_applied;
    j["grads_dropped"] = s->grads_dropped;
    j["rechecks"] = s->rechecks;
    j["recheck_failures"] = s->recheck_failures;
    j["server"] = {{"compute_seconds", finite(s->server_seconds)},
                   {"classifier_seconds", finite(s->classifier_seconds)},
                   {"features_step_seconds", finite(s->server_seconds - s->classifier_seconds)},
                   {"idle_seconds", finite(s->wait_seconds)},
                   {"bytes_to_clients", s->bytes_to_clients},
                   {"bytes_from_clients", s->bytes_from_clients}};
    // Over the training's wall time: what the run achieves; the classifier's
    // compute rate is what the server could do if it never waited.
    j["samples_per_second"] = {
        {"features", per_second(static_cast<double>(s->features_rows), in.train_seconds)},
        {"classifier", per_second(static_cast<double>(s->classifier_rows), in.train_seconds)},
        {"classifier_compute",
         per_second(static_cast<double>(s->classifier_rows), s->classifier_seconds)}};
    // Every client that joined has a row, the engine's counters once it
    // has seen it.
    const hybrid::ClientStats none;
    const size_t n =
        std::min<size_t>(std::max(s->clients.size(), in.agents.size()), hybrid::kMaxClients);
    for (size_t c = 0; c < n; ++c) {
      const hybrid::ClientStats& k = c < s->clients.size() ? s->clients[c] : none;
      // Waiting: from its first ticket to now (or its last frame, once
      // gone), the time it held no ticket of ours.
      const double end = k.gone ? k.last_seen : in.seconds;
      const double wait =
          k.first_ticket < 0
              ? 0
              : std::max(0.0, end - k.first_ticket - k.forward_seconds - k.backward_seconds);
      const double busy = k.forward_seconds + k.backward_seconds;
      const double compute = k.forward_compute_seconds + k.backward_compute_seconds;
      clients.push_back(
          {{"id", c},
           {"kind", kind_of(c < in.agents.size() ? in.agents[c] : "")},
           {"state", k.quarantined ? "quarantined"
                     : k.gone      ? "left"
                                   : "active"},
           {"tickets", k.tickets},
           {"done", k.answered},
           {"rows", k.rows},
           {"reissued", k.reissued},
           {"rechecks", k.rechecks},
           {"recheck_failures", k.recheck_failures},
           {"recheck_worst", finite(k.recheck_worst)},
           {"forward_seconds", finite(k.forward_seconds)},
           {"backward_seconds", finite(k.backward_seconds)},
           {"compute_seconds", finite(compute)},
           {"transfer_seconds", finite(std::max(0.0, busy - compute))},
           {"wait_seconds", finite(wait)},
           {"samples_per_second", per_second(static_cast<double>(k.rows), busy)},
           {"bytes_to", k.bytes_to},
           {"bytes_from", k.bytes_from},
           {"last_seen_ago",
            k.last_seen < 0 ? json(nullptr) : json(finite(in.seconds - k.last_seen))}});
    }
  }
  j["clients"] = std::move(clients);
  json curve = json::array();
  if (in.curve) {
    const size_t from = in.curve->size() > kMaxCurve ? in.curve->size() - kMaxCurve : 0;
    for (size_t i = from; i < in.curve->size(); ++i) {
      const nn::EpochResult& e = (*in.curve)[i];
      curve.push_back({{"epoch", e.epoch},
                       {"train_loss", finite(e.train_loss)},
                       {"train_acc", finite(e.train_acc)},
                       {"val_loss", e.val_loss ? json(finite(*e.val_loss)) : json(nullptr)},
                       {"val_acc", e.val_acc ? json(finite(*e.val_acc)) : json(nullptr)},
                       {"seconds", finite(e.seconds)},
                       {"samples_per_second", finite(e.samples_per_second)}});
    }
  }
  j["curve"] = std::move(curve);
  return j;
}

RunStatusBoard::RunStatusBoard(std::string first)
    : latest_(std::make_shared<const std::string>(std::move(first))) {}

void RunStatusBoard::publish(std::string json) {
  auto next = std::make_shared<const std::string>(std::move(json));
  std::lock_guard lock(mu_);
  latest_.swap(next);  // the old one is freed outside the lock, below
}

std::shared_ptr<const std::string> RunStatusBoard::latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

RunStatusObserver::RunStatusObserver(RunStatusBoard& board, const hybrid::HybridServer& server,
                                     const HybridEndpoint& endpoint, nn::TrainObserver* inner,
                                     int epochs, int staleness, std::string wire,
                                     double min_interval)
    : board_(board),
      server_(server),
      endpoint_(endpoint),
      inner_(inner),
      epochs_(epochs),
      staleness_(staleness),
      wire_(std::move(wire)),
      min_interval_(min_interval),
      train_start_(server.seconds()) {
  publish("training");
}

void RunStatusObserver::on_batch(int epoch, int64_t done, int64_t total, double loss,
                                 double accuracy, double seconds) {
  epoch_ = epoch;
  done_ = done;
  total_ = total;
  ++calls_;
  if (inner_ && (calls_ % std::max<int64_t>(1, inner_->batch_interval()) == 0 || done == total))
    inner_->on_batch(epoch, done, total, loss, accuracy, seconds);
  const double now = server_.seconds();
  if (last_ < 0 || now - last_ >= min_interval_) publish("training");
}

bool RunStatusObserver::on_epoch(const nn::EpochResult& r) {
  curve_.push_back(r);
  const bool go_on = inner_ ? inner_->on_epoch(r) : true;
  publish("training");
  return go_on;
}

void RunStatusObserver::finished() {
  publish("finished");
}

void RunStatusObserver::publish(const char* state) {
  RunStatusInput in;
  in.state = state;
  in.seconds = server_.seconds();
  last_ = in.seconds;
  in.train_seconds = in.seconds - train_start_;
  in.epoch = epoch_;
  in.epochs = epochs_;
  in.samples_done = done_;
  in.samples_total = total_;
  in.version = server_.version();
  in.staleness = staleness_;
  in.wire = wire_;
  in.stats = &server_.stats();
  in.agents = endpoint_.agents();
  in.curve = &curve_;
  board_.publish(status_json(in).dump());
}

}  // namespace dnnlab::hybrid_net
