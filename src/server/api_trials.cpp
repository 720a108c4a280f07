// /api/experiments/{id}/trials (sorted, filtered, paged; run on a reader
// thread) and /api/trials/{id} (with its curve), both by the one trial encoder.
#include <algorithm>
#include <limits>
#include <optional>

#include "server/api_internal.hpp"
#include "store/trial_json.hpp"

namespace dnnlab::server {

using namespace api_detail;
using nlohmann::json;
using store::append_json_int;
using store::append_json_string;
using store::append_trial_json;

namespace {

constexpr std::string_view kSortColumns[] = {
    "id",         "index",       "seed",        "status",    "attempt",
    "started_at", "finished_at", "train_loss",  "train_acc", "val_loss",
    "val_acc",    "test_acc",    "epochs_done", "seconds",   "worker"};
constexpr std::string_view kParamPrefix = "params.";

}  // namespace

ApiResponse Api::list_trials(const Call& c) {
  const std::int64_t id = c.id;
  const auto& query = c.query;
  store::TrialQuery tq;
  std::optional<std::string> param;  // of sort=params.NAME, checked against the experiment's below
  if (auto it = query.find("sort"); it != query.end()) {
    bool ok = false;
    for (auto c : kSortColumns) ok = ok || it->second == c;
    if (std::string_view(it->second).starts_with(kParamPrefix)) {
      param = it->second.substr(kParamPrefix.size());
      ok = true;
    }
    if (!ok)
      return error_response(400,
                            "unknown sort column '" + it->second +
                                "' (a trial column, or params.NAME for a parameter)",
                            "sort");
    tq.sort_by = it->second;
  }
  if (auto it = query.find("order"); it != query.end()) {
    if (it->second != "asc" && it->second != "desc")
      return error_response(400, "order must be asc or desc, got '" + it->second + "'", "order");
    tq.descending = it->second == "desc";
  }
  if (auto it = query.find("status"); it != query.end()) {
    try {
      tq.status = store::parse_trial_status(it->second, "status");
    } catch (const std::invalid_argument&) {
      return error_response(400,
                            "status must be one of queued, running, finished, pruned, failed, "
                            "cancelled; got '" +
                                it->second + "'",
                            "status");
    }
  }
  tq.limit = 100;
  if (auto it = query.find("limit"); it != query.end())
    tq.limit = parse_int(it->second, "limit", 1, 1000);
  if (auto it = query.find("offset"); it != query.end())
    tq.offset = parse_int(it->second, "offset", 0, std::numeric_limits<std::int64_t>::max() / 2);

  const auto experiment = c.store.experiment(id);
  if (!experiment) return error_response(404, "no experiment " + std::to_string(id), "id");
  if (const auto names = meta(*experiment).parameters;
      param && meta(*experiment).parsed &&
      std::find(names.begin(), names.end(), *param) == names.end()) {
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    return error_response(
        400,
        "unknown parameter '" + *param + "' in sort=" + tq.sort_by +
            " (this experiment's parameters: " + (known.empty() ? "none" : known) + ")",
        "sort");
  }
  const store::TrialCounts n = counts(c.store, id);
  const std::int64_t total = tq.status ? count_of(n, *tq.status) : n.total();
  ApiResponse deferred;
  deferred.deferred = [id, tq, total](store::ResultStore& st) {
    const auto trials = st.trials(id, tq);
    ApiResponse r;
    r.body.reserve(512 + 450 * trials.size());
    r.body += "{\"total\":";
    append_json_int(r.body, total);
    r.body += ",\"offset\":";
    append_json_int(r.body, tq.offset);
    r.body += ",\"limit\":";
    append_json_int(r.body, tq.limit);
    r.body += ",\"sort\":";
    append_json_string(r.body, tq.sort_by);
    r.body += tq.descending ? ",\"order\":\"desc\"" : ",\"order\":\"asc\"";
    r.body += ",\"trials\":[";
    for (std::size_t i = 0; i < trials.size(); ++i) {
      if (i) r.body.push_back(',');
      append_trial_json(r.body, trials[i]);
    }
    r.body += "]}";
    return r;
  };
  return deferred;
}

ApiResponse Api::get_trial(const Call& c) {
  const std::int64_t id = c.id;
  auto t = c.store.trial(id);
  if (!t) return error_response(404, "no trial " + std::to_string(id), "id");
  ApiResponse r;
  append_trial_json(r.body, *t, /*with_curve=*/true);
  // Its kept weights file, if any (the list has no bytes: at most K +
  // pinned rows), for the trial page's link.
  r.body.pop_back();
  r.body += ",\"weights\":";
  std::string weights = "null";
  for (const store::WeightsRecord& w : c.store.weights_of(t->experiment_id))
    if (w.trial_id == id)
      weights = json{{"url", "/api/trials/" + std::to_string(id) + "/weights"},
                     {"size", w.size},
                     {"sha256", w.sha256}}
                    .dump();
  r.body += weights + "}";
  return r;
}

// The kept safetensors file, read on a reader thread (up to
// store::kMaxWeightsBytes); 404 when the retention rule kept none.
ApiResponse Api::get_trial_weights(const Call& c) {
  const std::int64_t id = c.id;
  ApiResponse deferred;
  deferred.deferred = [id](store::ResultStore& st) {
    auto w = st.weights(id);
    if (!w) {
      if (!st.trial(id)) return error_response(404, "no trial " + std::to_string(id), "id");
      return error_response(404,
                            "trial " + std::to_string(id) +
                                " keeps no weights (the best K of its experiment and pinned "
                                "trials do; see docs/sweep.md, Weights)",
                            "id");
    }
    ApiResponse r;
    r.content_type = "application/octet-stream";
    r.body = std::move(w->bytes);
    return r;
  };
  return deferred;
}

// POST /api/trials/{id}/pin and /unpin: its weights are kept whatever its rank.
ApiResponse Api::pin_trial(const Call& c) {
  const bool pin = c.path.ends_with("/pin");
  try {
    c.store.set_pinned(c.id, pin);
  } catch (const std::invalid_argument&) {
    return error_response(404, "no trial " + std::to_string(c.id), "id");
  }
  return json_response(200, {{"id", c.id}, {"pinned", pin}});
}

}  // namespace dnnlab::server
