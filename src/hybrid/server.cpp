// The server's step engine: rounds of tickets, the classifier step on all
// activations at once, the features step from the averaged weight gradients.
#include "hybrid/server.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <stdexcept>

#include "hybrid/aggregate.hpp"
#include "hybrid/parts.hpp"

namespace dnnlab::hybrid {
namespace {

constexpr uint64_t kNoVersion = ~uint64_t{0};

enum class Stage { kForward, kBackward };  // a ticket still open; closed ones leave `open`

struct Ticket {
  int client = -1;
  uint64_t version = 0;
  int64_t begin = 0, rows = 0;  // the batch: order[begin, begin + rows)
  Stage stage = Stage::kForward;
  Clock::time_point deadline;
  nn::Tensor act;  // the accepted activations (kForward, once they arrive)
  bool has_act = false;
  std::string nonfinite;  // why act is not finite: a liar, or the run diverged
};

struct Peer {
  bool gone = false;
  uint64_t version = kNoVersion;  // the weights it was last sent
  // The last ticket it still owes an answer to (live at kForward, or given
  // up): it gets no new ticket before answering, since a client works
  // through its frames in order.
  uint64_t waiting = 0;
  int backward = 0;  // its tickets at kBackward
};

struct GradResult {
  uint64_t ticket = 0;
  int client = -1;
  int64_t rows = 0;
  uint64_t version = 0;
  std::vector<nn::Tensor> tensors;  // parameter gradients, then state
  std::string nonfinite;            // as Ticket::nonfinite
};

}  // namespace

struct HybridServer::Impl {
  nn::RunSpec spec;
  ServerTransport& link;
  HybridOptions opt;
  nn::Model features, classifier, whole_model;
  nn::Optimizer opt_f, opt_c;
  std::vector<nn::Param*> f_params, f_state;
  nn::Shape act_row;  // one sample's activation shape
  uint64_t version = 0, next_ticket = 1;
  std::vector<Peer> peers;
  std::map<uint64_t, Ticket> open;  // tickets waiting for an answer
  std::map<uint64_t, int> closed;   // answered or given up: id -> client
  std::deque<int64_t> pending;      // batch starts still to train this epoch
  std::vector<int64_t> order;
  const nn::LabeledData* train = nullptr;
  std::vector<GradResult> grads;  // arrived, not yet applied
  NormHistory act_history, grad_history;
  HybridStats stats;
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
        opt_c(s.train.optimizer, classifier.params()) {
    f_params = features.params();
    f_state = features.state();
    act_row = features.output_shape();
    classifier.set_input_grad(true);
  }

  int64_t batch_size() const { return spec.train.batch_size; }
  bool quarantined(int c) const {
    return std::find(stats.quarantined.begin(), stats.quarantined.end(), c) !=
           stats.quarantined.end();
  }

  void note(const std::string& line) {
    if (stats.log.size() < 10000) stats.log.push_back(line);
  }

  void sync_peers() {
    const int n = link.clients();
    if (static_cast<int>(peers.size()) < n) peers.resize(n);
  }

  // A client leaves (or is made to): its forward tickets go back to the
  // queue, its unfinished backward ones are lost.
  void drop_client(int c, const std::string& why, bool quarantine) {
    Peer& p = peers[c];
    if (p.gone) return;
    p.gone = true;
    if (quarantine) {
      stats.quarantined.push_back(c);
      link.expel(c, why);
    }
    note("client " + std::to_string(c) + (quarantine ? " quarantined: " : " left: ") + why);
    std::vector<uint64_t> mine;
    for (auto& [id, t] : open)
      if (t.client == c) mine.push_back(id);
    for (uint64_t id : mine) {
      if (open[id].stage == Stage::kForward) {
        requeue(id, "its client went away");
      } else {
        close(id);
        ++stats.grads_dropped;
      }
    }
    std::erase_if(grads, [&](const GradResult& g) {
      if (g.client != c || !quarantine) return false;
      ++stats.grads_dropped;
      return true;
    });
  }

  void close(uint64_t id) {
    auto it = open.find(id);
    closed[id] = it->second.client;
    open.erase(it);
  }

  // Gives up on a ticket before its activations: its batch goes first in
  // the queue, for the next free client.
  void requeue(uint64_t id, const std::string& why) {
    pending.push_front(open[id].begin);
    close(id);
    ++stats.reissued;
    note("ticket " + std::to_string(id) + " reissued: " + why);
  }

  void send(int c, Bytes bytes) {
    stats.bytes_to_clients += static_cast<int64_t>(bytes.size());
    if (!link.send(c, std::move(bytes))) drop_client(c, "its link is closed", false);
  }

