// The server's step engine: rounds of tickets, the classifier step on all
// activations at once, the features step from the averaged weight gradients.
#include "hybrid/server.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "hybrid/aggregate.hpp"
#include "hybrid/parts.hpp"
#include "hybrid/server_impl.hpp"

namespace dnnlab::hybrid {

using namespace server_detail;

const char* ticket_end_name(TicketEnd e) {
  switch (e) {
    case TicketEnd::kApplied:
      return "applied";
    case TicketEnd::kAppliedStale:
      return "applied_stale";
    case TicketEnd::kDropped:
      return "dropped";
    case TicketEnd::kReissued:
      return "reissued";
    case TicketEnd::kLate:
      return "late";
  }
  return "?";
}

TicketRecord HybridServer::Impl::record_of(const Ledger::Unit& u, const Ticket* t) const {
  TicketRecord r;
  r.ticket = u.id;
  r.client = u.holder;
  r.epoch = epoch + 1;
  r.version = u.version;
  r.begin = u.item;
  r.rows = u.size;
  r.leased = since_born(u.leased);
  if (!u.arrivals.empty()) r.activations = since_born(u.arrivals[0]);
  if (u.arrivals.size() > 1) r.gradients = since_born(u.arrivals[1]);
  if (t) {
    r.rechecked = t->rechecked;
    r.recheck_passed = t->recheck_passed;
  }
  return r;
}

// The ledger gave up on a ticket: back first in line (a reissue) or lost
// (its weight gradient dropped).
void HybridServer::Impl::given_up(const Ledger::Ended& e, const std::string& why,
                                  const std::string& line) {
  auto it = open.find(e.unit.id);
  TicketRecord r = record_of(e.unit, it == open.end() ? nullptr : &it->second);
  if (it != open.end()) open.erase(it);
  r.why = why;
  if (e.back_in_line) {
    ++client(e.unit.holder).reissued;
    ++stats.reissued;
    r.end = TicketEnd::kReissued;
  } else {
    ++stats.grads_dropped;
    r.end = TicketEnd::kDropped;
  }
  if (!line.empty()) note(line);
  emit(r);
}

// A client leaves (or is made to): its forward tickets go back to the
// queue, its unfinished backward ones are lost.
void HybridServer::Impl::drop_client(int c, const std::string& why, bool quarantine) {
  Peer& p = peers[c];
  if (p.gone) return;
  p.gone = true;
  client(c).gone = true;
  if (quarantine) {
    client(c).quarantined = true;
    stats.quarantined.push_back(c);
    link.expel(c, why);
  }
  note("client " + std::to_string(c) + (quarantine ? " quarantined: " : " left: ") + why);
  const std::string reason = quarantine ? "quarantined" : "client_gone";
  for (const Ledger::Ended& e : ledger.release_holder(c, quarantine))
    given_up(e, reason,
             e.back_in_line
                 ? "ticket " + std::to_string(e.unit.id) + " reissued: its client went away"
                 : "");
  std::erase_if(grads, [&](const GradResult& g) {
    if (g.client != c || !quarantine) return false;
    ++stats.grads_dropped;
    dropped(g, "quarantined");
    return true;
  });
}

// A client that left is back on a new link: what belonged to the old link
// (the weights it held, a ticket owed, error feedback) starts afresh; its
// record (re-checks passed, the small gradients in a row, its counters)
// stays. A quarantined client never comes back (the transport refuses it;
// should one slip through, it is expelled again).
void HybridServer::Impl::rejoin(int c) {
  if (c < 0 || c >= static_cast<int>(peers.size()) || !peers[c].gone) return;
  if (quarantined(c)) return link.expel(c, "it is quarantined");
  Peer& p = peers[c];
  p.gone = false;
  p.version = kNoVersion;
  ledger.holder_back(c);
  p.grad_feedback.clear();
  p.act_scales.clear();
  client(c).gone = false;
  note("client " + std::to_string(c) + " is back (" + std::to_string(p.record.agreed) +
       " re-checks passed)");
}

void HybridServer::Impl::abandoned(int c) {
  abandon_rule.abandoned(peers[c].abandons, since_born());
  ++client(c).abandoned;
  if (peers[c].abandons.in_a_row == abandon_rule.max_in_a_row())
    note("client " + std::to_string(c) + ": " + std::to_string(abandon_rule.max_in_a_row()) +
         " tickets past their deadline in a row: no ticket for " +
         std::to_string(abandon_rule.cooldown_seconds()) + " s");
}

void HybridServer::Impl::send_weights(int c) {
  std::vector<nn::TensorView> views;
  for (nn::Param* p : f_params) views.push_back(p->value.view());
  for (nn::Param* p : f_state) views.push_back(p->value.view());
  ++stats.weights_sent;
  send(c, encode_views(FrameKind::kWeights, version, 0, views));
  peers[c].version = version;
}

// Tickets for every free client, one batch each, in client order.
std::vector<uint64_t> HybridServer::Impl::issue_round() {
  sync_peers();
  std::vector<uint64_t> round;
  for (int c = 0; c < static_cast<int>(peers.size()) && ledger.work_left(); ++c) {
    Peer& p = peers[c];
    if (p.gone || !ledger.free(c) || (opt.staleness == 0 && ledger.reported(c)) ||
        cooldown_left(c) > 0)
      continue;
    const auto now = Clock::now();
    // The batch's rows: the ledger hands out the first batch start in line.
    const int64_t begin = *ledger.next_in_line();
    const int64_t rows =
        std::min<int64_t>(batch_size(), static_cast<int64_t>(order.size()) - begin);
    const Ledger::Unit u = *ledger.lease(c, version, rows, now, now + opt.deadline);
    const uint64_t id = u.id;
    Frame f{FrameKind::kTicket, version, id, {}, {}, opt.wire};  // answer in opt.wire
    f.feedback = opt.wire == Dtype::kInt8 && opt.feedback_acts;
    for (int64_t i = 0; i < rows; ++i) f.indices.push_back(static_cast<uint32_t>(order[begin + i]));
    open[id] = Ticket{};
    ++stats.tickets;
    if (static_cast<int>(stats.tickets_by_client.size()) <= c)
      stats.tickets_by_client.resize(c + 1);
    ++stats.tickets_by_client[c];
    ClientStats& cs = client(c);
    ++cs.tickets;
    if (cs.first_ticket < 0) cs.first_ticket = since_born(u.leased);
    round.push_back(id);
    if (p.version != version) send_weights(c);
    if (!p.gone) send(c, encode(f));
  }
  return round;
}

// One inbound event: a frame checked for shape, finiteness and version
// (norms are checked per step, against the others), or a departure.
void HybridServer::Impl::dispatch(Inbound in) {
  sync_peers();
  const int c = in.client;
  if (in.back) return rejoin(c);
  if (c < 0 || c >= static_cast<int>(peers.size()) || peers[c].gone) return;
  if (in.left) return drop_client(c, "it closed its link", false);
  stats.bytes_from_clients += static_cast<int64_t>(in.frame.size());
  client(c).bytes_from += static_cast<int64_t>(in.frame.size());
  client(c).last_seen = since_born();
  Frame f;
  try {
    f = decode(in.frame);
  } catch (const FrameError& e) {
    return drop_client(c, e.what(), true);
  }
  if (f.kind == FrameKind::kBye) return drop_client(c, "it said bye", false);
  if (f.kind != FrameKind::kActivations && f.kind != FrameKind::kWeightGrads)
    return drop_client(c, std::string("it sent a ") + frame_kind_name(f.kind) + " frame", true);
  // The client's error feedback runs over every activations frame it makes,
  // a late one included: keep the scales its next carried error is within.
  std::vector<float> prev_scales;
  if (f.kind == FrameKind::kActivations && opt.wire == Dtype::kInt8 && opt.feedback_acts) {
    prev_scales = std::move(peers[c].act_scales);
    peers[c].act_scales =
        f.dtype == Dtype::kInt8 ? int8_block_scales(f.tensors[0].view()) : std::vector<float>();
  }
  switch (ledger.answer(f.ticket, c)) {
    case Ledger::Answer::kForeign:
      return drop_client(c, "ticket " + std::to_string(f.ticket) + " was not issued to it", true);
    case Ledger::Answer::kLate: {
      // A given-up ticket's late answer: the reissue (or the step) went on
      // without it.
      ++stats.late;
      TicketRecord r = record_of(*ledger.remembered(f.ticket, c), nullptr);
      (f.kind == FrameKind::kActivations ? r.activations : r.gradients) = since_born();
      r.end = TicketEnd::kLate;
      emit(r);
      return;
    }
    case Ledger::Answer::kLive:
      break;
  }
  const Ledger::Unit& u = unit(f.ticket);
  if (f.version != u.version)
    return drop_client(c,
                       "ticket " + std::to_string(f.ticket) + " is on version " +
                           std::to_string(u.version) + ", it claims " + std::to_string(f.version),
                       true);
  Ticket& t = open[f.ticket];
  if (f.kind == FrameKind::kActivations) {
    t.prev_scales = std::move(prev_scales);
    return on_activations(c, f, t);
  }
  on_weight_grads(c, f, t);
}

void HybridServer::Impl::on_activations(int c, Frame& f, Ticket& t) {
  const Ledger::Unit& u = unit(f.ticket);
  if (u.stage != kForward || t.has_act)
    return drop_client(c, "activations for a ticket it already answered", true);
  // In the dtype the ticket asked for, or float32 (a non-finite int8 frame
  // travels so; an older client); never coarser than asked.
  if (f.dtype != opt.wire && f.dtype != Dtype::kFloat32)
    return drop_client(c,
                       std::string("activations in ") + dtype_name(f.dtype) +
                           ", the ticket asked for " + dtype_name(opt.wire),
                       true);
  nn::Shape want = act_row;
  want.rank = act_row.rank + 1;
  for (int d = act_row.rank; d > 0; --d) want[d] = act_row[d - 1];
  want[0] = u.size;
  std::string why = shape_problem(f.tensors[0].view(), want);
  if (!why.empty()) return drop_client(c, "activations: " + why, true);
  // One read for the finiteness and the norm (checks.hpp: sum_of_squares).
  const nn::TensorView act = f.tensors[0].view();
  const double sum = sum_of_squares(act);
  t.nonfinite = std::isfinite(sum) ? std::string() : finite_problem(act);
  t.act_rms = std::sqrt(sum) / std::sqrt(static_cast<double>(act.numel()));
  t.act_dtype = f.dtype;
  t.act_feedback = f.dtype == Dtype::kInt8 && opt.feedback_acts;
  t.act = std::move(f.tensors[0]);
  t.has_act = true;
  const auto now = Clock::now();
  const double turnaround = between(u.stage_began, now);
  client(c).forward_seconds += turnaround;
  client(c).forward_compute_seconds += std::min(turnaround, f.compute_us * 1e-6);
  ledger.arrived(f.ticket, now);  // judged in the classifier step
  t.recheck = choose_recheck(c);
}

void HybridServer::Impl::on_weight_grads(int c, Frame& f, Ticket& t) {
  const auto arrived = Clock::now();  // the client's turnaround ends here, not after a re-check
  const Ledger::Unit& u = unit(f.ticket);
  if (u.stage != kBackward)
    return drop_client(c, "weight gradients for a ticket not waiting for them", true);
  if (f.tensors.size() != f_params.size() + f_state.size())
    return drop_client(c,
                       "weight gradients: " + std::to_string(f.tensors.size()) +
                           " tensors, expected " + std::to_string(f_params.size() + f_state.size()),
                       true);
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const nn::Param* p = i < f_params.size() ? f_params[i] : f_state[i - f_params.size()];
    std::string why = shape_problem(f.tensors[i].view(), p->value.shape());
    if (!why.empty()) return drop_client(c, "weight gradients: " + p->name + ": " + why, true);
  }
  // The parameter gradients' norm and the finiteness of every tensor in one
  // read (checks.hpp: sum_of_squares); the first non-finite value is looked
  // for only when there is one.
  double sum = 0;
  for (size_t i = 0; i < f_params.size(); ++i) sum = sum_of_squares(f.tensors[i].view(), sum);
  bool finite = std::isfinite(sum);
  for (size_t i = f_params.size(); i < f.tensors.size() && finite; ++i)  // state: finiteness only
    finite = std::isfinite(sum_of_squares(f.tensors[i].view()));
  std::string nonfinite;
  for (size_t i = 0; i < f.tensors.size() && nonfinite.empty() && !finite; ++i) {
    nonfinite = finite_problem(f.tensors[i].view());
    if (!nonfinite.empty())
      nonfinite = (i < f_params.size() ? f_params[i] : f_state[i - f_params.size()])->name + ": " +
                  nonfinite;
  }
  const double norm = finite ? std::sqrt(sum) : 0;
  // A re-check needs the master weights of the ticket's version: with
  // staleness a later version may have been published; then it is skipped.
  if (t.recheck && nonfinite.empty() && u.version == version) {
    t.rechecked = true;
    if (!recheck(c, f.ticket, u, t, f.tensors)) return;  // quarantined; the ticket went with it
    t.recheck_passed = true;
  }
  experiment::AbandonRule::completed(peers[c].abandons);
  ClientStats& cs = client(c);
  const double turnaround = between(u.stage_began, arrived);
  cs.backward_seconds += turnaround;
  cs.backward_compute_seconds += std::min(turnaround, f.compute_us * 1e-6);
  ++cs.answered;
  cs.rows += u.size;
  const Ledger::Ended e = ledger.finish(f.ticket, arrived);
  TicketRecord r = record_of(e.unit, &t);
  open.erase(f.ticket);
  grads.push_back({f.ticket, c, e.unit.size, e.unit.version, std::move(f.tensors),
                   std::move(nonfinite), norm, std::move(r)});
}

