// The browser gateway (protocol v1, docs/protocol.md): one client per
// connection, its messages checked and answered here. The rules live in
// their own files: the wire format (gateway_wire), tickets and their spec
// (gateway_tickets), trust and quarantine (gateway_trust), native re-runs
// (gateway_verifier), the core and data shards (gateway_assets).
#include "server/gateway.hpp"

#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <set>

#include "server/gateway_assets.hpp"
#include "server/gateway_tickets.hpp"
#include "server/gateway_trust.hpp"
#include "server/gateway_verifier.hpp"
#include "server/gateway_wire.hpp"
#include "server/token.hpp"

namespace dnnlab::server {

using nlohmann::json;
using namespace wire;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// "1.2.3.4:5678" or "::1:5678" -> the address without the port.
std::string address_of(const std::string& remote) {
  const std::size_t colon = remote.rfind(':');
  return colon == std::string::npos ? remote : remote.substr(0, colon);
}

struct Client {
  std::string remote;   // address:port
  std::string address;  // the ticket cap and hello rate are per address
  double opened_at = 0;
  std::string identity;  // issued by the server (gateway_trust.hpp)
  TicketHolder holder;   // worker id and core build
  bool greeted = false;
  bool closing = false;  // poll() has asked for its close
  std::optional<Ticket> ticket;
};

}  // namespace

struct Gateway::Impl {
  Impl(store::ResultStore& s, queue::TaskQueue& q, GatewayOptions o)
      : store(s),
        queue(q),
        opt(std::move(o)),
        core(opt.web_root),
        shards(opt.data_dir, [this] { return held_shards(); }),
        tickets(s, q, opt, shards),
        trust(s, opt),
        verifier(opt.store_url, opt.data_dir) {}

  store::ResultStore& store;
  queue::TaskQueue& queue;
  GatewayOptions opt;
  ClientId next_id = 1;
  std::map<ClientId, Client> clients;
  CoreAssets core;
  ShardCache shards;
  TicketDesk tickets;
  TrustBook trust;
  // Identity -> the worker ids its connections had (its trials are found by them).
  std::map<std::string, std::set<std::string>> workers_of;
  std::map<std::string, std::deque<double>> hellos_by_address;  // times, the last minute
  double swept_at = 0;
  // Closes decided outside poll() (another connection of a quarantined
  // identity): poll() hands them out.
  std::vector<std::pair<ClientId, GatewayReply>> deferred;
  Verifier verifier;  // last: stopped first

  double now() const { return opt.clock ? opt.clock() : unix_now(); }

  std::vector<std::shared_ptr<const Shard>> held_shards() const {
    std::vector<std::shared_ptr<const Shard>> out;
    for (const auto& [_, cl] : clients)
      if (cl.ticket && cl.ticket->shard) out.push_back(cl.ticket->shard);
    return out;
  }

