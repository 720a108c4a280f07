// The browser gateway (protocol v1, docs/protocol.md): one client per
// connection, its messages checked and answered here. The rules live in
// their own files: the wire format (gateway_wire), tickets and their spec
// (gateway_tickets), trust and quarantine (gateway_trust), native re-runs
// (gateway_verifier), the core and data shards (gateway_assets). Results
// and verification outcomes are handled in gateway_results.cpp.
#include "server/gateway.hpp"

#include <cmath>

#include "server/gateway_impl.hpp"
#include "server/token.hpp"

namespace dnnlab::server {

using nlohmann::json;
using namespace wire;

namespace {

// "1.2.3.4:5678" or "::1:5678" -> the address without the port.
std::string address_of(const std::string& remote) {
  const std::size_t colon = remote.rfind(':');
  return colon == std::string::npos ? remote : remote.substr(0, colon);
}

}  // namespace

// ---- messages ----
GatewayReply Gateway::Impl::hello(Client& c, const json& msg) {
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

Ticket& Gateway::Impl::held(Client& c, const json& msg, const char* type) {
  const std::string id = text(msg, type, "ticket", 64);
  if (!c.ticket || c.ticket->id != id)
    violate("not_held", std::string(type) + ": ticket \"" + id + "\" is not held by this client");
  return *c.ticket;
}

// The client gave its ticket up unfinished: the trial goes back without
// spending an attempt, and it counts against the client.
void Gateway::Impl::abandon(Client& c) {
  if (!c.ticket) return;
  tickets.give_back(*c.ticket);
  trust.abandoned(c.identity, c.address, now());
  c.ticket.reset();
}

// Whether one more native re-run for this client may be queued: its
// identity's, its address's and the verifier's bounds.
bool Gateway::Impl::may_verify(const Client& c) {
  return trust.pending_verifications(c.identity) <
             trust.pending_cap(c.identity, opt.max_pending_verifications) &&
         trust.address_pending(c.address) < opt.max_pending_verifications_per_address &&
         static_cast<int>(verifier.pending()) < opt.max_verify_queue;
}

GatewayReply Gateway::Impl::request(Client& c) {
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

GatewayReply Gateway::Impl::heartbeat(Client& c, const json& msg) {
  if (auto it = msg.find("ticket"); it != msg.end() && !it->is_null()) {
    Ticket& t = held(c, msg, "heartbeat");
    t.heard_at = now();
    // Past its lifetime it is not extended (poll() takes it back).
    if (!expired(t)) {
      // Lost (it expired) when false: the next progress gets a 'lost' verdict.
      if (tickets.extend(t)) t.renewed_at = unix_now();
    }
  }
  store.heartbeat(c.holder.worker_id, c.ticket ? std::optional(c.ticket->trial_id) : std::nullopt);
  GatewayReply r;
  r.frames.push_back(frame({{"type", "heartbeat"}}));
  return r;
}

// Frames before hello are held to max_hello_bytes, the rest to their kind's limit.
void Gateway::Impl::check_size(const Client& c, std::size_t size, std::size_t limit,
                               const char* kind) const {
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

GatewayReply Gateway::Impl::dispatch(Client& c, std::string_view frame_text) {
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
    violate("bad_version", "unsupported protocol version " + v->dump() + "; this server speaks v1",
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

GatewayReply Gateway::Impl::dispatch_binary(Client& c, std::string_view bytes) {
  check_size(c, bytes.size(), opt.max_binary_bytes, "binary");
  if (!c.greeted) violate("bad_message", "binary frame: the first message must be hello");
  return weights(c, bytes);
}

// Periodic duties: no hello in time, tickets past their lifetime, old rows.
void Gateway::Impl::sweep(std::vector<std::pair<ClientId, GatewayReply>>& out) {
  const double t = now();
  for (auto& [id, c] : clients) {
    if (c.closing) continue;
    if (!c.greeted && t - c.opened_at > opt.hello_timeout_seconds) {
      c.closing = true;
      out.emplace_back(id, error_reply({kPolicy, "hello_timeout",
                                        "hello: none within " +
                                            json(opt.hello_timeout_seconds).dump() + " seconds"}));
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
  Impl::Client& c = impl_->clients[id];
  c.address = address_of(remote_address);
  c.remote = std::move(remote_address);
  c.opened_at = impl_->now();
}

bool Gateway::greeted(ClientId id) const {
  auto it = impl_->clients.find(id);
  return it != impl_->clients.end() && it->second.greeted;
}

GatewayReply Gateway::on_text(ClientId id, std::string_view frame) {
  return impl_->guarded(id, [&](Impl::Client& c) { return impl_->dispatch(c, frame); });
}

GatewayReply Gateway::on_binary(ClientId id, std::string_view frame) {
  return impl_->guarded(id, [&](Impl::Client& c) { return impl_->dispatch_binary(c, frame); });
}

void Gateway::close(ClientId id) {
  auto it = impl_->clients.find(id);
  if (it == impl_->clients.end()) return;
  Impl::Client& c = it->second;
  try {
    impl_->abandon(c);
    if (c.greeted) {
      impl_->store.mark_worker_gone(c.holder.worker_id);
      impl_->store.append_event("worker.left", {{"worker", c.holder.worker_id}});
    }
  } catch (const std::exception&) {
  }
  {
    std::lock_guard lock(impl_->backends_mu);
    impl_->backends.erase(c.holder.worker_id);
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

nlohmann::json Gateway::worker_backends() const {
  std::lock_guard lock(impl_->backends_mu);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [id, b] : impl_->backends) out[id] = b;
  return out;
}

std::size_t Gateway::clients() const {
  return impl_->clients.size();
}

std::size_t Gateway::verifications_pending() const {
  return impl_->verifier.pending();
}

}  // namespace dnnlab::server
