// The REST API as a function from a request to a response, with no sockets:
// routing, auth, parameter checks and JSON. server.cpp feeds it from Beast.
// Every error is a JSON object {"error": "...", "field": "..."?}.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/experiment_runner.hpp"
#include "server/metrics.hpp"
#include "store/result_store.hpp"

namespace dnnlab::server {

struct ApiRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::string body;
  std::string authorization;  // the Authorization header, if any
  bool websocket = false;     // a WebSocket upgrade request (method GET)
};

// What a WebSocket upgrade that the API accepted (status 101) turns into.
enum class Upgrade { none, events, join };

struct ApiResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string route;  // matched pattern for metrics ("/api/trials/{id}", "static", "unmatched")
  std::string allow;  // for 405
  unsigned retry_after = 0;  // seconds, for 503 (the store is unreachable)
  bool immutable = false;
  Upgrade upgrade = Upgrade::none;  // status 101: the session upgrades
  std::int64_t events_after = -1;   // Upgrade::events: replay after this id (-1: from now)
  // Upgrade::events: the reader holds a token, so it is sent what only token
  // holders see (Api::event_json's private fields).
  bool private_fields = false;
  // Set for reads that may run on a reader thread with that thread's own
  // store (the trial list): the session calls it and sends what it returns.
  std::function<ApiResponse(store::ResultStore&)> deferred;
  // Set for work too slow for the io thread (parsing a submitted sweep): the
  // session runs it on a worker thread; what it returns runs back on the io
  // thread (the store writes) and gives the answer.
  std::function<std::function<ApiResponse()>()> background;
};

// A file the browser gateway serves (the wasm core, data shards).
struct ServedFile {
  std::string content_type;
  std::shared_ptr<const std::string> body;
};

// How stale trial counts (and list totals) may be: a live dashboard's refresh.
constexpr std::chrono::milliseconds kCountsMaxAge{250};

struct ApiConfig {
  std::string token;
  bool public_reads = true;
  std::string read_token;  // also lets reads through when public_reads is false; never writes
  std::string web_root;
  // Submitted sweeps may name data files (data.path, ...) only inside this
  // directory (the server's --data); empty: they may name none.
  std::string data_root;
  // /core/... and /shards/... files; none when unset.
  std::function<std::optional<ServedFile>(std::string_view path)> gateway_file;
  // Browser workers' reported backends (Gateway::worker_backends); none when unset.
  std::function<nlohmann::json()> worker_backends;
};

// The answer to a request whose handling threw: 400 for std::invalid_argument
// (the message names the field), 503 with Retry-After while a server store
// (postgres://) is unreachable (store::StoreUnavailableError), else 500.
ApiResponse failure_response(const std::exception& e);

// Splits "a=1&b=x%20y" (percent- and plus-decoded). Throws ApiError on a bad escape.
std::map<std::string, std::string> parse_query(std::string_view query);

class Api {
 public:
  Api(store::ResultStore& store, ExperimentRunner& runner, const HttpMetrics& metrics,
      ApiConfig config);

  // Never throws: every failure is a JSON error response. Routes by one table
  // (kRoutes in api.cpp; the handlers in api_<resource>.cpp): pattern, method, who may call it, the
  // query keys it takes. GET routes answer HEAD too; other methods get 405 with Allow.
  // `store`: the calling thread's own connection (the server runs handlers
  // on reader threads, each with its own); null: the one given at construction.
  // Thread-safe: handlers may run on several threads at once.
  ApiResponse handle(const ApiRequest& request, store::ResultStore* store = nullptr);

  // Shared with the WebSocket stream. Without private_fields (a public
  // reader) a browser's User-Agent is left out of worker.joined.
  static nlohmann::json event_json(const store::EventRecord& e, bool private_fields);
  // True when event_json(e, false) differs from event_json(e, true).
  static bool event_has_private_fields(const store::EventRecord& e);
  // The synthetic "throughput" event's data.
  nlohmann::json throughput(store::ResultStore& store);
  bool anything_running(store::ResultStore& store);
  // True when the request may read (public reads, or the token matches).
  bool may_read(std::string_view authorization, std::string_view query_token) const;
  // True when the request carries the write or the read token (Bearer or ?token=).
  bool holds_token(std::string_view authorization, std::string_view query_token) const;

 private:
  struct ExperimentMeta {
    std::string metric = "val_acc";
    bool maximize = true;
    std::vector<std::string> parameters;
    bool parsed = false;
  };

  // One matched request, as the route's handler sees it.
  struct Call {
    const ApiRequest& request;
    std::string_view path;
    std::int64_t id;  // the {id} part; 0 when the route has none
    const std::map<std::string, std::string>& query;
    bool token_holder = false;  // the write or the read token came with it
    store::ResultStore& store;  // this thread's connection
  };
  struct Route;
  static const std::vector<Route>& routes();

  ApiResponse route(const ApiRequest& r, std::string_view path, std::string_view query,
                    std::string& label, store::ResultStore& store);
  ApiResponse list_experiments(const Call&);
  nlohmann::json experiment_summary(store::ResultStore& store, const store::ExperimentRecord& e);
  ApiResponse get_experiment(const Call&);
  ApiResponse submit(const Call&);
  ApiResponse cancel(const Call&);
  ApiResponse list_trials(const Call&);
  ApiResponse get_trial(const Call&);
  ApiResponse get_trial_weights(const Call&);
  ApiResponse pin_trial(const Call&);
  ApiResponse workers(const Call&);
  ApiResponse get_stats(const Call&);
  ApiResponse events(const Call&);
  ApiResponse events_socket(const Call&);
  ApiResponse metrics(const Call&);
  ApiResponse no_such_route(const Call&);
  ApiResponse join_page(const Call&);
  ApiResponse join_socket(const Call&);
  ApiResponse gateway_file(const Call&);
  ApiResponse static_file(const Call&);
  nlohmann::json stats(store::ResultStore& store);
  std::string prometheus(store::ResultStore& store);
  // Parsed once per experiment (the first caller parses, outside the lock).
  ExperimentMeta meta(const store::ExperimentRecord& e);
  // trial_counts() scans the experiment's trials (about 12 ms at 100,000), so
  // every listing would pay it: counts are reused for up to kCountsMaxAge,
  // and dropped at once after this server's own writes.
  store::TrialCounts counts(store::ResultStore& store, std::int64_t experiment_id);
  void forget_counts() {
    std::lock_guard lock(cache_mu_);
    counts_.clear();
  }

  store::ResultStore& store_;
  ExperimentRunner& runner_;
  const HttpMetrics& metrics_;
  ApiConfig config_;
  std::mutex cache_mu_;  // meta_ and counts_: handlers run on several threads
  std::map<std::int64_t, ExperimentMeta> meta_;
  struct CachedCounts {
    std::chrono::steady_clock::time_point at;
    store::TrialCounts counts;
  };
  std::map<std::int64_t, CachedCounts> counts_;
};

}  // namespace dnnlab::server
