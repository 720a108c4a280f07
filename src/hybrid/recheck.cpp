// Native re-checks of the clients' work (docs/distributed.md, "Re-checks"):
// the server re-runs a sampled ticket's features forward and backward on its
// own copy of the features part, loaded with the master weights of the
// ticket's version, and compares activations, weight gradients and state.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "hybrid/client_step.hpp"
#include "hybrid/server_impl.hpp"
#include "nn/rng.hpp"

namespace dnnlab::hybrid {
namespace {

double rms(const float* a, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * a[i];
  return n ? std::sqrt(s / static_cast<double>(n)) : 0;
}

double rms_diff(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return n ? std::sqrt(s / static_cast<double>(n)) : 0;
}

// With the client's error feedback its activations are q(h + r): h within
// half the frame's block scale plus the carried r, within half the previous
// frame's. Only what lies beyond that bound counts, as a relative RMS.
double excess_over_feedback(const float* h, const nn::Tensor& got,
                            const std::vector<float>& prev_scales) {
  const std::vector<float> now = int8_block_scales(got.view());
  double s = 0, hh = 0;
  const int64_t n = got.numel();
  for (int64_t i = 0; i < n; ++i) {
    const size_t b = static_cast<size_t>(i / kInt8Block);
    const double bound =
        0.5 * (now[b] + (b < prev_scales.size() ? prev_scales[b] : 0.f)) * (1 + 1e-5);
    const double d = std::max(0.0, std::fabs(static_cast<double>(got.data()[i]) - h[i]) - bound);
    s += d * d;
    hh += static_cast<double>(h[i]) * h[i];
  }
  return std::sqrt(s) / (std::sqrt(hh) + 1e-12);
}

void copy_values(const std::vector<nn::Param*>& to, const std::vector<nn::Param*>& from) {
  for (size_t i = 0; i < to.size(); ++i)
    std::memcpy(to[i]->value.data(), from[i]->value.data(), sizeof(float) * to[i]->value.numel());
}

uint64_t splitmix64(uint64_t s) {
  return nn::splitmix64(s);
}  // of a copy

}  // namespace

double recheck_draw(uint64_t key, int client, int64_t n) {
  const uint64_t stream = splitmix64(key ^ splitmix64(static_cast<uint64_t>(client)));
  return static_cast<double>(splitmix64(stream ^ static_cast<uint64_t>(n)) >> 11) * 0x1.0p-53;
}

void HybridServer::Impl::init_rechecks() {
  // Dropout in the features part is no obstacle: a ticket's masks are drawn
  // from a seed the server knows too (ticket_dropout_seed).
  recheck_possible = opt.recheck_first > 0 || opt.recheck_rate > 0;
  recheck_key = opt.recheck_seed
                    ? opt.recheck_seed
                    : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

// The rule of browser trials (experiment::Replication): every ticket until
// the client passed recheck_first re-checks, then 1/2, 1/4, ... down to
// recheck_rate. The draw is the client's own stream, so that one client's
// re-checks do not depend on when the others' activations arrived.
bool HybridServer::Impl::choose_recheck(int c) {
  if (!recheck_possible) return false;
  Peer& p = peers[c];
  return replication.choose(p.record, recheck_draw(recheck_key, c, p.draws++));
}

bool HybridServer::Impl::recheck(int c, uint64_t id, const Ledger::Unit& u, const Ticket& t,
                                 const std::vector<nn::Tensor>& g) {
  ++stats.rechecks;
  ++client(c).rechecks;
  std::vector<nn::Param*> cp = checker.params(), cs = checker.state();
  copy_values(cp, f_params);
  copy_values(cs, f_state);
  nn::Shape bs = train->x.shape();
  bs[0] = u.size;
  nn::Tensor batch(bs);
  const int64_t row = train->x.cols();
  std::vector<uint32_t> indices(static_cast<size_t>(u.size));
  for (int64_t i = 0; i < u.size; ++i) {
    indices[i] = static_cast<uint32_t>(order[u.item + i]);
    std::memcpy(batch.data() + i * row, train->x.data() + order[u.item + i] * row,
                sizeof(float) * row);
  }
  // The ticket's dropout masks, as its client drew them.
  checker.set_rng_seed(ticket_dropout_seed(spec.train.seed, u.version, indices));
  const double tol = opt.recheck_tolerance;
  std::string why;
  const nn::TensorView h = checker.forward(batch.view(), /*training=*/true);
  double e = 0;
  if (t.act_feedback) {
    e = excess_over_feedback(h.data(), t.act_kept, t.prev_scales);
  } else {
    // As the client's activations travelled (in int8 or float16: rounded
    // the same way), or as they were computed.
    std::vector<float> sent(h.data(), h.data() + h.numel());
    if (!wire_round(std::span<float>(sent), t.act_dtype))
      sent.assign(h.data(), h.data() + h.numel());
    e = rms_diff(sent.data(), t.act_kept.data(), h.numel()) / (rms(h.data(), h.numel()) + 1e-12);
  }
  if (e > tol) why = "activations are off by a relative RMS error of " + std::to_string(e);
  double worst = e;
  if (why.empty()) {
    checker.backward_from("features", t.grad_sent.view());
    // Each tensor against its own scale, floored at 1% of the part's overall
    // one: a tensor whose true gradient is 0 (a conv bias before
    // BatchNorm) holds only rounding noise, which another build's float
    // order changes wholly (measured up to 3.4e-3 of 1e-3 of the overall
    // RMS, the floor before 2026-12-07, which quarantined honest tabs).
    double total = 0, count = 0;
    for (nn::Param* p : cp) {
      const double r = rms(p->grad.data(), p->grad.numel());
      total += r * r * static_cast<double>(p->grad.numel());
      count += static_cast<double>(p->grad.numel());
    }
    const double floor = 1e-2 * std::sqrt(total / std::max(count, 1.0)) + 1e-12;
    const double gtol = opt.recheck_grad_tolerance;
    for (size_t i = 0; i < cp.size() + cs.size() && why.empty(); ++i) {
      const nn::Tensor& want = i < cp.size() ? cp[i]->grad : cs[i - cp.size()]->value;
      const double err = rms_diff(want.data(), g[i].data(), want.numel()) /
                         (rms(want.data(), want.numel()) + (i < cp.size() ? floor : 1e-12));
      worst = std::max(worst, err);
      if (err > gtol)
        why = (i < cp.size() ? cp[i] : cs[i - cp.size()])->name +
              (i < cp.size() ? " gradient" : "") + " is off by a relative RMS error of " +
              std::to_string(err);
    }
  }
  if (!why.empty()) {
    ++stats.recheck_failures;
    ++client(c).recheck_failures;
    drop_client(c, "re-check of ticket " + std::to_string(id) + ": " + why, true);
    return false;
  }
  ++peers[c].record.agreed;
  client(c).recheck_worst = std::max(client(c).recheck_worst, worst);
  return true;
}

}  // namespace dnnlab::hybrid
