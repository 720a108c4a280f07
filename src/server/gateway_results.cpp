// The gateway's handling of what a client's training produced: epochs
// (progress and the scheduler's verdict), results and their weights, and
// what the verifier's native re-runs decided (agreement, quarantine).
#include <cmath>
#include <cstring>
#include <iostream>

#include "server/gateway_impl.hpp"

namespace dnnlab::server {

using nlohmann::json;
using namespace wire;

GatewayReply Gateway::Impl::progress(Client& c, const json& msg) {
  Ticket& t = held(c, msg, "progress");
  if (t.pending) violate("bad_message", "progress: the result was already sent");
  note_backend(c, backend_report(msg, "progress"));
  const double epoch = number(msg, "progress", "epoch");
  if (epoch > t.epochs || epoch < 1)
    violate("out_of_range", "progress: epoch " + json(epoch).dump() +
                                " is outside the trial's 1.." + std::to_string(t.epochs));
  if (epoch != t.epochs_done + 1)
    violate("bad_message", "progress: expected epoch " + std::to_string(t.epochs_done + 1));
  if (t.stopped) violate("bad_message", "progress: the verdict was to stop");
  // Each progress is a stored epoch and an event: a bounded rate per ticket.
  t.progress_tokens =
      std::min<double>(opt.progress_burst, t.progress_tokens + (now() - t.progress_filled_at) *
                                                                   opt.progress_per_second);
  t.progress_filled_at = now();
  if (t.progress_tokens < 1)
    violate("rate_limited", "progress: more than " + json(opt.progress_per_second).dump() +
                                " epochs a second on one ticket");
  t.progress_tokens -= 1;
  t.heard_at = now();
  store::EpochMetrics m;
  m.epoch = t.epochs_done + 1;
  m.train_loss = in_range(msg, "progress", "train_loss", 0, kInf);
  m.train_acc = in_range(msg, "progress", "train_acc", 0, 1);
  if (t.has_val) {  // without validation data there is no value (a client sends 0)
    m.val_loss = in_range(msg, "progress", "val_loss", 0, kInf);
    m.val_acc = in_range(msg, "progress", "val_acc", 0, 1);
  }
  m.seconds = in_range(msg, "progress", "seconds", 0, kInf);
  if (msg.contains("lr")) m.lr = in_range(msg, "progress", "lr", 0, kInf);
  if (msg.contains("samples_per_second")) in_range(msg, "progress", "samples_per_second", 0, kInf);
  GatewayReply r;
  auto verdict = [&](bool go, const char* reason) {
    json j{{"type", "verdict"}, {"ticket", t.id}, {"epoch", m.epoch}, {"continue", go}};
    if (reason) j["reason"] = reason;
    r.frames.push_back(frame(std::move(j)));
  };
  if (expired(t)) {
    verdict(false, "lost");  // past its lifetime: someone else gets it
    abandon(c);
    return r;
  }
  // No client's numbers move the experiment's scheduler before a native
  // re-run agreed with them, whatever its trust: the verdict judges this
  // value against the counted epochs (epochs_for leaves out provisional
  // trials, and every browser trial is provisional until verified) and
  // does not keep it. So an abandoned ticket's epochs decide nothing.
  const auto v = tickets.extend(t) ? tickets.record_epoch(t, m)
                                   : experiment::LeaseService::Verdict{false, true};
  if (v.lost) {
    verdict(false, "lost");  // someone else has the trial now
    c.ticket.reset();
    return r;
  }
  store.heartbeat(c.holder.worker_id, t.trial_id);
  t.epochs_done = static_cast<int>(m.epoch);
  t.last_epoch = m;
  t.seconds += m.seconds;
  t.renewed_at = unix_now();
  const bool go = v.go;
  if (!go) t.stopped = true;
  verdict(go, go ? nullptr : "pruned");
  return r;
}

GatewayReply Gateway::Impl::result(Client& c, const json& msg) {
  Ticket& t = held(c, msg, "result");
  if (t.pending) violate("bad_message", "result: already sent for this ticket");
  const std::string status = text(msg, "result", "status", 16);
  // The backend and adapter it says it trained on: the trial's provenance
  // keeps them for display (docs/security.md: never trusted).
  if (json report = backend_report(msg, "result"); !report.empty()) {
    note_backend(c, report);
    store.merge_provenance(t.trial_id, t.attempt, report);
  }
  if (status == "failed") {
    // Not the trial's end: it runs again elsewhere, and a native re-run
    // decides whether the failure was real.
    const std::string error = msg.contains("error") && msg["error"].is_string()
                                  ? utf8_prefix(msg["error"].get<std::string>(), 2000)
                                  : "failed in the browser";
    store.append_event("trial.browser_failed", {{"trial", t.trial_id},
                                                {"attempt", t.attempt},
                                                {"worker", c.holder.worker_id},
                                                {"epochs_done", t.epochs_done},
                                                {"error", error}});
    VerifyJob job{t.trial_id, t.attempt, c.holder.worker_id, c.identity, t.epochs_done};
    job.address = c.address;
    tickets.give_back(t);
    // A failure costs a re-run: within the bounds, or refused (the trial
    // is back in the queue either way) and charged as an abandon.
    const bool distrusted =
        trust.address_unconfirmed(c.address, 0) > opt.max_unconfirmed_failures_per_address;
    if (distrusted || !may_verify(c)) {
      trust.abandoned(c.identity, c.address, now());
      return accepted(
          c, false,
          distrusted ? "failures from this address were not confirmed" : "verification queue full");
    }
    submit(std::move(job));
    return accepted(c, false);
  }
  if (status != "finished" && status != "pruned")
    violate("bad_message", "result: 'status' must be finished, pruned or failed");
  if ((status == "pruned") != t.stopped)
    violate("bad_message", status == "pruned" ? "result: pruned without a stop verdict"
                                              : "result: finished after a stop verdict");
  const json& mj = field(msg, "result", "metrics");
  if (!mj.is_object()) violate("bad_message", "result: 'metrics' must be an object");
  PendingResult p;
  p.status = status == "pruned" ? store::TrialStatus::pruned : store::TrialStatus::finished;
  // What is stored and ranked is what the verifier compares: the final
  // metrics are the last accepted epoch's (the curve), its time the sum of
  // the epochs'; only the test accuracy is the client's own number, and
  // the re-run compares it too. The client's copies are range-checked and
  // must match the curve.
  in_range(mj, "result.metrics", "train_loss", 0, kInf);
  in_range(mj, "result.metrics", "train_acc", 0, 1);
  if (t.has_val) {
    in_range(mj, "result.metrics", "val_loss", 0, kInf);
    in_range(mj, "result.metrics", "val_acc", 0, 1);
  }
  p.metrics.test_acc = in_range(mj, "result.metrics", "test_acc", 0, 1);
  if (mj.contains("test_loss")) in_range(mj, "result.metrics", "test_loss", 0, kInf);
  in_range(mj, "result.metrics", "seconds", 0, kInf);
  const double done = number(mj, "result.metrics", "epochs_done");
  if (done != t.epochs_done)
    violate("bad_message", "result: epochs_done " + json(done).dump() + " but " +
                               std::to_string(t.epochs_done) + " epochs were reported");
  if (status == "finished" && t.epochs_done != t.epochs)
    violate("bad_message", "result: finished after " + std::to_string(t.epochs_done) + " of " +
                               std::to_string(t.epochs) + " epochs");
  if (!t.last_epoch) violate("bad_message", "result: no epoch was reported");
  const store::EpochMetrics& last = *t.last_epoch;
  for (const char* name : {"train_loss", "train_acc", "val_loss", "val_acc"})
    if (auto v = store::metric(last, name); v && mj.contains(name) && mj[name] != *v)
      violate("bad_message", std::string("result: ") + name + " differs from the last epoch's");
  p.metrics.train_loss = last.train_loss;
  p.metrics.train_acc = last.train_acc;
  p.metrics.val_loss = last.val_loss;
  p.metrics.val_acc = last.val_acc;
  p.metrics.seconds = t.seconds;
  p.metrics.epochs_done = t.epochs_done;
  t.heard_at = now();
  t.pending = p;
  return {};  // the weights frame comes next
}

GatewayReply Gateway::Impl::weights(Client& c, std::string_view bytes) {
  if (bytes.size() < 4) violate("bad_frame", "binary frame: shorter than its 4-byte header length");
  std::uint32_t h = 0;
  for (int i = 3; i >= 0; --i) h = h << 8 | static_cast<unsigned char>(bytes[i]);
  if (h > 4096 || 4 + std::size_t{h} > bytes.size())
    violate("bad_frame", "binary frame: header length " + std::to_string(h) + " at offset 0 is " +
                             (h > 4096 ? "over 4096" : "past the end of the frame"));
  json head = json::parse(bytes.substr(4, h), nullptr, false);
  if (head.is_discarded() || !head.is_object())
    violate("bad_frame", "binary frame: the header at offset 4 is not a JSON object");
  if (head.value("v", 0) != kVersion)
    violate("bad_version", "binary frame: unsupported protocol version; this server speaks v1",
            kProtocolError);
  Ticket& t = held(c, head, "binary frame");
  if (text(head, "binary frame", "tensor", 32) != "weights" ||
      text(head, "binary frame", "dtype", 8) != "F32")
    violate("bad_frame", "binary frame: only tensor 'weights' of dtype 'F32' is accepted");
  if (!t.pending) violate("bad_message", "binary frame: weights before the result");
  const double count = number(head, "binary frame", "count");
  const std::size_t data = bytes.size() - 4 - h;
  if (count != static_cast<double>(t.num_params) || data != std::size_t(t.num_params) * 4)
    violate("bad_frame", "binary frame: expected " + std::to_string(t.num_params) +
                             " float32 weights, got " + std::to_string(data / 4));
  const char* p = bytes.data() + 4 + h;
  for (std::size_t i = 0; i < data / 4; ++i) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    if (!std::isfinite(f))
      violate("non_finite", "binary frame: non-finite result (weight " + std::to_string(i) +
                                " at offset " + std::to_string(4 + h + 4 * i) + ")");
  }
  const PendingResult res = *t.pending;
  // Re-run before it counts, whoever sent it: an untrusted client's; one
  // that would be among the best (a new best, a top-K place); a pruned one
  // (its stop was a scheduler's decision on the client's numbers). Of the
  // rest, a trusted client's, a share drawn now with the server's secret
  // (the client cannot know which). Until a re-run agrees, a result is
  // provisional (DESIGN.md, "Trust"): shown, never ranked, and never fed
  // to a scheduler or sampler; one not drawn stays so.
  const bool must = !trust.trusted(c.identity) || t.stopped ||
                    tickets.would_rank(t.experiment_id, t.trial_id, res.metrics, opt.verify_top_k);
  const bool verify = must || trust.choose_for_verification(c.identity, t.trial_id, t.attempt);
  if (verify && !may_verify(c)) {
    // Refused, not queued: the verifier's bounds are full.
    tickets.give_back(t);
    store.append_event("trial.refused", {{"trial", t.trial_id},
                                         {"attempt", t.attempt},
                                         {"worker", c.holder.worker_id},
                                         {"reason", "verification queue full"}});
    return accepted(c, false, "verification queue full");
  }
  const bool counted = tickets.finish(t, res.status, res.metrics);
  if (counted) {
    trust.completed(c.identity, c.address);
    if (verify) {
      VerifyJob job{t.trial_id, t.attempt, c.holder.worker_id, c.identity, std::nullopt};
      job.fresh = t.fresh;
      job.address = c.address;
      // Kept as the trial's weights only once the re-run agrees (and the
      // retention rule keeps them): finished trials only.
      if (res.status == store::TrialStatus::finished)
        job.weights = std::string(bytes.substr(4 + h));
      submit(std::move(job));
    }
  }
  return accepted(c, counted);
}

