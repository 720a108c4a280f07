// The server's compute: the classifier's forward and backward on a round's
// activations as one batch, and the features' update from the clients'
// weight gradients (weighted by rows and age, screened first).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "hybrid/parts.hpp"
#include "hybrid/server_impl.hpp"

namespace dnnlab::hybrid {

using namespace server_detail;

// The classifier on every accepted activation of the round as one batch;
// each client gets its rows of dLoss/d activations, scaled to the gradient
// of its own batch's mean loss (total / rows).
void HybridServer::Impl::classifier_step(const std::vector<uint64_t>& round) {
  std::vector<uint64_t> ids;
  std::vector<std::string> nonfinite;
  std::vector<double> rms;  // per value: comparable across batch sizes
  for (uint64_t id : round) {
    auto it = open.find(id);
    if (it == open.end() || unit(id).stage != kForward || !it->second.has_act) continue;
    const Ticket& t = it->second;
    ids.push_back(id);
    nonfinite.push_back(t.nonfinite);
    rms.push_back(t.nonfinite.empty() ? t.act_rms : 0);  // measured as they arrived
  }
  const std::vector<std::string> why =
      screen_step(nonfinite, rms, act_history, opt.limits, "the features' activations");
  std::vector<uint64_t> accepted;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (why[i].empty()) {
      accepted.push_back(ids[i]);
      continue;
    }
    open[ids[i]].has_act = false;
    drop_client(unit(ids[i]).holder, "activations: " + why[i], true);  // requeues the ticket
  }
  if (accepted.empty()) return;

  int64_t total = 0;
  for (uint64_t id : accepted) total += unit(id).size;
  nn::Shape s = open[accepted[0]].act.shape();
  s[0] = total;
  nn::Tensor& h = round_acts;  // every value written below
  h.resize(s);
  std::vector<int32_t> labels;
  int64_t at = 0;
  for (uint64_t id : accepted) {
    const Ticket& t = open[id];
    const Ledger::Unit& u = unit(id);
    std::memcpy(h.data() + at * t.act.view().cols(), t.act.data(), sizeof(float) * t.act.numel());
    for (int64_t i = 0; i < u.size; ++i) labels.push_back(train->y[order[u.item + i]]);
    at += u.size;
  }
  float acc = 0;
  const float loss = classifier.backward_loss(h.view(), labels.data(), &acc);
  opt_c.step();
  loss_sum += static_cast<double>(loss) * total;
  acc_sum += static_cast<double>(acc) * total;
  done += total;
  stats.classifier_rows += total;

  const nn::TensorView dh = classifier.input_grad();
  at = 0;
  for (uint64_t id : accepted) {
    Ticket& t = open[id];
    const Ledger::Unit& u = unit(id);
    nn::Tensor& g = grad_out;  // every value written below
    g.resize(t.act.shape());
    const float scale = static_cast<float>(static_cast<double>(total) / u.size);
    const float* src = dh.data() + at * dh.cols();
    float* dst = g.data();
    for (int64_t i = 0, n = t.act.numel(); i < n; ++i) dst[i] = src[i] * scale;
    at += u.size;
    if (opt.wire == Dtype::kInt8 && opt.feedback_grads)
      peers[u.holder].grad_feedback.carry(g, opt.wire);
    const nn::TensorView gv = g.view();
    Bytes bytes = encode_views(FrameKind::kActivationGrads, u.version, id, {&gv, 1}, opt.wire);
    if (t.recheck) {  // kept as the client reads them
      t.act_kept = std::move(t.act);
      t.grad_sent = opt.wire == Dtype::kFloat32 ? g : std::move(decode(bytes).tensors[0]);
    }
    t.act = nn::Tensor();
    const auto now = Clock::now();
    const int holder = u.holder;
    ledger.report(id, now, now + opt.deadline);  // the activations counted: stage kBackward
    send(holder, std::move(bytes));
  }
}

// A weight gradient that arrived and does not count: its record.
void HybridServer::Impl::dropped(const GradResult& g, const char* why) {
  TicketRecord r = g.record;
  r.end = TicketEnd::kDropped;
  r.age = version - g.version;
  r.why = why;
  emit(r);
}

// Averages the arrived weight gradients into the features' step
// (mix_weights: by rows, down-weighted by age); beyond the staleness
// bound, or failing the norm checks, a gradient is dropped.
void HybridServer::Impl::apply_grads() {
  std::vector<GradResult> use;
  for (GradResult& g : grads) {
    const uint64_t age = version - g.version;
    if (age > static_cast<uint64_t>(opt.staleness)) {
      ++stats.grads_dropped;
      note("ticket " + std::to_string(g.ticket) + ": gradient " + std::to_string(age) +
           " versions old, dropped");
      dropped(g, "too_stale");
      continue;
    }
    use.push_back(std::move(g));
  }
  grads.clear();
  // In ticket order, not arrival order: float sums depend on their order,
  // and clients over a network answer in any order. At s = 0 the same spec
  // and seed then give the same weights whatever the timing.
  std::sort(use.begin(), use.end(),
            [](const GradResult& a, const GradResult& b) { return a.ticket < b.ticket; });
  std::erase_if(use, [&](const GradResult& g) {
    if (!quarantined(g.client)) return false;
    ++stats.grads_dropped;
    dropped(g, "quarantined");
    return true;
  });
  std::vector<std::string> nonfinite;
  std::vector<double> norms;
  for (const GradResult& g : use) {  // norms measured as they arrived (on_weight_grads)
    nonfinite.push_back(g.nonfinite);
    norms.push_back(g.nonfinite.empty() ? g.norm : 0);
  }
  const std::vector<std::string> why =
      screen_step(nonfinite, norms, grad_history, opt.limits, "the features' weight gradients");
  const std::vector<bool> small = below_step_median(nonfinite, norms, opt.limits);
  std::vector<const GradResult*> ok;
  for (size_t i = 0; i < use.size(); ++i) {
    Peer& p = peers[use[i].client];
    if (why[i].empty()) {
      ok.push_back(&use[i]);
      p.small_in_a_row = 0;
      continue;
    }
    ++stats.grads_dropped;
    dropped(use[i], "norm");
    std::string what = "weight gradients: " + why[i];
    if (small[i]) {
      const int n = ++p.small_in_a_row;
      if (n < opt.limits.small_strikes) {
        note("ticket " + std::to_string(use[i].ticket) + ": " + what + ": not applied (" +
             std::to_string(n) + " in a row; " + std::to_string(opt.limits.small_strikes) +
             " quarantine)");
        continue;
      }
      what += ", " + std::to_string(n) + " times in a row";
    }
    if (!p.gone) drop_client(use[i].client, what, true);
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
  for (const GradResult* g : ok) {
    stats.features_rows += g->rows;
    TicketRecord r = g->record;
    r.age = version - g->version;
    r.end = r.age ? TicketEnd::kAppliedStale : TicketEnd::kApplied;
    emit(r);
  }
  opt_f.step();
  ++version;
}
}  // namespace dnnlab::hybrid
