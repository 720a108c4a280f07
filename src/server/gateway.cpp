// The browser gateway (protocol v1, docs/protocol.md): one client per
// connection, its messages checked and answered here. The rules live in
// their own files: the wire format (gateway_wire), tickets (gateway_tickets),
// trust and quarantine (gateway_trust), native re-runs (gateway_verifier),
// the core and data shards (gateway_assets).
#include "server/gateway.hpp"

#include <cmath>
#include <cstring>
#include <map>

#include "server/gateway_assets.hpp"
#include "server/gateway_tickets.hpp"
#include "server/gateway_trust.hpp"
#include "server/gateway_verifier.hpp"
#include "server/gateway_wire.hpp"
#include "server/token.hpp"
#include "worker/worker_loop.hpp"

namespace dnnlab::server {

using nlohmann::json;
using namespace wire;

json core_spec_json(const nn::RunSpec& spec, const std::vector<std::int64_t>& input, int classes) {
  json layers = json::array();
  for (const auto& l : spec.model.layers) {
    json j{{"type", l.type}};
    if (l.type == "dense") {
      j["units"] = l.units;
      if (!l.bias) j["bias"] = false;
      if (!l.init.empty()) j["init"] = l.init;
    }
    if (l.alpha != 0.f) j["alpha"] = l.alpha;
    layers.push_back(std::move(j));
  }
  const auto& t = spec.train;
  const auto& o = t.optimizer;
  json opt{{"type", o.type}, {"lr", o.lr}, {"weight_decay", o.weight_decay}};
  if (o.type == "sgd") {
    opt["momentum"] = o.momentum;
    opt["nesterov"] = o.nesterov;
  } else {
    opt["beta1"] = o.beta1;
    opt["beta2"] = o.beta2;
    opt["eps"] = o.eps;
  }
  const auto& s = t.schedule;
  json sched{{"type", s.type}, {"warmup_epochs", s.warmup_epochs}};
  if (s.type == "step") {
    sched["step_epochs"] = s.step_epochs;
    sched["gamma"] = s.gamma;
  } else if (s.type == "cosine") {
    sched["min_lr"] = s.min_lr;
  }
  return {{"input", spec.model.input.empty() ? input : spec.model.input},
          {"classes", classes},
          {"layers", std::move(layers)},
          {"init", spec.model.init},
          {"loss", spec.model.loss},
          {"optimizer", std::move(opt)},
          {"schedule", std::move(sched)},
          {"batch_size", t.batch_size},
          {"seed", std::to_string(t.seed)},  // as text: JSON.parse rounds above 2^53
          {"epochs", t.epochs}};
}

namespace {

// The client's id, made safe for a worker id.
std::string sanitize(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') out += c;
  if (out.size() > 40) out.resize(40);
  return out.empty() ? "anon" : out;
}

struct Client {
  std::string remote;
  std::string client_key;  // from hello
  TicketHolder holder;     // worker id and core build
  bool greeted = false;
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
        trust(s, opt.verify_fraction),
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
  Verifier verifier;  // last: stopped first

  std::vector<std::shared_ptr<const Shard>> held_shards() const {
    std::vector<std::shared_ptr<const Shard>> out;
    for (const auto& [_, cl] : clients)
      if (cl.ticket && cl.ticket->shard) out.push_back(cl.ticket->shard);
    return out;
  }