// No ticket could be issued: wait for a straggler to answer, or give up
// on it.
void HybridServer::Impl::wait_for_a_free_client() {
  auto anyone = [&] {
    for (const Peer& p : peers)
      if (!p.gone) return true;
    return false;
  };
  bool someone = anyone();
  if (!someone && opt.rejoin_grace.count() > 0) {
    note("every client has left; waiting up to " +
         std::to_string(opt.rejoin_grace.count() / 1000.0).substr(0, 4) +
         " s for one to come back or join");
    // Short receives: a client that joins sends nothing until it has a
    // ticket, so the count of connected clients is looked at between them.
    const auto until = Clock::now() + opt.rejoin_grace;
    while (!someone && Clock::now() < until) {
      if (auto in = link.receive(std::min(until, Clock::now() + std::chrono::milliseconds(100))))
        dispatch(std::move(*in));
      sync_peers();
      someone = anyone();
    }
  }
  if (!someone) {
    std::string last;  // what became of them
    for (size_t i = stats.log.size() > 3 ? stats.log.size() - 3 : 0; i < stats.log.size(); ++i)
      last += "; " + stats.log[i];
    throw std::runtime_error("hybrid training: no client is left" + last);
  }
  // A free client is looked for before each receive: one that came back
  // in the grace above is free already and sends nothing until it has a
  // ticket.
  // A client serving an abandon cooldown is not silent: the wait runs
  // until its cooldown ends (hearing the others meanwhile, and looking for
  // a client that joined between short receives, as above) and is not held
  // against the deadline.
  auto deadline = Clock::now() + opt.deadline;
  for (;;) {
    double cooling = -1;  // the shortest cooldown left of a client owing nothing
    for (int c = 0; c < static_cast<int>(peers.size()); ++c) {
      if (peers[c].gone || !ledger.free(c)) continue;
      const double left = cooldown_left(c);
      if (left <= 0) return;
      cooling = cooling < 0 ? left : std::min(cooling, left);
    }
    if (cooling >= 0) {
      const auto until =
          Clock::now() + std::min<Clock::duration>(std::chrono::milliseconds(100),
                                                   std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(cooling)));
      if (auto in = link.receive(until)) dispatch(std::move(*in));
      sync_peers();
      deadline = std::max(deadline, Clock::now() + opt.deadline);
      continue;
    }
    if (Clock::now() >= deadline) break;
    if (auto in = link.receive(deadline)) dispatch(std::move(*in));
  }
  for (int c = 0; c < static_cast<int>(peers.size()); ++c)
    if (!peers[c].gone) drop_client(c, "silent past the deadline", true);
  throw std::runtime_error("hybrid training: every client is silent");
}