  void send_weights(int c) {
    std::vector<nn::TensorView> views;
    for (nn::Param* p : f_params) views.push_back(p->value.view());
    for (nn::Param* p : f_state) views.push_back(p->value.view());
    ++stats.weights_sent;
    send(c, encode_views(FrameKind::kWeights, version, 0, views));
    peers[c].version = version;
  }

  // Tickets for every free client, one batch each, in client order.
  std::vector<uint64_t> issue_round() {
    sync_peers();
    std::vector<uint64_t> round;
    for (int c = 0; c < static_cast<int>(peers.size()) && !pending.empty(); ++c) {
      Peer& p = peers[c];
      if (p.gone || p.waiting || (opt.staleness == 0 && p.backward)) continue;
      const int64_t begin = pending.front();
      pending.pop_front();
      const uint64_t id = next_ticket++;
      Ticket t;
      t.client = c;
      t.version = version;
      t.begin = begin;
      t.rows = std::min<int64_t>(batch_size(), static_cast<int64_t>(order.size()) - begin);
      t.deadline = Clock::now() + opt.deadline;
      Frame f{FrameKind::kTicket, version, id, {}, {}};
      for (int64_t i = 0; i < t.rows; ++i)
        f.indices.push_back(static_cast<uint32_t>(order[begin + i]));
      open[id] = std::move(t);
      p.waiting = id;
      ++stats.tickets;
      round.push_back(id);
      if (p.version != version) send_weights(c);
      if (!p.gone) send(c, encode(f));
    }
    return round;
  }

  // One inbound event: a frame checked for shape, finiteness and version
  // (norms are checked per step, against the others), or a departure.
  void dispatch(Inbound in) {
    sync_peers();
    const int c = in.client;
    if (c < 0 || c >= static_cast<int>(peers.size()) || peers[c].gone) return;
    if (in.left) return drop_client(c, "it closed its link", false);
    stats.bytes_from_clients += static_cast<int64_t>(in.frame.size());
    Frame f;
    try {
      f = decode(in.frame);
    } catch (const FrameError& e) {
      return drop_client(c, e.what(), true);
    }
    if (f.kind == FrameKind::kBye) return drop_client(c, "it said bye", false);
    if (f.kind != FrameKind::kActivations && f.kind != FrameKind::kWeightGrads)
      return drop_client(c, std::string("it sent a ") + frame_kind_name(f.kind) + " frame", true);
    auto it = open.find(f.ticket);
    if (it == open.end()) {
      auto old = closed.find(f.ticket);
      if (old == closed.end() || old->second != c)
        return drop_client(c, "ticket " + std::to_string(f.ticket) + " was not issued to it", true);
      // A given-up ticket's late answer: the reissue (or the step) went on
      // without it.
      ++stats.late;
      if (peers[c].waiting == f.ticket) peers[c].waiting = 0;
      return;
    }
    Ticket& t = it->second;
    if (t.client != c)
      return drop_client(c, "ticket " + std::to_string(f.ticket) + " was not issued to it", true);
    if (f.version != t.version)
      return drop_client(c,
                         "ticket " + std::to_string(f.ticket) + " is on version " +
                             std::to_string(t.version) + ", it claims " + std::to_string(f.version),
                         true);
    if (f.kind == FrameKind::kActivations) return on_activations(c, f, t);
    on_weight_grads(c, f, t);
  }

  void on_activations(int c, Frame& f, Ticket& t) {
    if (t.stage != Stage::kForward || t.has_act)
      return drop_client(c, "activations for a ticket it already answered", true);
    nn::Shape want = act_row;
    want.rank = act_row.rank + 1;
    for (int d = act_row.rank; d > 0; --d) want[d] = act_row[d - 1];
    want[0] = t.rows;
    std::string why = shape_problem(f.tensors[0].view(), want);
    if (!why.empty()) return drop_client(c, "activations: " + why, true);
    t.nonfinite = finite_problem(f.tensors[0].view());
    t.act = std::move(f.tensors[0]);
    t.has_act = true;
    if (peers[c].waiting == f.ticket) peers[c].waiting = 0;
  }