  // ---- messages ----
  GatewayReply hello(Client& c, const json& msg) {
    if (c.greeted) violate("bad_message", "hello: already said hello");
    const std::string token = text(msg, "hello", "token", 256);
    if (!bearer_matches("Bearer " + token, opt.join_token))
      violate("unauthorized", "hello: the join token is wrong");
    c.client_key = text(msg, "hello", "client", 128);
    if (trust.quarantined(c.client_key))
      violate("quarantined", "quarantined: this client's results disagreed with a native re-run");
    std::string agent;
    if (msg.contains("agent") && msg["agent"].is_string())
      agent = msg["agent"].get<std::string>().substr(0, 200);
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
    std::string id = "browser-" + sanitize(c.client_key);
    for (int n = 2;; ++n) {
      bool taken = false;
      for (const auto& [_, o] : clients) taken |= o.holder.worker_id == id;
      if (!taken) break;
      id = "browser-" + sanitize(c.client_key) + "-" + std::to_string(n);
    }
    c.holder.worker_id = id;
    c.greeted = true;
    store::WorkerRecord w;
    w.id = id;
    w.kind = store::WorkerKind::browser;
    w.host = c.remote;
    w.started_at = unix_now();
    store.upsert_worker(w);
    store.append_event(
        "worker.joined",
        {{"worker", id}, {"kind", "browser"}, {"agent", agent}, {"kernels", c.holder.kernels}});
    GatewayReply r;
    r.frames.push_back(frame({{"type", "welcome"},
                              {"worker", id},
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

  // Gives the ticket's trial back: the next attempt starts afresh elsewhere.
  void release(Client& c, const std::string& why) {
    if (!c.ticket) return;
    tickets.release(*c.ticket, why);
    c.ticket.reset();
  }

  GatewayReply request(Client& c) {
    if (c.ticket) violate("bad_message", "request: ticket \"" + c.ticket->id + "\" is still held");
    GatewayReply r;
    bool preparing = false;
    if (auto t = tickets.next(c.holder, preparing)) {
      c.ticket = std::move(t->first);
      r.frames.push_back(frame(std::move(t->second)));
      store.heartbeat(c.holder.worker_id, c.ticket->trial_id);
    } else if (preparing) {
      r.frames.push_back(
          frame({{"type", "idle"}, {"retry_seconds", 1}, {"reason", "preparing data"}}));
    } else {
      r.frames.push_back(frame({{"type", "idle"}, {"retry_seconds", 1}}));
    }
    return r;
  }

  GatewayReply progress(Client& c, const json& msg) {
    Ticket& t = held(c, msg, "progress");
    if (t.pending) violate("bad_message", "progress: the result was already sent");
    const double epoch = number(msg, "progress", "epoch");
    if (epoch != t.epochs_done + 1)
      violate("bad_message", "progress: expected epoch " + std::to_string(t.epochs_done + 1));
    if (t.stopped) violate("bad_message", "progress: the verdict was to stop");
    store::EpochMetrics m;
    m.epoch = t.epochs_done + 1;
    m.train_loss = finite_number(msg, "progress", "train_loss");
    m.train_acc = finite_number(msg, "progress", "train_acc");
    if (t.has_val) {  // without validation data there is no value (a client sends 0)
      m.val_loss = finite_number(msg, "progress", "val_loss");
      m.val_acc = finite_number(msg, "progress", "val_acc");
    }
    m.seconds = finite_number(msg, "progress", "seconds");
    if (msg.contains("lr")) m.lr = finite_number(msg, "progress", "lr");
    GatewayReply r;
    auto verdict = [&](bool go, const char* reason) {
      json j{{"type", "verdict"}, {"ticket", t.id}, {"epoch", m.epoch}, {"continue", go}};
      if (reason) j["reason"] = reason;
      r.frames.push_back(frame(std::move(j)));
    };
    if (!queue.extend(t.lease, opt.lease_seconds) ||
        !store.record_epoch(t.trial_id, t.attempt, m)) {
      verdict(false, "lost");  // someone else has the trial now
      c.ticket.reset();
      return r;
    }
    store.heartbeat(c.holder.worker_id, t.trial_id);
    t.epochs_done = static_cast<int>(m.epoch);
    t.last_val_acc = m.val_acc;
    ExperimentCache& ec = tickets.experiment(t.experiment_id);
    const bool go = worker::continue_after_epoch(store, *ec.sweep, *ec.scheduler, t.experiment_id,
                                                 t.trial_id, t.index, m.epoch, t.epochs, m);
    if (!go) t.stopped = true;
    verdict(go, go ? nullptr : "pruned");
    return r;
  }

  GatewayReply result(Client& c, const json& msg) {
    Ticket& t = held(c, msg, "result");
    if (t.pending) violate("bad_message", "result: already sent for this ticket");
    const std::string status = text(msg, "result", "status", 16);
    if (status == "failed") {
      std::string error = msg.contains("error") && msg["error"].is_string()
                              ? msg["error"].get<std::string>().substr(0, 2000)
                              : "failed in the browser";
      store::TrialMetrics none;
      none.epochs_done = t.epochs_done;
      const bool counted = store.finish_trial(t.trial_id, t.attempt, store::TrialStatus::failed,
                                              none, "browser: " + error);
      queue.ack(t.lease);
      if (counted) maybe_verify(c, t);
      return accepted(c, counted);
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
    p.metrics.train_loss = finite_number(mj, "result.metrics", "train_loss");
    p.metrics.train_acc = finite_number(mj, "result.metrics", "train_acc");
    if (t.has_val) {
      p.metrics.val_loss = finite_number(mj, "result.metrics", "val_loss");
      p.metrics.val_acc = finite_number(mj, "result.metrics", "val_acc");
    }
    p.metrics.test_acc = finite_number(mj, "result.metrics", "test_acc");
    p.metrics.seconds = finite_number(mj, "result.metrics", "seconds");
    const double done = number(mj, "result.metrics", "epochs_done");
    if (done != t.epochs_done)
      violate("bad_message", "result: epochs_done " + json(done).dump() + " but " +
                                 std::to_string(t.epochs_done) + " epochs were reported");
    if (status == "finished" && t.epochs_done != t.epochs)
      violate("bad_message", "result: finished after " + std::to_string(t.epochs_done) + " of " +
                                 std::to_string(t.epochs) + " epochs");
    if (t.last_val_acc && p.metrics.val_acc && *p.metrics.val_acc != *t.last_val_acc)
      violate("bad_message", "result: val_acc differs from the last epoch's");
    p.metrics.epochs_done = t.epochs_done;
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
    const bool counted = store.finish_trial(t.trial_id, t.attempt, res.status, res.metrics);
    queue.ack(t.lease);
    if (counted) tickets.experiment(t.experiment_id).scheduler->on_finish(t.index);
    if (counted) maybe_verify(c, t);
    return accepted(c, counted);
  }

  GatewayReply accepted(Client& c, bool counted) {
    GatewayReply r;
    r.frames.push_back(
        frame({{"type", "accepted"}, {"ticket", c.ticket->id}, {"counted", counted}}));
    c.ticket.reset();
    store.heartbeat(c.holder.worker_id, std::nullopt);
    return r;
  }

  GatewayReply heartbeat(Client& c, const json& msg) {
    if (auto it = msg.find("ticket"); it != msg.end() && !it->is_null()) {
      Ticket& t = held(c, msg, "heartbeat");
      if (!queue.extend(t.lease, opt.lease_seconds)) {
        // Lost (it expired): the next progress gets a 'lost' verdict.
      }
    }
    store.heartbeat(c.holder.worker_id,
                    c.ticket ? std::optional(c.ticket->trial_id) : std::nullopt);
    GatewayReply r;
    r.frames.push_back(frame({{"type", "heartbeat"}}));
    return r;
  }

  // ---- verification ----
  void maybe_verify(const Client& c, const Ticket& t) {
    if (!trust.chosen_for_verification(t.trial_id)) return;
    verifier.submit({t.trial_id, t.attempt, c.holder.worker_id, c.client_key});
  }

  // The client's results are not to be trusted: refuse it, reopen its trials.
  void quarantine(const VerifyOutcome& o, std::vector<std::pair<ClientId, GatewayReply>>& out) {
    if (!trust.quarantine(o.job.worker_id, o.job.client_key, o.job.trial_id, o.detail)) return;
    for (auto& [id, c] : clients)
      if (c.client_key == o.job.client_key || c.holder.worker_id == o.job.worker_id)
        out.emplace_back(id, error_reply({kPolicy, "quarantined",
                                          "quarantined: a result disagreed with a native re-run (" +
                                              o.detail + ")"}));
    tickets.reopen_trials_of({o.job.worker_id});
  }

  GatewayReply dispatch(Client& c, std::string_view frame_text) {
    if (frame_text.size() > opt.max_text_bytes)
      violate("too_big",
              "frame too big: text frames are limited to " + std::to_string(opt.max_text_bytes) +
                  " bytes",
              kTooBig);
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
    violate("bad_message", "unknown message type '" + type.substr(0, 32) + "'");
  }

  GatewayReply dispatch_binary(Client& c, std::string_view bytes) {
    if (bytes.size() > opt.max_binary_bytes)
      violate("too_big",
              "frame too big: binary frames are limited to " +
                  std::to_string(opt.max_binary_bytes) + " bytes",
              kTooBig);
    if (!c.greeted) violate("bad_message", "binary frame: the first message must be hello");
    return weights(c, bytes);
  }

  // Runs a handler: a violation closes the client with its reason; nothing
  // escapes to the server.
  template <class F>
  GatewayReply guarded(ClientId id, F&& handle) {
    auto it = clients.find(id);
    if (it == clients.end()) return {};
    Client& c = it->second;
    try {
      return handle(c);
    } catch (const Violation& v) {
      if (v.kind == "non_finite") release(c, "non-finite result");
      return error_reply(v);
    } catch (const std::exception& e) {
      return error_reply({kInternal, "internal", std::string("internal error: ") + e.what()});
    }
  }
};

Gateway::Gateway(store::ResultStore& store, queue::TaskQueue& queue, GatewayOptions options) {
  if (options.join_token.empty()) throw std::invalid_argument("gateway: a join token is needed");
  if (!(options.verify_fraction >= 0 && options.verify_fraction <= 1))
    throw std::invalid_argument("verify-fraction: must be in [0, 1]");
  impl_ = std::make_unique<Impl>(store, queue, std::move(options));
  impl_->core.scan();
}

Gateway::~Gateway() = default;

Gateway::ClientId Gateway::open(std::string remote_address) {
  const ClientId id = impl_->next_id++;
  impl_->clients[id].remote = std::move(remote_address);
  return id;
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
  impl_->release(c, "connection closed");
  if (c.greeted) {
    try {
      impl_->store.mark_worker_gone(c.holder.worker_id);
      impl_->store.append_event("worker.left", {{"worker", c.holder.worker_id}});
    } catch (const std::exception&) {
    }
  }
  impl_->clients.erase(it);
}

std::vector<std::pair<Gateway::ClientId, GatewayReply>> Gateway::poll() {
  std::vector<std::pair<ClientId, GatewayReply>> out;
  for (const auto& o : impl_->verifier.take_outcomes())
    if (!o.agree) impl_->quarantine(o, out);
  return out;
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