  // ---- messages ----
  GatewayReply hello(Client& c, const json& msg) {
    if (c.greeted) violate("bad_message", "hello: already said hello");
    // Every hello counts, a wrong token too: it bounds guessing, identities
    // issued, worker rows and join events per address.
    auto& times = hellos_by_address[c.address];
    while (!times.empty() && times.front() < now() - 60) times.pop_front();
    if (static_cast<int>(times.size()) >= opt.hellos_per_minute)
      violate("rate_limited", "hello: more than " + std::to_string(opt.hellos_per_minute) +
                                  " hellos a minute from this address; try again later");
    times.push_back(now());
    const std::string token = text(msg, "hello", "token", 256);
    if (!bearer_matches("Bearer " + token, opt.join_token))
      violate("unauthorized", "hello: the join token is wrong");
    // The identity the server gave this client before, or a new one: a
    // credential it did not sign (made up, or another server's) earns nothing.
    std::optional<std::string> identity;
    std::string credential;
    if (auto it = msg.find("client"); it != msg.end() && !it->is_null()) {
      credential = text(msg, "hello", "client", 128);
      identity = trust.identity_of(credential);
    }
    if (!identity) {
      TrustBook::Identity fresh = trust.issue();
      identity = fresh.id;
      credential = fresh.credential;
    }
    if (trust.quarantined(*identity))
      violate("quarantined", "quarantined: this client's results disagreed with a native re-run");
    std::string agent;
    if (msg.contains("agent") && msg["agent"].is_string())
      agent = utf8_prefix(msg["agent"].get<std::string>(), 200);
    if (msg.contains("capabilities") && !msg["capabilities"].is_object())
      violate("bad_message", "hello: 'capabilities' must be an object");
    core.scan();
    // A client whose engine has relaxed SIMD loads that build when offered;
    // the trials it trains record which one.
    if (msg.contains("capabilities") &&
        msg["capabilities"].value("kernels", json()) == "wasm-relaxed-simd" &&
        core.has("dnnlab_core_relaxed.wasm")) {
      c.holder.kernels = "wasm-relaxed-simd";
      if (auto f = msg["capabilities"].value("fma", json()); f.is_boolean())
        c.holder.fma = f.get<bool>();
    }
    // Two tabs of one browser share an identity; each connection its own worker id.
    std::string id = "browser-" + *identity;
    for (int n = 2;; ++n) {
      bool taken = false;
      for (const auto& [_, o] : clients) taken |= o.holder.worker_id == id;
      if (!taken) break;
      id = "browser-" + *identity + "-" + std::to_string(n);
    }
    c.identity = *identity;
    c.holder.worker_id = id;
    c.greeted = true;
    workers_of[c.identity].insert(id);
    store::WorkerRecord w;
    w.id = id;
    w.kind = store::WorkerKind::browser;
    w.host = c.remote;
    w.started_at = now();
    store.upsert_worker(w);
    store.append_event(
        "worker.joined",
        {{"worker", id}, {"kind", "browser"}, {"agent", agent}, {"kernels", c.holder.kernels}});
    GatewayReply r;
    r.frames.push_back(frame({{"type", "welcome"},
                              {"worker", id},
                              {"client", credential},
                              {"heartbeat_seconds", opt.heartbeat_seconds},
                              {"max_text_bytes", opt.max_text_bytes},
                              {"max_binary_bytes", opt.max_binary_bytes},
                              {"wasm", core.urls()}}));
    return r;
  }

  Ticket& held(Client& c, const json& msg, const char* type) {
    const std::string id = text(msg, type, "ticket", 64);
    if (!c.ticket || c.ticket->id != id)
      violate("not_held", std::string(type) + ": ticket \"" + id + "\" is not held by this client");
    return *c.ticket;
  }

  bool expired(const Ticket& t) const { return now() > t.issued_at + opt.ticket_lifetime_seconds; }
  // How long a client holding a ticket may be silent: its lease, but never
  // less than three heartbeats (a short --browser-lease must not close
  // clients between two of them; the gateway renews the queue's lease).
  double silence_limit() const { return std::max(opt.lease_seconds, 3 * opt.heartbeat_seconds); }

  // The client gave its ticket up unfinished: the trial goes back without
  // spending an attempt, and it counts against the client.
  void abandon(Client& c) {
    if (!c.ticket) return;
    tickets.give_back(*c.ticket);
    trust.abandoned(c.identity, c.address, now());
    c.ticket.reset();
  }

  // Whether one more native re-run for this client may be queued: its
  // identity's, its address's and the verifier's bounds.
  bool may_verify(const Client& c) {
    return trust.pending_verifications(c.identity) <
               trust.pending_cap(c.identity, opt.max_pending_verifications) &&
           trust.address_pending(c.address) < opt.max_pending_verifications_per_address &&
           static_cast<int>(verifier.pending()) < opt.max_verify_queue;
  }

  GatewayReply idle(double retry, const char* reason) {
    GatewayReply r;
    json j{{"type", "idle"}, {"retry_seconds", retry}};
    if (reason) j["reason"] = reason;
    r.frames.push_back(frame(std::move(j)));
    return r;
  }

