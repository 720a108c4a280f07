// Gateway: the server side of worker protocol v1 (docs/protocol.md) for
// browser workers on /join. It leases trials from the queue on each client's
// behalf, turns them into tickets (a JSON spec + a content-hashed data shard),
// streams the client's epochs into the store, asks the experiment's scheduler
// (ASHA, median) for a verdict after each one, checks results before they
// count (finite values, parameter count, a fraction re-run natively) and
// quarantines clients whose results disagree.
//
// It is socket-free: the server's JoinSession feeds it frames and sends what
// it answers, so the protocol is tested without a network. Not thread-safe
// but for asset(): the server calls everything else from one thread of its
// own (the gateway lane, with its own store and queue connections) and
// asset() from the io thread; the verifier re-runs trials on its own thread
// with its own connections.
//
//   Gateway gw(store, queue, options);
//   auto id = gw.open("127.0.0.1:5123");
//   GatewayReply r = gw.on_text(id, R"({"v":1,"type":"hello",...})");
//   for (auto& f : r.frames) send(f);
//   if (r.close) close_with(r.close_code, r.reason);
//   gw.close(id);  // the connection ended: its ticket goes back to the queue
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nn/spec.hpp"
#include "queue/task_queue.hpp"
#include "store/result_store.hpp"

namespace dnnlab::server {

struct GatewayOptions {
  std::string join_token;  // required: hello must carry it
  std::string web_root;    // <web_root>/core/* is served under content-hashed names
  std::string data_dir;    // where the data sets are (empty: the default)
  // The verifier opens its own connections with these.
  std::string store_url, broker_url;
  // Signs client identities and draws which results are verified; never sent
  // to clients. Empty: a random one for this process (identities then do not
  // survive a restart). `dnnlab serve` keeps it in dnnlab.gateway-secret.
  std::string secret;
  double lease_seconds = 120;
  double heartbeat_seconds = 10;
  // Adaptive replication: a client's results are all re-run natively until
  // `trust_after` agreed; afterwards a fraction halving with each result
  // (1/2, 1/4, ...), never below this one. 0.05 keeps the re-runs of a
  // trusted client at about 5-7% of its CPU (bench/RESULTS.md).
  double verify_fraction = 0.05;
  int trust_after = 3;
  // Re-runs queued per client; a client over it gets `idle` until they are done.
  int max_pending_verifications = 4;
  // A client whose failures were not confirmed by a native re-run this many
  // times is quarantined.
  int max_unconfirmed_failures = 2;
  std::size_t max_text_bytes = 64 * 1024;
  std::size_t max_binary_bytes = 64u << 20;
  std::size_t max_hello_bytes = 4096;  // any frame before hello
  double hello_timeout_seconds = 10;   // closed when no hello came in time
  int hellos_per_minute = 30;          // per remote address
  // A ticket's life, however often it is extended by heartbeats.
  double ticket_lifetime_seconds = 4 * 3600;
  int max_tickets_per_client = 2;    // concurrent, per identity
  int max_tickets_per_address = 16;  // concurrent, per remote address
  // After this many abandoned tickets in a row a client gets no ticket for
  // `abandon_cooldown_seconds`.
  int max_abandons = 3;
  double abandon_cooldown_seconds = 600;
  // The same, counted per remote address across its identities (identities
  // are free: a hello without a credential makes one).
  int max_abandons_per_address = 12;
  // Re-runs queued for all identities of one address; over it they get
  // `idle` and a result that would need one is refused (given back).
  int max_pending_verifications_per_address = 8;
  // Failures of one address's identities that re-runs did not confirm; past
  // it, that address's `failed` results are refused, not re-run.
  int max_unconfirmed_failures_per_address = 4;
  // Re-runs queued in all: past it, untrusted clients get `idle` and results
  // that need a re-run are refused (given back), never queued.
  int max_verify_queue = 64;
  // A result that would be among the experiment's best `verify_top_k` trials
  // (by the search metric, among counted ones) is re-run before it counts,
  // whoever sent it; so is every pruned one (its stop was a scheduler's
  // decision taken on the client's numbers).
  int verify_top_k = 10;
  // Progress frames per ticket: a burst of `progress_burst`, refilled at
  // `progress_per_second` (each one is a stored epoch and an event).
  double progress_per_second = 20;
  int progress_burst = 100;
  // Rows of browser workers that left are deleted after this long.
  double gone_worker_ttl_seconds = 24 * 3600;
  // Unix seconds; tests replace it.
  std::function<double()> clock;
};

// What to do after a frame: send `frames` (text) in order, then close if asked.
struct GatewayReply {
  std::vector<std::string> frames;
  bool close = false;
  unsigned short close_code = 1000;  // 1002 protocol, 1008 policy, 1009 too big
  std::string reason;                // at most 123 bytes (a WebSocket close reason)
};

// A file served over HTTP by the gateway (core modules, data shards).
struct GatewayAsset {
  std::string content_type;
  std::shared_ptr<const std::string> body;
};

class Gateway {
 public:
  using ClientId = std::uint64_t;

  Gateway(store::ResultStore& store, queue::TaskQueue& queue, GatewayOptions options);
  ~Gateway();  // stops the verifier (a running re-run finishes first)
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  ClientId open(std::string remote_address);
  // The same with an id the caller chose (unused so far, nonzero): the
  // server numbers connections on its io thread and hands the gateway's
  // work to a thread of its own.
  void open(ClientId id, std::string remote_address);
  GatewayReply on_text(ClientId id, std::string_view frame);
  GatewayReply on_binary(ClientId id, std::string_view frame);
  // The connection ended (or is being closed): its ticket, if any, is
  // released to the queue at once and the worker marked gone.
  void close(ClientId id);

  // Clients to disconnect now (quarantined by the verifier), with the reply
  // to send them. Call periodically on the io thread.
  // Also closes clients that said no hello in time and tickets past their
  // lifetime, and expires rows of browser workers that left long ago.
  std::vector<std::pair<ClientId, GatewayReply>> poll();

  // The largest frame this client may send now (small before hello): the
  // session reads no more than this.
  std::size_t max_frame(ClientId id) const;
  // Whether the client's hello was accepted.
  bool greeted(ClientId id) const;

  // GET /core/<stem>.<hash>.<ext> and /shards/<sha256>.safetensors.
  std::optional<GatewayAsset> asset(std::string_view path);
  // The content-hashed URLs of the wasm core ({"js":..., "wasm":...}; empty
  // strings when the core was not built).
  nlohmann::json core_urls() const;

  // Connected browser workers' last reported backend: {"<worker id>":
  // {"backend", "adapter": {"vendor", "architecture"}}} (what they said:
  // for display only). Safe to call from any thread.
  nlohmann::json worker_backends() const;

  std::size_t clients() const;
  // Re-runs queued or running on the verifier (for tests: wait until 0).
  std::size_t verifications_pending() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The spec of one trial as the wasm core's dnnlab_model_create() reads it
// (see src/wasm/dnnlab_wasm.h), given the data set's sample shape and class count.
nlohmann::json core_spec_json(const nn::RunSpec& spec, const std::vector<std::int64_t>& input,
                              int classes);

}  // namespace dnnlab::server