GatewayReply Gateway::Impl::accepted(Client& c, bool counted, const char* reason) {
  GatewayReply r;
  json j{{"type", "accepted"}, {"ticket", c.ticket->id}, {"counted", counted}};
  if (reason) j["reason"] = reason;
  r.frames.push_back(frame(std::move(j)));
  c.ticket.reset();
  store.heartbeat(c.holder.worker_id, std::nullopt);
  return r;
}

// ---- verification ----
void Gateway::Impl::submit(VerifyJob job) {
  ++trust.pending_verifications(job.client_key);
  ++trust.address_pending(job.address);
  verifier.submit(std::move(job));
}

void Gateway::Impl::decided(const VerifyOutcome& o,
                            std::vector<std::pair<ClientId, GatewayReply>>& out) {
  int& pending = trust.pending_verifications(o.job.client_key);
  pending = std::max(0, pending - 1);
  int& by_address = trust.address_pending(o.job.address);
  by_address = std::max(0, by_address - 1);
  if (o.job.failed_after) {
    if (o.agree) {
      tickets.fail_for_good(o.job.trial_id, o.job.worker_id,
                            "failed in a browser and in a native re-run: " + o.detail);
    } else {
      trust.address_unconfirmed(o.job.address, 1);
      if (trust.unconfirmed_failure(o.job.client_key) > opt.max_unconfirmed_failures)
        quarantine(o.job.client_key, o.job.worker_id, o.job.trial_id,
                   "failures a native re-run did not confirm (" + o.detail + ")", out);
    }
    return;
  }
  if (o.agree && trust.biased(o.job.client_key, o.bias)) {
    quarantine(o.job.client_key, o.job.worker_id, o.job.trial_id,
               "results consistently better than native re-runs, within the tolerance", out);
    return;
  }
  if (o.agree) {
    trust.agreed(o.job.client_key, o.job.fresh);
    store.set_provisional(o.job.trial_id, o.job.attempt, false);  // it counts now
    if (!o.weights_file.empty()) {
      try {
        tickets.offer_weights(o.experiment_id, o.job.trial_id, o.weights_file);
      } catch (const std::exception& e) {  // the weights only, never the result
        std::cerr << "dnnlab serve: trial " << o.job.trial_id
                  << ": its weights were not kept: " << e.what() << "\n";
      }
    }
    return;
  }
  quarantine(o.job.client_key, o.job.worker_id, o.job.trial_id,
             "a result disagreed with a native re-run (" + o.detail + ")", out);
}

// The identity's results are not to be trusted: refuse it, close its
// connections, reopen its trials.
void Gateway::Impl::quarantine(const std::string& identity, const std::string& worker_id,
                               std::int64_t trial, const std::string& why,
                               std::vector<std::pair<ClientId, GatewayReply>>& out) {
  if (!trust.quarantine(identity, worker_id, trial, why)) return;
  for (auto& [id, c] : clients)
    if (c.identity == identity && !c.closing) {
      c.closing = true;
      abandon(c);
      out.emplace_back(id, error_reply({kPolicy, "quarantined", "quarantined: " + why}));
    }
  auto& ids = workers_of[identity];
  ids.insert("browser-" + identity);
  tickets.reopen_trials_of({ids.begin(), ids.end()});
}
}  // namespace dnnlab::server