  GatewayReply request(Client& c) {
    if (c.ticket) violate("bad_message", "request: ticket \"" + c.ticket->id + "\" is still held");
    if (double wait = trust.cooldown_left(c.identity, c.address, now()); wait > 0)
      return idle(std::ceil(wait), "too many abandoned tickets");
    // An untrusted client's every result is re-run: it waits while that
    // cannot be queued. A trusted one's results are mostly not: it waits only
    // on its own and its address's bounds, and a result that must be re-run
    // while the verifier is full is refused when it comes.
    const bool own_bounds_full =
        trust.pending_verifications(c.identity) >=
            trust.pending_cap(c.identity, opt.max_pending_verifications) ||
        trust.address_pending(c.address) >= opt.max_pending_verifications_per_address;
    if (trust.trusted(c.identity) ? own_bounds_full : !may_verify(c))
      return idle(5, "waiting for verification");
    int by_client = 0, by_address = 0;
    for (const auto& [_, o] : clients) {
      if (!o.ticket) continue;
      by_client += o.identity == c.identity;
      by_address += o.address == c.address;
    }
    if (by_client >= opt.max_tickets_per_client) return idle(5, "ticket limit per client");
    if (by_address >= opt.max_tickets_per_address) return idle(5, "ticket limit per address");
    bool preparing = false;
    auto t = tickets.next(c.holder, preparing);
    if (!t) return preparing ? idle(1, "preparing data") : idle(1, nullptr);
    c.ticket = std::move(t->first);
    c.ticket->issued_at = c.ticket->heard_at = c.ticket->progress_filled_at = now();
    c.ticket->renewed_at = unix_now();
    c.ticket->progress_tokens = opt.progress_burst;
    GatewayReply r;
    r.frames.push_back(frame(std::move(t->second)));
    store.heartbeat(c.holder.worker_id, c.ticket->trial_id);
    return r;
  }

  GatewayReply progress(Client& c, const json& msg) {
    Ticket& t = held(c, msg, "progress");
    if (t.pending) violate("bad_message", "progress: the result was already sent");
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
    if (msg.contains("samples_per_second"))
      in_range(msg, "progress", "samples_per_second", 0, kInf);
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

  GatewayReply result(Client& c, const json& msg) {
    Ticket& t = held(c, msg, "result");
    if (t.pending) violate("bad_message", "result: already sent for this ticket");
    const std::string status = text(msg, "result", "status", 16);
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
        return accepted(c, false,
                        distrusted ? "failures from this address were not confirmed"
                                   : "verification queue full");
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

  GatewayReply weights(Client& c, std::string_view bytes) {
    if (bytes.size() < 4)
      violate("bad_frame", "binary frame: shorter than its 4-byte header length");
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
    const bool must =
        !trust.trusted(c.identity) || t.stopped ||
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
        submit(std::move(job));
      }
    }
    return accepted(c, counted);
  }

  GatewayReply accepted(Client& c, bool counted, const char* reason = nullptr) {
    GatewayReply r;
    json j{{"type", "accepted"}, {"ticket", c.ticket->id}, {"counted", counted}};
    if (reason) j["reason"] = reason;
    r.frames.push_back(frame(std::move(j)));
    c.ticket.reset();
    store.heartbeat(c.holder.worker_id, std::nullopt);
    return r;
  }

  GatewayReply heartbeat(Client& c, const json& msg) {
    if (auto it = msg.find("ticket"); it != msg.end() && !it->is_null()) {
      Ticket& t = held(c, msg, "heartbeat");
      t.heard_at = now();
      // Past its lifetime it is not extended (poll() takes it back).
      if (!expired(t)) {
        // Lost (it expired) when false: the next progress gets a 'lost' verdict.
        if (tickets.extend(t)) t.renewed_at = unix_now();
      }
    }
    store.heartbeat(c.holder.worker_id,
                    c.ticket ? std::optional(c.ticket->trial_id) : std::nullopt);
    GatewayReply r;
    r.frames.push_back(frame({{"type", "heartbeat"}}));
    return r;
  }

  // ---- verification ----
  void submit(VerifyJob job) {
    ++trust.pending_verifications(job.client_key);
    ++trust.address_pending(job.address);
    verifier.submit(std::move(job));
  }