  void on_weight_grads(int c, Frame& f, Ticket& t) {
    if (t.stage != Stage::kBackward)
      return drop_client(c, "weight gradients for a ticket not waiting for them", true);
    if (f.tensors.size() != f_params.size() + f_state.size())
      return drop_client(c,
                         "weight gradients: " + std::to_string(f.tensors.size()) +
                             " tensors, expected " +
                             std::to_string(f_params.size() + f_state.size()),
                         true);
    for (size_t i = 0; i < f.tensors.size(); ++i) {
      const nn::Param* p = i < f_params.size() ? f_params[i] : f_state[i - f_params.size()];
      std::string why = shape_problem(f.tensors[i].view(), p->value.shape());
      if (!why.empty()) return drop_client(c, "weight gradients: " + p->name + ": " + why, true);
    }
    std::string nonfinite;
    for (size_t i = 0; i < f.tensors.size() && nonfinite.empty(); ++i) {
      nonfinite = finite_problem(f.tensors[i].view());
      if (!nonfinite.empty())
        nonfinite = (i < f_params.size() ? f_params[i] : f_state[i - f_params.size()])->name +
                    ": " + nonfinite;
    }
    --peers[c].backward;
    grads.push_back({f.ticket, c, t.rows, t.version, std::move(f.tensors), std::move(nonfinite)});
    close(f.ticket);
  }

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
      Clock::time_point deadline = Clock::time_point::max();
      for (auto& [id, t] : open)
        if (t.stage == stage && !(stage == Stage::kForward && t.has_act))
          deadline = std::min(deadline, t.deadline);
      if (deadline == Clock::time_point::max()) return;
      if (auto in = link.receive(deadline)) {
        dispatch(std::move(*in));
        continue;
      }
      const auto now = Clock::now();
      std::vector<uint64_t> overdue;
      for (auto& [id, t] : open)
        if (t.stage == stage && t.deadline <= now && !(stage == Stage::kForward && t.has_act))
          overdue.push_back(id);
      for (uint64_t id : overdue) {
        Peer& p = peers[open[id].client];
        p.waiting = std::max(p.waiting, id);
        if (stage == Stage::kForward) {
          requeue(id, "no activations by the deadline");
        } else {
          --p.backward;
          close(id);
          ++stats.grads_dropped;
          note("ticket " + std::to_string(id) + ": no weight gradients by the deadline");
        }
      }
    }
  }

  // The classifier on every accepted activation of the round as one batch;
  // each client gets its rows of dLoss/d activations, scaled to the gradient
  // of its own batch's mean loss (total / rows).
  void classifier_step(const std::vector<uint64_t>& round) {
    std::vector<uint64_t> ids;
    std::vector<std::string> nonfinite;
    std::vector<double> rms;  // per value: comparable across batch sizes
    for (uint64_t id : round) {
      auto it = open.find(id);
      if (it == open.end() || it->second.stage != Stage::kForward || !it->second.has_act) continue;
      const Ticket& t = it->second;
      ids.push_back(id);
      nonfinite.push_back(t.nonfinite);
      const nn::TensorView v = t.act.view();
      rms.push_back(
          t.nonfinite.empty() ? l2_norm({&v, 1}) / std::sqrt(static_cast<double>(v.numel())) : 0);
    }
    const std::vector<std::string> why =
        screen_step(nonfinite, rms, act_history, opt.limits, "the features' activations");
    std::vector<uint64_t> accepted;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (why[i].empty()) {
        accepted.push_back(ids[i]);
        continue;
      }
      Ticket& t = open[ids[i]];
      t.has_act = false;
      drop_client(t.client, "activations: " + why[i], true);  // requeues the ticket
    }
    if (accepted.empty()) return;

    int64_t total = 0;
    for (uint64_t id : accepted) total += open[id].rows;
    nn::Shape s = open[accepted[0]].act.shape();
    s[0] = total;
    nn::Tensor h(s);
    std::vector<int32_t> labels;
    int64_t at = 0;
    for (uint64_t id : accepted) {
      const Ticket& t = open[id];
      std::memcpy(h.data() + at * t.act.view().cols(), t.act.data(), sizeof(float) * t.act.numel());
      for (int64_t i = 0; i < t.rows; ++i) labels.push_back(train->y[order[t.begin + i]]);
      at += t.rows;
    }
    float acc = 0;
    const float loss = classifier.backward_loss(h.view(), labels.data(), &acc);
    opt_c.step();
    loss_sum += static_cast<double>(loss) * total;
    acc_sum += static_cast<double>(acc) * total;
    done += total;

    const nn::TensorView dh = classifier.input_grad();
    at = 0;
    for (uint64_t id : accepted) {
      Ticket& t = open[id];
      Frame f{FrameKind::kActivationGrads, t.version, id, {}, {}};
      f.tensors.emplace_back(t.act.shape());
      const float scale = static_cast<float>(static_cast<double>(total) / t.rows);
      const float* src = dh.data() + at * dh.cols();
      float* dst = f.tensors[0].data();
      for (int64_t i = 0, n = t.act.numel(); i < n; ++i) dst[i] = src[i] * scale;
      at += t.rows;
      t.act = nn::Tensor();
      t.stage = Stage::kBackward;
      t.deadline = Clock::now() + opt.deadline;
      ++peers[t.client].backward;
      send(t.client, encode(f));
    }
  }

  // Averages the arrived weight gradients into the features' step
  // (mix_weights: by rows, down-weighted by age); beyond the staleness
  // bound, or failing the norm checks, a gradient is dropped.
  void apply_grads() {
    std::vector<GradResult> use;
    for (GradResult& g : grads) {
      const uint64_t age = version - g.version;
      if (age > static_cast<uint64_t>(opt.staleness)) {
        ++stats.grads_dropped;
        note("ticket " + std::to_string(g.ticket) + ": gradient " + std::to_string(age) +
             " versions old, dropped");
        continue;
      }
      use.push_back(std::move(g));
    }
    grads.clear();
    std::erase_if(use, [&](const GradResult& g) {
      if (!quarantined(g.client)) return false;
      ++stats.grads_dropped;
      return true;
    });
    std::vector<std::string> nonfinite;
    std::vector<double> norms;
    for (const GradResult& g : use) {
      nonfinite.push_back(g.nonfinite);
      std::vector<nn::TensorView> v;
      for (size_t i = 0; i < f_params.size() && g.nonfinite.empty(); ++i)
        v.push_back(g.tensors[i].view());
      norms.push_back(l2_norm(v));
    }
    const std::vector<std::string> why =
        screen_step(nonfinite, norms, grad_history, opt.limits, "the features' weight gradients");
    std::vector<const GradResult*> ok;
    for (size_t i = 0; i < use.size(); ++i) {
      if (why[i].empty()) {
        ok.push_back(&use[i]);
        continue;
      }
      if (!peers[use[i].client].gone)
        drop_client(use[i].client, "weight gradients: " + why[i], true);
      ++stats.grads_dropped;
    }
    if (ok.empty()) return;
    std::vector<GradientShare> shares;
    for (const GradResult* g : ok) {
      shares.push_back({g->rows, version - g->version});
      if (g->version != version) ++stats.grads_stale;
    }
    const MixWeights w = mix_weights(shares);
    std::vector<const nn::Tensor*> parts(ok.size());
    for (size_t i = 0; i < f_params.size() + f_state.size(); ++i) {
      for (size_t j = 0; j < ok.size(); ++j) parts[j] = &ok[j]->tensors[i];
      if (i < f_params.size())
        weighted_sum(f_params[i]->grad, parts, w.grad);
      else
        weighted_sum(f_state[i - f_params.size()]->value, parts, w.state);
    }
    stats.grads_applied += static_cast<int64_t>(ok.size());
    opt_f.step();
    ++version;
  }

  // Whether a weight gradient still out would be too stale once the next
  // version is published: then the step waits for it (until its deadline),
  // as stale-synchronous parallel does. With s = 0 that is every one.
  bool blocks_next_version() const {
    for (const auto& [id, t] : open)
      if (t.stage == Stage::kBackward &&
          version + 1 - t.version > static_cast<uint64_t>(opt.staleness))
        return true;
    return false;
  }

  bool any(Stage stage) const {
    for (const auto& [id, t] : open)
      if (t.stage == stage) return true;
    return false;
  }

  // No ticket could be issued: wait for a straggler to answer, or give up
  // on it.
  void wait_for_a_free_client() {
    bool someone = false;
    for (const Peer& p : peers) someone |= !p.gone;
    if (!someone) {
      std::string last;  // what became of them
      for (size_t i = stats.log.size() > 3 ? stats.log.size() - 3 : 0; i < stats.log.size(); ++i)
        last += "; " + stats.log[i];
      throw std::runtime_error("hybrid training: no client is left" + last);
    }
    const auto deadline = Clock::now() + opt.deadline;
    while (Clock::now() < deadline) {
      if (auto in = link.receive(deadline)) dispatch(std::move(*in));
      for (const Peer& p : peers)
        if (!p.gone && !p.waiting) return;
    }
    for (int c = 0; c < static_cast<int>(peers.size()); ++c)
      if (!peers[c].gone) drop_client(c, "silent past the deadline", true);
    throw std::runtime_error("hybrid training: every client is silent");
  }

  void sync_whole() { assemble_whole(whole_model, features, classifier); }
};