HybridServer::HybridServer(const nn::RunSpec& spec, const nn::Shape& input, int64_t num_classes,
                           ServerTransport& link, const HybridOptions& options) {
  check_hybrid_spec(spec.model);
  if (options.staleness < 0 || options.staleness > kMaxStaleness)
    throw std::invalid_argument("staleness " + std::to_string(options.staleness) +
                                " is outside 0.." + std::to_string(kMaxStaleness));
  if (options.recheck_first < 0)
    throw std::invalid_argument("recheck_first " + std::to_string(options.recheck_first) +
                                " is below 0");
  if (!(options.recheck_tolerance > 0) || !(options.recheck_grad_tolerance > 0))
    throw std::invalid_argument("recheck_tolerance and recheck_grad_tolerance must be above 0");
  if (!(options.recheck_rate >= 0 && options.recheck_rate <= 1))
    throw std::invalid_argument("recheck_rate " + std::to_string(options.recheck_rate) +
                                " is outside [0, 1]");
  if (options.max_abandons < 1)
    throw std::invalid_argument("max_abandons " + std::to_string(options.max_abandons) +
                                " is below 1");
  if (options.abandon_cooldown.count() < 0)
    throw std::invalid_argument(
        "abandon_cooldown " + std::to_string(options.abandon_cooldown.count()) + " ms is below 0");
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
  m.epoch = epoch;
  m.order = nn::epoch_order(m.spec.train.seed, epoch, n);
  std::vector<int64_t> batches;
  for (int64_t b = 0; b < n; b += m.batch_size()) batches.push_back(b);
  m.ledger.fill_line(std::move(batches));
  const float lr = nn::scheduled_lr(m.spec.train.optimizer.lr, m.spec.train.schedule, epoch,
                                    m.spec.train.epochs);
  m.opt_f.set_lr(lr);
  m.opt_c.set_lr(lr);
  m.loss_sum = m.acc_sum = 0;
  m.done = 0;
  const int64_t interval = obs ? std::max<int64_t>(1, obs->batch_interval()) : 0;
  bool stopped = false;
  while (m.ledger.work_left() && !stopped) {
    const std::vector<uint64_t> round = m.issue_round();
    if (round.empty()) {
      m.wait_for_a_free_client();
      continue;
    }
    ++m.stats.rounds;
    m.pump(server_detail::kForward, [&] {
      for (uint64_t id : round) {
        auto it = m.open.find(id);
        if (it != m.open.end() && m.unit(id).stage == server_detail::kForward &&
            !it->second.has_act)
          return false;
      }
      return true;
    });
    auto busy = Clock::now();
    m.classifier_step(round);
    const double c_secs = std::chrono::duration<double>(Clock::now() - busy).count();
    m.stats.server_seconds += c_secs;
    m.stats.classifier_seconds += c_secs;
    m.pump(server_detail::kBackward, [&] { return !m.blocks_next_version(); });
    busy = Clock::now();
    m.apply_grads();
    m.stats.server_seconds += std::chrono::duration<double>(Clock::now() - busy).count();
    if (m.opt.tickets) m.opt.tickets->round();
    if (obs && (m.stats.rounds % interval == 0 || !m.ledger.work_left())) {
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      obs->on_batch(epoch + 1, m.done, n, m.done ? m.loss_sum / m.done : 0,
                    m.done ? m.acc_sum / m.done : 0, secs);
      stopped = obs->interrupted();
    }
  }
  // Every epoch ends synchronised: the last gradients are in before evaluation.
  m.pump(server_detail::kBackward, [&] { return !m.ledger.any_at(server_detail::kBackward); });
  m.apply_grads();
  if (m.opt.tickets) m.opt.tickets->round();

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
double HybridServer::seconds() const {
  return impl_->since_born();
}

}  // namespace dnnlab::hybrid
