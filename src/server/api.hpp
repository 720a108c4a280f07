// The REST API as a function from a request to a response, with no sockets:
// routing, auth, parameter checks and JSON. server.cpp feeds it from Beast.
// Every error is a JSON object {"error": "...", "field": "..."?}.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
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
};

struct ApiResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string route;  // pattern for metrics ("/api/trials/{id}", "static", "unmatched")
  std::string allow;  // for 405
  bool immutable = false;
  // Set for reads that may run on a reader thread with that thread's own
  // store (the trial list): the session calls it and sends what it returns.
  std::function<ApiResponse(store::ResultStore&)> deferred;
};

// How stale trial counts (and list totals) may be: a live dashboard's refresh.
constexpr std::chrono::milliseconds kCountsMaxAge{250};

struct ApiConfig {
  std::string token;
  bool public_reads = true;
  std::string web_root;
};

// Splits "a=1&b=x%20y" (percent- and plus-decoded). Throws ApiError on a bad escape.
std::map<std::string, std::string> parse_query(std::string_view query);

class Api {
 public:
  Api(store::ResultStore& store, ExperimentRunner& runner, const HttpMetrics& metrics,
      ApiConfig config);

  // Never throws: every failure is a JSON error response.
  ApiResponse handle(const ApiRequest& request);

  // Shared with the WebSocket stream.
  static nlohmann::json event_json(const store::EventRecord& e);
  // The synthetic "throughput" event's data.
  nlohmann::json throughput();
  bool anything_running();
  // True when the request may read (public reads, or the token matches).
  bool may_read(std::string_view authorization, std::string_view query_token) const;

 private:
  struct ExperimentMeta {
    std::string metric = "val_acc";
    bool maximize = true;
    std::vector<std::string> parameters;
    bool parsed = false;
  };

  ApiResponse route(const ApiRequest& r, std::string_view path,
                    const std::map<std::string, std::string>& query);
  nlohmann::json list_experiments();
  nlohmann::json experiment_summary(const store::ExperimentRecord& e);
  ApiResponse get_experiment(std::int64_t id);
  ApiResponse submit(const std::string& body);
  ApiResponse cancel(std::int64_t id);
  ApiResponse list_trials(std::int64_t id, const std::map<std::string, std::string>& query);
  ApiResponse get_trial(std::int64_t id);
  nlohmann::json workers();
  nlohmann::json stats();
  ApiResponse events(const std::map<std::string, std::string>& query);
  std::string prometheus();
  const ExperimentMeta& meta(const store::ExperimentRecord& e);
  // trial_counts() scans the experiment's trials (about 12 ms at 100,000), so
  // every listing would pay it: counts are reused for up to kCountsMaxAge,
  // and dropped at once after this server's own writes.
  store::TrialCounts counts(std::int64_t experiment_id);
  void forget_counts() { counts_.clear(); }

  store::ResultStore& store_;
  ExperimentRunner& runner_;
  const HttpMetrics& metrics_;
  ApiConfig config_;
  std::map<std::int64_t, ExperimentMeta> meta_;
  struct CachedCounts {
    std::chrono::steady_clock::time_point at;
    store::TrialCounts counts;
  };
  std::map<std::int64_t, CachedCounts> counts_;
};

nlohmann::json trial_json(const store::TrialRecord& t, bool with_curve);
// The same object as trial_json(t, false), written straight into `out`: the
// trial list is the hot path, and building nlohmann trees was most of its time.
void append_trial_json(std::string& out, const store::TrialRecord& t);

}  // namespace dnnlab::server
