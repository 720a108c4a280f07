// Gateway::Impl: the gateway's state and its message handlers, shared by
// gateway.cpp (hello, requests, heartbeats, dispatch, the periodic sweep) and
// gateway_results.cpp (progress, results, weights, verification outcomes).
// Private to the gateway.
#pragma once
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/gateway.hpp"
#include "server/gateway_assets.hpp"
#include "server/gateway_tickets.hpp"
#include "server/gateway_trust.hpp"
#include "server/gateway_verifier.hpp"
#include "server/gateway_wire.hpp"

namespace dnnlab::server {

struct Gateway::Impl {
  using json = nlohmann::json;
  static constexpr double kInf = std::numeric_limits<double>::infinity();

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
  // Worker id -> what its browser last said it trains on ({"backend",
  // "adapter"}: gateway_wire's backend_report), for /api/workers, which
  // reads it from another thread. A connection's entry goes with it.
  mutable std::mutex backends_mu;
  std::map<std::string, json> backends;
  void note_backend(const Client& c, const json& report) {
    if (report.empty()) return;
    std::lock_guard lock(backends_mu);
    backends[c.holder.worker_id].merge_patch(report);
  }
  Verifier verifier;  // last: stopped first

  double now() const { return opt.clock ? opt.clock() : wire::unix_now(); }

  std::vector<std::shared_ptr<const Shard>> held_shards() const {
    std::vector<std::shared_ptr<const Shard>> out;
    for (const auto& [_, cl] : clients)
      if (cl.ticket && cl.ticket->shard) out.push_back(cl.ticket->shard);
    return out;
  }

  // ---- messages ----
  GatewayReply hello(Client& c, const json& msg);

  Ticket& held(Client& c, const json& msg, const char* type);

  bool expired(const Ticket& t) const { return now() > t.issued_at + opt.ticket_lifetime_seconds; }
  // How long a client holding a ticket may be silent: its lease, but never
  // less than three heartbeats (a short --browser-lease must not close
  // clients between two of them; the gateway renews the queue's lease).
  double silence_limit() const { return std::max(opt.lease_seconds, 3 * opt.heartbeat_seconds); }

  // The client gave its ticket up unfinished: the trial goes back without
  // spending an attempt, and it counts against the client.
  void abandon(Client& c);

  // Whether one more native re-run for this client may be queued: its
  // identity's, its address's and the verifier's bounds.
  bool may_verify(const Client& c);

  GatewayReply idle(double retry, const char* reason) {
    GatewayReply r;
    json j{{"type", "idle"}, {"retry_seconds", retry}};
    if (reason) j["reason"] = reason;
    r.frames.push_back(wire::frame(std::move(j)));
    return r;
  }

  GatewayReply request(Client& c);

  GatewayReply progress(Client& c, const json& msg);

  GatewayReply result(Client& c, const json& msg);

  GatewayReply weights(Client& c, std::string_view bytes);

  GatewayReply accepted(Client& c, bool counted, const char* reason = nullptr);

  GatewayReply heartbeat(Client& c, const json& msg);

  // ---- verification ----
  void submit(VerifyJob job);

  void decided(const VerifyOutcome& o, std::vector<std::pair<ClientId, GatewayReply>>& out);

  // The identity's results are not to be trusted: refuse it, close its
  // connections, reopen its trials.
  void quarantine(const std::string& identity, const std::string& worker_id, std::int64_t trial,
                  const std::string& why, std::vector<std::pair<ClientId, GatewayReply>>& out);

  // Frames before hello are held to max_hello_bytes, the rest to their kind's limit.
  void check_size(const Client& c, std::size_t size, std::size_t limit, const char* kind) const;

  GatewayReply dispatch(Client& c, std::string_view frame_text);

  GatewayReply dispatch_binary(Client& c, std::string_view bytes);

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
    } catch (const wire::Violation& v) {
      c.closing = true;
      abandon(c);
      if (v.kind == "out_of_range" && c.greeted) {
        quarantine(c.identity, c.holder.worker_id, 0, v.message, deferred);
      }
      return wire::error_reply(v);
    } catch (const std::exception& e) {
      return wire::error_reply(
          {wire::kInternal, "internal", std::string("internal error: ") + e.what()});
    }
  }

  // Periodic duties: no hello in time, tickets past their lifetime, old rows.
  void sweep(std::vector<std::pair<ClientId, GatewayReply>>& out);
};

}  // namespace dnnlab::server