  void decided(const VerifyOutcome& o, std::vector<std::pair<ClientId, GatewayReply>>& out) {
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
      return;
    }
    quarantine(o.job.client_key, o.job.worker_id, o.job.trial_id,
               "a result disagreed with a native re-run (" + o.detail + ")", out);
  }

  // The identity's results are not to be trusted: refuse it, close its
  // connections, reopen its trials.
  void quarantine(const std::string& identity, const std::string& worker_id, std::int64_t trial,
                  const std::string& why, std::vector<std::pair<ClientId, GatewayReply>>& out) {
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

  // Frames before hello are held to max_hello_bytes, the rest to their kind's limit.
  void check_size(const Client& c, std::size_t size, std::size_t limit, const char* kind) const {
    if (!c.greeted && size > opt.max_hello_bytes)
      violate("too_big",
              "frame too big: before hello, frames are limited to " +
                  std::to_string(opt.max_hello_bytes) + " bytes",
              kTooBig);
    if (size > limit)
      violate("too_big",
              std::string("frame too big: ") + kind + " frames are limited to " +
                  std::to_string(limit) + " bytes",
              kTooBig);
  }

  GatewayReply dispatch(Client& c, std::string_view frame_text) {
    check_size(c, frame_text.size(), opt.max_text_bytes, "text");
    json msg;
    try {
      msg = json::parse(frame_text);
    } catch (const json::parse_error& e) {
      violate("bad_json", "malformed JSON at byte " + std::to_string(e.byte));
    } catch (const json::out_of_range& e) {  // 1e999: a number JSON cannot hold
      violate("non_finite", std::string("non-finite result: ") + e.what());
    }
    if (!msg.is_object()) violate("bad_json", "a text frame must be a JSON object");
    auto v = msg.find("v");
    if (v == msg.end() || !v->is_number_integer())
      violate("bad_version", "missing 'v': this server speaks protocol v1", kProtocolError);
    if (*v != kVersion)
      violate("bad_version",
              "unsupported protocol version " + v->dump() + "; this server speaks v1",
              kProtocolError);
    const std::string type = text(msg, "message", "type", 32);
    if (type == "hello") return hello(c, msg);
    if (!c.greeted) violate("bad_message", type + ": the first message must be hello");
    if (type == "request") return request(c);
    if (type == "progress") return progress(c, msg);
    if (type == "result") return result(c, msg);
    if (type == "heartbeat") return heartbeat(c, msg);
    violate("bad_message", "unknown message type '" + type + "'");
  }

  GatewayReply dispatch_binary(Client& c, std::string_view bytes) {
    check_size(c, bytes.size(), opt.max_binary_bytes, "binary");
    if (!c.greeted) violate("bad_message", "binary frame: the first message must be hello");
    return weights(c, bytes);
  }

  // Runs a handler: a violation closes the client with its reason; nothing
  // escapes to the server. A number no honest client sends (out of range)
  // quarantines its identity as well.
  template <class F>
  GatewayReply guarded(ClientId id, F&& handle) {
    auto it = clients.find(id);
    if (it == clients.end()) return {};
    Client& c = it->second;
    if (c.closing) return {};
    try {
      return handle(c);
    } catch (const Violation& v) {
      c.closing = true;
      abandon(c);
      if (v.kind == "out_of_range" && c.greeted) {
        quarantine(c.identity, c.holder.worker_id, 0, v.message, deferred);
      }
      return error_reply(v);
    } catch (const std::exception& e) {
      return error_reply({kInternal, "internal", std::string("internal error: ") + e.what()});
    }
  }

  // Periodic duties: no hello in time, tickets past their lifetime, old rows.
  void sweep(std::vector<std::pair<ClientId, GatewayReply>>& out) {
    const double t = now();
    for (auto& [id, c] : clients) {
      if (c.closing) continue;
      if (!c.greeted && t - c.opened_at > opt.hello_timeout_seconds) {
        c.closing = true;
        out.emplace_back(
            id, error_reply(
                    {kPolicy, "hello_timeout",
                     "hello: none within " + json(opt.hello_timeout_seconds).dump() + " seconds"}));
      } else if (c.ticket && expired(*c.ticket)) {
        const std::string tid = c.ticket->id;
        c.closing = true;
        abandon(c);
        out.emplace_back(id,
                         error_reply({kPolicy, "ticket_expired",
                                      "ticket \"" + tid + "\" outlived its lifetime of " +
                                          json(opt.ticket_lifetime_seconds).dump() + " seconds"}));
      } else if (c.ticket && t - c.ticket->heard_at > silence_limit()) {
        // Silent past its lease: the gateway gives the ticket back itself
        // (costing the identity and its address, not one of the trial's
        // attempts) instead of letting the queue's lease run out, which
        // would spend an attempt: strangers alone must never fail a trial.
        const std::string tid = c.ticket->id;
        c.closing = true;
        abandon(c);
        out.emplace_back(id, error_reply({kPolicy, "ticket_silent",
                                          "ticket \"" + tid + "\": nothing heard for " +
                                              json(silence_limit()).dump() + " seconds"}));
      } else if (c.ticket && unix_now() - c.ticket->renewed_at > opt.lease_seconds / 4) {
        // The queue's lease is the gateway's to keep while the client is heard from.
        if (tickets.extend(*c.ticket)) c.ticket->renewed_at = unix_now();
      }
    }
    if (t - swept_at < 60) return;
    swept_at = t;
    for (auto it = hellos_by_address.begin(); it != hellos_by_address.end();)
      it = !it->second.empty() && it->second.back() >= t - 60 ? std::next(it)
                                                              : hellos_by_address.erase(it);
    store.forget_gone_workers(store::WorkerKind::browser, t - opt.gone_worker_ttl_seconds);
    trust.forget_idle(t);
  }
};

