// /api/experiments: list, get, submit (the sweep parsed off the io thread),
// cancel; each experiment's metric and counts, cached.
#include <chrono>

#include "data/data_root.hpp"
#include "nn/errors.hpp"
#include "server/api_internal.hpp"
#include "sweep/sweep_data.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::server {

using namespace api_detail;
using nlohmann::json;

json api_detail::counts_json(const store::TrialCounts& c) {
  return {{"queued", c.queued}, {"running", c.running}, {"finished", c.finished},
          {"pruned", c.pruned}, {"failed", c.failed},   {"cancelled", c.cancelled},
          {"total", c.total()}};
}

void api_detail::add(store::TrialCounts& a, const store::TrialCounts& b) {
  a.queued += b.queued;
  a.running += b.running;
  a.finished += b.finished;
  a.pruned += b.pruned;
  a.failed += b.failed;
  a.cancelled += b.cancelled;
}

std::int64_t api_detail::count_of(const store::TrialCounts& c, store::TrialStatus s) {
  switch (s) {
    case store::TrialStatus::queued:
      return c.queued;
    case store::TrialStatus::running:
      return c.running;
    case store::TrialStatus::finished:
      return c.finished;
    case store::TrialStatus::pruned:
      return c.pruned;
    case store::TrialStatus::failed:
      return c.failed;
    case store::TrialStatus::cancelled:
      return c.cancelled;
  }
  return 0;
}

Api::ExperimentMeta Api::meta(const store::ExperimentRecord& e) {
  {
    std::lock_guard lock(cache_mu_);
    if (auto it = meta_.find(e.id); it != meta_.end()) return it->second;
  }
  ExperimentMeta m;
  try {
    sweep::SweepSpec s =
        sweep::parse_sweep(e.spec_text, e.spec_path.empty() ? e.name : e.spec_path);
    m.metric = s.search.metric;
    m.maximize = s.search.maximize();
    for (const auto& p : s.search.parameters) m.parameters.push_back(p.name);
    m.parsed = true;
  } catch (const std::exception&) {
    // An experiment made by other means (or an older format): report the defaults.
  }
  std::lock_guard lock(cache_mu_);
  return meta_.emplace(e.id, std::move(m)).first->second;
}

json Api::experiment_summary(store::ResultStore& store, const store::ExperimentRecord& e) {
  const ExperimentMeta mt = meta(e);
  json j = {{"id", e.id},
            {"name", e.name},
            {"status", store::to_string(e.status)},
            {"method", e.method},
            {"created_at", e.created_at},
            {"counts", counts_json(counts(store, e.id))},
            {"metric", mt.metric},
            {"mode", mt.maximize ? "max" : "min"}};
  if (auto p = runner_.planned(e.id)) j["planned"] = *p;
  json best = nullptr;
  if (auto b = store.best_trial(e.id, mt.metric, mt.maximize))
    best = {{"trial_id", b->id},
            {"index", b->index},
            {"metric", mt.metric},
            {"value", opt(store::metric(b->metrics, mt.metric))}};
  j["best"] = std::move(best);
  return j;
}

store::TrialCounts Api::counts(store::ResultStore& store, std::int64_t experiment_id) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(cache_mu_);
    auto it = counts_.find(experiment_id);
    if (it != counts_.end() && now - it->second.at < kCountsMaxAge) return it->second.counts;
  }
  store::TrialCounts c = store.trial_counts(experiment_id);
  std::lock_guard lock(cache_mu_);
  counts_[experiment_id] = {now, c};
  return c;
}

ApiResponse Api::list_experiments(const Call& c) {
  json list = json::array();
  for (const auto& e : c.store.experiments()) list.push_back(experiment_summary(c.store, e));
  return json_response(200, {{"experiments", std::move(list)}});
}

ApiResponse Api::get_experiment(const Call& c) {
  const std::int64_t id = c.id;
  auto e = c.store.experiment(id);
  if (!e) return error_response(404, "no experiment " + std::to_string(id), "id");
  json j = experiment_summary(c.store, *e);
  j["spec_text"] = e->spec_text;
  j["spec_path"] = e->spec_path;
  j["spec_hash"] = e->spec_hash;
  j["provenance"] = e->provenance;
  j["parameters"] = meta(*e).parameters;
  return json_response(200, j);
}

// The body and the sweep are parsed on a worker thread (a large sweep takes
// a while); the experiment is written by the runner (its own connections).
ApiResponse Api::submit(const Call& c) {
  ApiResponse resp;
  resp.background = [body = c.request.body, this]() -> std::function<ApiResponse()> {
    json req;
    try {
      req = json::parse(body);
    } catch (const json::parse_error& e) {
      return [r = error_response(400, std::string("request body is not valid JSON: ") + e.what(),
                                 "body")] { return r; };
    }
    auto fail = [](ApiResponse r) -> std::function<ApiResponse()> { return [r] { return r; }; };
    if (!req.is_object())
      return fail(error_response(400, "request body must be a JSON object", "body"));
    for (const auto& [k, v] : req.items())
      if (k != "spec" && k != "name")
        return fail(error_response(400, "unknown field '" + k + "'", k));
    if (!req.contains("spec")) return fail(error_response(400, "missing field 'spec'", "spec"));
    if (!req["spec"].is_string())
      return fail(error_response(400, "'spec' must be a string (the sweep file's text)", "spec"));
    if (req.contains("name") && !req["name"].is_string())
      return fail(error_response(400, "'name' must be a string", "name"));
    std::string name = req.value("name", std::string("sweep.yaml"));
    std::string text = req["spec"].get<std::string>();
    std::shared_ptr<sweep::SweepSpec> sweep;
    try {
      // A token holder may not make the server read its files: data files
      // only from inside the data root, checked before the parser reads a
      // file's header (docs/security.md, "Data files").
      data::DataRootScope only_inside(config_.data_root);
      sweep = ExperimentRunner::parse(text, name);
      for (const nn::DataSpec& d : sweep::data_specs(*sweep))
        data::check_data_root(d, config_.data_root, "template.data", name);
    } catch (const SpecError& e) {
      return fail(error_response(400, e.what(), e.field().empty() ? "spec" : e.field()));
    }
    // `this` outlives every pending handler of the server.
    return [this, sweep, text = std::move(text), name = std::move(name)]() {
      try {
        std::int64_t id = runner_.submit_parsed(sweep, text, name);
        forget_counts();
        return json_response(202, {{"id", id}});
      } catch (const SpecError& e) {
        return error_response(400, e.what(), e.field().empty() ? "spec" : e.field());
      }
    };
  };
  return resp;
}

ApiResponse Api::cancel(const Call& c) {
  const std::int64_t id = c.id;
  if (!runner_.cancel(id)) return error_response(404, "no experiment " + std::to_string(id), "id");
  forget_counts();
  auto e = c.store.experiment(id);
  return json_response(200, {{"id", id}, {"status", store::to_string(e->status)}});
}

}  // namespace dnnlab::server