HybridServer::HybridServer(const nn::RunSpec& spec, const nn::Shape& input, int64_t num_classes,
                           ServerTransport& link, const HybridOptions& options) {
  check_hybrid_spec(spec.model);
  if (options.staleness < 0 || options.staleness > kMaxStaleness)
    throw std::invalid_argument("staleness " + std::to_string(options.staleness) +
                                " is outside 0.." + std::to_string(kMaxStaleness));
  impl_ = std::make_unique<Impl>(spec, input, num_classes, link, options);
}

HybridServer::~HybridServer() = default;

nn::EpochResult HybridServer::run_epoch(int epoch, const nn::LabeledData& train,
                                        const nn::LabeledData* val, nn::TrainObserver* obs) {
  Impl& m = *impl_;
  const int64_t n = train.size();
  if (n == 0) throw ShapeError("the training split is empty");
  const auto start = Clock::now();
  m.train = &train;
  m.order = nn::epoch_order(m.spec.train.seed, epoch, n);
  m.pending.clear();
  for (int64_t b = 0; b < n; b += m.batch_size()) m.pending.push_back(b);
  const float lr = nn::scheduled_lr(m.spec.train.optimizer.lr, m.spec.train.schedule, epoch,
                                    m.spec.train.epochs);
  m.opt_f.set_lr(lr);
  m.opt_c.set_lr(lr);
  m.loss_sum = m.acc_sum = 0;
  m.done = 0;
  const int64_t interval = obs ? std::max<int64_t>(1, obs->batch_interval()) : 0;
  bool stopped = false;
  while (!m.pending.empty() && !stopped) {
    const std::vector<uint64_t> round = m.issue_round();
    if (round.empty()) {
      m.wait_for_a_free_client();
      continue;
    }
    ++m.stats.rounds;
    m.pump(Stage::kForward, [&] {
      for (uint64_t id : round) {
        auto it = m.open.find(id);
        if (it != m.open.end() && it->second.stage == Stage::kForward && !it->second.has_act)
          return false;
      }
      return true;
    });
    auto busy = Clock::now();
    m.classifier_step(round);
    m.stats.server_seconds += std::chrono::duration<double>(Clock::now() - busy).count();
    m.pump(Stage::kBackward, [&] { return !m.blocks_next_version(); });
    busy = Clock::now();
    m.apply_grads();
    m.stats.server_seconds += std::chrono::duration<double>(Clock::now() - busy).count();
    if (obs && (m.stats.rounds % interval == 0 || m.pending.empty())) {
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      obs->on_batch(epoch + 1, m.done, n, m.done ? m.loss_sum / m.done : 0,
                    m.done ? m.acc_sum / m.done : 0, secs);
      stopped = obs->interrupted();
    }
  }
  // Every epoch ends synchronised: the last gradients are in before evaluation.
  m.pump(Stage::kBackward, [&] { return !m.any(Stage::kBackward); });
  m.apply_grads();

  nn::EpochResult r;
  r.epoch = epoch + 1;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.train_loss = m.done ? m.loss_sum / m.done : 0;
  r.train_acc = m.done ? m.acc_sum / m.done : 0;
  r.samples_per_second = r.seconds > 0 ? m.done / r.seconds : 0;
  r.lr = lr;
  if (val && val->size() > 0 && !stopped) {
    m.sync_whole();
    const nn::LossAndAccuracy v = m.whole_model.evaluate(val->x, val->y);
    r.val_loss = v.loss;
    r.val_acc = v.accuracy;
  }
  return r;
}

std::vector<nn::EpochResult> HybridServer::fit(const nn::LabeledData& train,
                                               const nn::LabeledData* val, nn::TrainObserver* obs) {
  std::vector<nn::EpochResult> out;
  for (int e = 0; e < impl_->spec.train.epochs; ++e) {
    nn::EpochResult r = run_epoch(e, train, val, obs);
    if (obs && obs->interrupted()) break;
    out.push_back(r);
    if (obs && !obs->on_epoch(out.back())) break;
  }
  return out;
}

void HybridServer::finish() {
  Impl& m = *impl_;
  m.sync_peers();
  for (int c = 0; c < static_cast<int>(m.peers.size()); ++c)
    if (!m.peers[c].gone) m.link.send(c, encode(Frame{FrameKind::kBye, m.version, 0, {}, {}}));
}

nn::Model& HybridServer::whole() {
  impl_->sync_whole();
  return impl_->whole_model;
}

uint64_t HybridServer::version() const {
  return impl_->version;
}
const HybridStats& HybridServer::stats() const {
  return impl_->stats;
}

}  // namespace dnnlab::hybrid