Gateway::Gateway(store::ResultStore& store, queue::TaskQueue& queue, GatewayOptions options) {
  if (options.join_token.empty()) throw std::invalid_argument("gateway: a join token is needed");
  if (!(options.verify_fraction >= 0 && options.verify_fraction <= 1))
    throw std::invalid_argument("verify-fraction: must be in [0, 1]");
  if (options.secret.empty()) options.secret = random_hex(32);
  impl_ = std::make_unique<Impl>(store, queue, std::move(options));
  impl_->core.scan();
}

Gateway::~Gateway() = default;

Gateway::ClientId Gateway::open(std::string remote_address) {
  const ClientId id = impl_->next_id;
  open(id, std::move(remote_address));
  return id;
}

void Gateway::open(ClientId id, std::string remote_address) {
  if (id == 0 || impl_->clients.count(id))
    throw std::invalid_argument("gateway: client id " + std::to_string(id) + " is taken");
  impl_->next_id = std::max(impl_->next_id, id + 1);
  Client& c = impl_->clients[id];
  c.address = address_of(remote_address);
  c.remote = std::move(remote_address);
  c.opened_at = impl_->now();
}

bool Gateway::greeted(ClientId id) const {
  auto it = impl_->clients.find(id);
  return it != impl_->clients.end() && it->second.greeted;
}

GatewayReply Gateway::on_text(ClientId id, std::string_view frame) {
  return impl_->guarded(id, [&](Client& c) { return impl_->dispatch(c, frame); });
}

GatewayReply Gateway::on_binary(ClientId id, std::string_view frame) {
  return impl_->guarded(id, [&](Client& c) { return impl_->dispatch_binary(c, frame); });
}

void Gateway::close(ClientId id) {
  auto it = impl_->clients.find(id);
  if (it == impl_->clients.end()) return;
  Client& c = it->second;
  try {
    impl_->abandon(c);
    if (c.greeted) {
      impl_->store.mark_worker_gone(c.holder.worker_id);
      impl_->store.append_event("worker.left", {{"worker", c.holder.worker_id}});
    }
  } catch (const std::exception&) {
  }
  impl_->clients.erase(it);
}

std::vector<std::pair<Gateway::ClientId, GatewayReply>> Gateway::poll() {
  std::vector<std::pair<ClientId, GatewayReply>> out;
  out.swap(impl_->deferred);
  for (const auto& o : impl_->verifier.take_outcomes()) impl_->decided(o, out);
  impl_->sweep(out);
  return out;
}

std::size_t Gateway::max_frame(ClientId id) const {
  auto it = impl_->clients.find(id);
  if (it == impl_->clients.end() || !it->second.greeted) return impl_->opt.max_hello_bytes;
  return std::max(impl_->opt.max_text_bytes, impl_->opt.max_binary_bytes);
}

std::optional<GatewayAsset> Gateway::asset(std::string_view path) {
  if (path.rfind("/core/", 0) == 0) return impl_->core.find(std::string(path));
  return impl_->shards.find(path);
}

nlohmann::json Gateway::core_urls() const {
  return impl_->core.urls();
}

std::size_t Gateway::clients() const {
  return impl_->clients.size();
}

std::size_t Gateway::verifications_pending() const {
  return impl_->verifier.pending();
}

}  // namespace dnnlab::server
