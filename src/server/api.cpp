// REST routes (see docs/openapi.yaml): experiments, trials, workers, stats,
// events, /metrics, and the static dashboard for everything else.
#include "server/api.hpp"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "nn/errors.hpp"
#include "server/static_files.hpp"
#include "server/token.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::server {

using nlohmann::json;
using store::TrialStatus;

namespace {

// An error that ends a request: status, message and the offending field.
struct ApiError {
  unsigned status;
  std::string message;
  std::string field;
};

constexpr std::string_view kJson = "application/json";

ApiResponse json_response(unsigned status, const json& body) {
  ApiResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

ApiResponse error_response(unsigned status, const std::string& message,
                           const std::string& field = {}) {
  json j = {{"error", message}};
  if (!field.empty()) j["field"] = field;
  return json_response(status, j);
}

json opt(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}

json counts_json(const store::TrialCounts& c) {
  return {{"queued", c.queued}, {"running", c.running}, {"finished", c.finished},
          {"pruned", c.pruned}, {"failed", c.failed},   {"cancelled", c.cancelled},
          {"total", c.total()}};
}

void add(store::TrialCounts& a, const store::TrialCounts& b) {
  a.queued += b.queued;
  a.running += b.running;
  a.finished += b.finished;
  a.pruned += b.pruned;
  a.failed += b.failed;
  a.cancelled += b.cancelled;
}

std::int64_t count_of(const store::TrialCounts& c, TrialStatus s) {
  switch (s) {
    case TrialStatus::queued:
      return c.queued;
    case TrialStatus::running:
      return c.running;
    case TrialStatus::finished:
      return c.finished;
    case TrialStatus::pruned:
      return c.pruned;
    case TrialStatus::failed:
      return c.failed;
    case TrialStatus::cancelled:
      return c.cancelled;
  }
  return 0;
}

// A whole decimal integer in [lo, hi], or ApiError 400 naming `field`.
std::int64_t parse_int(std::string_view s, std::string_view field, std::int64_t lo,
                       std::int64_t hi) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size())
    throw ApiError{400, std::string(field) + " must be an integer, got '" + std::string(s) + "'",
                   std::string(field)};
  if (v < lo || v > hi)
    throw ApiError{400,
                   std::string(field) + " must be in " + std::to_string(lo) + ".." +
                       std::to_string(hi) + ", got " + std::to_string(v),
                   std::string(field)};
  return v;
}

// A path id: digits only, positive.
std::int64_t parse_id(std::string_view s) {
  return parse_int(s, "id", 1, std::numeric_limits<std::int64_t>::max());
}

void only_params(const std::map<std::string, std::string>& query,
                 std::initializer_list<std::string_view> allowed) {
  for (const auto& [k, v] : query) {
    bool ok = false;
    for (auto a : allowed) ok = ok || k == a;
    if (!ok) throw ApiError{400, "unknown query parameter '" + k + "'", k};
  }
}

constexpr std::string_view kSortColumns[] = {
    "id",         "index",     "seed",     "status",  "attempt",  "started_at",  "finished_at",
    "train_loss", "train_acc", "val_loss", "val_acc", "test_acc", "epochs_done", "seconds"};

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> parts;
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  if (!parts.empty() && parts.back().empty() && parts.size() > 1) parts.pop_back();  // trailing /
  return parts;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string decode_component(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%') {
      int hi = i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
      int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
      if (hi < 0 || lo < 0) throw ApiError{400, "bad percent escape in the query string", "query"};
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::map<std::string, std::string> parse_query(std::string_view query) {
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start < query.size()) {
    std::size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    std::string_view pair = query.substr(start, end - start);
    if (!pair.empty()) {
      std::size_t eq = pair.find('=');
      std::string key = decode_component(pair.substr(0, eq));
      std::string value = eq == std::string_view::npos ? "" : decode_component(pair.substr(eq + 1));
      if (out.count(key)) throw ApiError{400, "query parameter '" + key + "' given twice", key};
      out.emplace(std::move(key), std::move(value));
    }
    start = end + 1;
  }
  return out;
}

json trial_json(const store::TrialRecord& t, bool with_curve) {
  json params = json::parse(t.config_json, nullptr, false);
  if (params.is_discarded()) params = t.config_json;
  const auto& m = t.metrics;
  json j = {{"id", t.id},
            {"experiment_id", t.experiment_id},
            {"index", t.index},
            {"params", std::move(params)},
            {"seed", t.seed},
            {"status", store::to_string(t.status)},
            {"attempt", t.attempt},
            {"worker", t.worker},
            {"started_at", opt(t.started_at)},
            {"finished_at", opt(t.finished_at)},
            {"train_loss", opt(m.train_loss)},
            {"train_acc", opt(m.train_acc)},
            {"val_loss", opt(m.val_loss)},
            {"val_acc", opt(m.val_acc)},
            {"test_acc", opt(m.test_acc)},
            {"epochs_done", m.epochs_done},
            {"seconds", m.seconds},
            {"error", t.error}};
  if (with_curve) {
    j["provenance"] = t.provenance;
    json curve = json::array();
    for (const auto& e : t.curve)
      curve.push_back({{"epoch", e.epoch},
                       {"train_loss", opt(e.train_loss)},
                       {"train_acc", opt(e.train_acc)},
                       {"val_loss", opt(e.val_loss)},
                       {"val_acc", opt(e.val_acc)},
                       {"seconds", e.seconds},
                       {"lr", opt(e.lr)}});
    j["curve"] = std::move(curve);
  }
  return j;
}

namespace {

void append_string(std::string& out, std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) {  // let nlohmann check (and repair) non-ASCII text
      out += json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
      return;
    }
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

template <typename Int>
void append_int(std::string& out, Int v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
}

void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";  // as nlohmann writes them
    return;
  }
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
  // Keep integral doubles recognisably floating ("1.0"), as nlohmann does.
  if (std::string_view(buf, p - buf).find_first_of(".eE") == std::string_view::npos) out += ".0";
}

void append_opt(std::string& out, const std::optional<double>& v) {
  if (v)
    append_double(out, *v);
  else
    out += "null";
}

}  // namespace

void append_trial_json(std::string& out, const store::TrialRecord& t) {
  const auto& m = t.metrics;
  out += "{\"id\":";
  append_int(out, t.id);
  out += ",\"experiment_id\":";
  append_int(out, t.experiment_id);
  out += ",\"index\":";
  append_int(out, t.index);
  out += ",\"params\":";
  if (json::accept(t.config_json))
    out += t.config_json;
  else
    append_string(out, t.config_json);
  out += ",\"seed\":";
  append_int(out, t.seed);
  out += ",\"status\":";
  append_string(out, store::to_string(t.status));
  out += ",\"attempt\":";
  append_int(out, t.attempt);
  out += ",\"worker\":";
  append_string(out, t.worker);
  out += ",\"started_at\":";
  append_opt(out, t.started_at);
  out += ",\"finished_at\":";
  append_opt(out, t.finished_at);
  out += ",\"train_loss\":";
  append_opt(out, m.train_loss);
  out += ",\"train_acc\":";
  append_opt(out, m.train_acc);
  out += ",\"val_loss\":";
  append_opt(out, m.val_loss);
  out += ",\"val_acc\":";
  append_opt(out, m.val_acc);
  out += ",\"test_acc\":";
  append_opt(out, m.test_acc);
  out += ",\"epochs_done\":";
  append_int(out, m.epochs_done);
  out += ",\"seconds\":";
  append_double(out, m.seconds);
  out += ",\"error\":";
  append_string(out, t.error);
  out += "}";
}

Api::Api(store::ResultStore& store, ExperimentRunner& runner, const HttpMetrics& metrics,
         ApiConfig config)
    : store_(store), runner_(runner), metrics_(metrics), config_(std::move(config)) {}

bool Api::may_read(std::string_view authorization, std::string_view query_token) const {
  if (config_.public_reads) return true;
  if (bearer_matches(authorization, config_.token)) return true;
  return !query_token.empty() &&
         bearer_matches("Bearer " + std::string(query_token), config_.token);
}

ApiResponse Api::handle(const ApiRequest& r) {
  std::string_view target = r.target;
  std::size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  const bool is_api = path == "/api" || path.rfind("/api/", 0) == 0;
  try {
    if (path.empty() || path[0] != '/')
      throw ApiError{400, "request target must be a path", "target"};
    auto params = parse_query(query);
    return route(r, path, params);
  } catch (const ApiError& e) {
    auto resp = error_response(e.status, e.message, e.field);
    resp.route = is_api ? "/api/*" : "static";
    return resp;
  } catch (const std::invalid_argument& e) {
    auto resp = error_response(400, e.what());
    resp.route = is_api ? "/api/*" : "static";
    return resp;
  } catch (const std::exception& e) {
    auto resp = error_response(500, std::string("internal error: ") + e.what());
    resp.route = is_api ? "/api/*" : "static";
    return resp;
  }
}

ApiResponse Api::route(const ApiRequest& r, std::string_view path,
                       const std::map<std::string, std::string>& query) {
  auto parts = split_path(path);
  const std::string& m = r.method;
  const bool is_write = m != "GET" && m != "HEAD";

  // Resolve the route pattern and the methods it takes, then check method and auth.
  std::string route;
  std::string allow = "GET";
  std::int64_t id = 0;
  std::string_view id_text;
  if (!parts.empty() && parts[0] == "api") {
    if (parts.size() == 2 && parts[1] == "experiments") {
      route = "/api/experiments";
      allow = "GET, POST";
    } else if (parts.size() == 3 && parts[1] == "experiments") {
      route = "/api/experiments/{id}";
      id_text = parts[2];
    } else if (parts.size() == 4 && parts[1] == "experiments" && parts[3] == "cancel") {
      route = "/api/experiments/{id}/cancel";
      allow = "POST";
      id_text = parts[2];
    } else if (parts.size() == 4 && parts[1] == "experiments" && parts[3] == "trials") {
      route = "/api/experiments/{id}/trials";
      id_text = parts[2];
    } else if (parts.size() == 3 && parts[1] == "trials") {
      route = "/api/trials/{id}";
      id_text = parts[2];
    } else if (parts.size() == 2 &&
               (parts[1] == "workers" || parts[1] == "stats" || parts[1] == "events")) {
      route = "/api/" + std::string(parts[1]);
    } else {
      ApiResponse resp = error_response(404, "no such API route: " + std::string(path), "path");
      resp.route = "/api/*";
      return resp;
    }
  } else if (path == "/metrics") {
    route = "/metrics";
  } else {
    route = "static";
    allow = "GET, HEAD";
  }

  auto finish = [&](ApiResponse resp) {
    resp.route = route;
    return resp;
  };
  if ((", " + allow + ",").find(", " + m + ",") == std::string::npos) {
    ApiResponse resp = error_response(405, "method " + m + " is not allowed on " + route, "method");
    resp.allow = allow;
    return finish(std::move(resp));
  }
  if (is_write && !bearer_matches(r.authorization, config_.token))
    return finish(error_response(401,
                                 r.authorization.empty()
                                     ? "this request needs 'Authorization: Bearer <token>'"
                                     : "the bearer token is wrong",
                                 "Authorization"));
  if (!is_write && route != "static") {
    auto t = query.find("token");
    if (!may_read(r.authorization, t == query.end() ? "" : t->second))
      return finish(error_response(401, "reads need the token on this server", "Authorization"));
  }
  if (!id_text.empty()) id = parse_id(id_text);

  if (route == "/api/experiments") {
    if (m == "POST") return finish(submit(r.body));
    only_params(query, {"token"});
    return finish(json_response(200, list_experiments()));
  }
  if (route == "/api/experiments/{id}") {
    only_params(query, {"token"});
    return finish(get_experiment(id));
  }
  if (route == "/api/experiments/{id}/cancel") return finish(cancel(id));
  if (route == "/api/experiments/{id}/trials") return finish(list_trials(id, query));
  if (route == "/api/trials/{id}") {
    only_params(query, {"token"});
    return finish(get_trial(id));
  }
  if (route == "/api/workers") {
    only_params(query, {"token"});
    return finish(json_response(200, workers()));
  }
  if (route == "/api/stats") {
    only_params(query, {"token"});
    return finish(json_response(200, stats()));
  }
  if (route == "/api/events") return finish(events(query));
  if (route == "/metrics") {
    ApiResponse resp;
    resp.content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp.body = prometheus();
    return finish(std::move(resp));
  }
  StaticReply s = serve_static(config_.web_root, path);
  ApiResponse resp;
  resp.status = s.status;
  resp.content_type = s.content_type;
  resp.body = std::move(s.body);
  resp.immutable = s.immutable;
  return finish(std::move(resp));
}

const Api::ExperimentMeta& Api::meta(const store::ExperimentRecord& e) {
  auto it = meta_.find(e.id);
  if (it != meta_.end()) return it->second;
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
  return meta_.emplace(e.id, std::move(m)).first->second;
}

json Api::experiment_summary(const store::ExperimentRecord& e) {
  const ExperimentMeta& mt = meta(e);
  json j = {{"id", e.id},
            {"name", e.name},
            {"status", store::to_string(e.status)},
            {"method", e.method},
            {"created_at", e.created_at},
            {"counts", counts_json(counts(e.id))},
            {"metric", mt.metric},
            {"mode", mt.maximize ? "max" : "min"}};
  if (auto p = runner_.planned(e.id)) j["planned"] = *p;
  json best = nullptr;
  if (auto b = store_.best_trial(e.id, mt.metric, mt.maximize))
    best = {{"trial_id", b->id},
            {"index", b->index},
            {"metric", mt.metric},
            {"value", opt(store::metric(b->metrics, mt.metric))}};
  j["best"] = std::move(best);
  return j;
}

store::TrialCounts Api::counts(std::int64_t experiment_id) {
  const auto now = std::chrono::steady_clock::now();
  auto it = counts_.find(experiment_id);
  if (it != counts_.end() && now - it->second.at < kCountsMaxAge) return it->second.counts;
  store::TrialCounts c = store_.trial_counts(experiment_id);
  counts_[experiment_id] = {now, c};
  return c;
}

json Api::list_experiments() {
  json list = json::array();
  for (const auto& e : store_.experiments()) list.push_back(experiment_summary(e));
  return {{"experiments", std::move(list)}};
}

ApiResponse Api::get_experiment(std::int64_t id) {
  auto e = store_.experiment(id);
  if (!e) return error_response(404, "no experiment " + std::to_string(id), "id");
  json j = experiment_summary(*e);
  j["spec_text"] = e->spec_text;
  j["spec_path"] = e->spec_path;
  j["spec_hash"] = e->spec_hash;
  j["provenance"] = e->provenance;
  j["parameters"] = meta(*e).parameters;
  return json_response(200, j);
}

ApiResponse Api::submit(const std::string& body) {
  json req;
  try {
    req = json::parse(body);
  } catch (const json::parse_error& e) {
    return error_response(400, std::string("request body is not valid JSON: ") + e.what(), "body");
  }
  if (!req.is_object()) return error_response(400, "request body must be a JSON object", "body");
  for (const auto& [k, v] : req.items())
    if (k != "spec" && k != "name") return error_response(400, "unknown field '" + k + "'", k);
  if (!req.contains("spec")) return error_response(400, "missing field 'spec'", "spec");
  if (!req["spec"].is_string())
    return error_response(400, "'spec' must be a string (the sweep file's text)", "spec");
  if (req.contains("name") && !req["name"].is_string())
    return error_response(400, "'name' must be a string", "name");
  const std::string name = req.value("name", std::string("sweep.yaml"));
  try {
    std::int64_t id = runner_.submit(req["spec"].get<std::string>(), name);
    forget_counts();
    return json_response(202, {{"id", id}});
  } catch (const SpecError& e) {
    return error_response(400, e.what(), e.field().empty() ? "spec" : e.field());
  } catch (const NotBuiltError& e) {
    return error_response(501, e.what());
  }
}

ApiResponse Api::cancel(std::int64_t id) {
  if (!runner_.cancel(id)) return error_response(404, "no experiment " + std::to_string(id), "id");
  forget_counts();
  auto e = store_.experiment(id);
  return json_response(200, {{"id", id}, {"status", store::to_string(e->status)}});
}

ApiResponse Api::list_trials(std::int64_t id, const std::map<std::string, std::string>& query) {
  only_params(query, {"sort", "order", "status", "limit", "offset", "token"});
  store::TrialQuery tq;
  if (auto it = query.find("sort"); it != query.end()) {
    bool ok = false;
    for (auto c : kSortColumns) ok = ok || it->second == c;
    if (!ok) return error_response(400, "unknown sort column '" + it->second + "'", "sort");
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

  if (!store_.experiment(id))
    return error_response(404, "no experiment " + std::to_string(id), "id");
  const store::TrialCounts c = counts(id);
  const std::int64_t total = tq.status ? count_of(c, *tq.status) : c.total();
  ApiResponse deferred;
  deferred.deferred = [id, tq, total](store::ResultStore& st) {
    const auto trials = st.trials(id, tq);
    ApiResponse r;
    r.body.reserve(512 + 450 * trials.size());
    r.body += "{\"total\":";
    append_int(r.body, total);
    r.body += ",\"offset\":";
    append_int(r.body, tq.offset);
    r.body += ",\"limit\":";
    append_int(r.body, tq.limit);
    r.body += ",\"sort\":";
    append_string(r.body, tq.sort_by);
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

ApiResponse Api::get_trial(std::int64_t id) {
  auto t = store_.trial(id);
  if (!t) return error_response(404, "no trial " + std::to_string(id), "id");
  return json_response(200, trial_json(*t, true));
}

json Api::workers() {
  json list = json::array();
  for (const auto& w : store_.workers())
    list.push_back({{"id", w.id},
                    {"kind", store::to_string(w.kind)},
                    {"host", w.host},
                    {"pid", w.pid},
                    {"started_at", w.started_at},
                    {"last_seen", w.last_seen},
                    {"current_trial", w.current_trial ? json(*w.current_trial) : json(nullptr)},
                    {"gone", w.gone}});
  return {{"workers", std::move(list)}};
}

json Api::stats() {
  store::TrialCounts all;
  std::int64_t running = 0;
  for (const auto& e : store_.experiments()) {
    add(all, counts(e.id));
    running += e.status == store::ExperimentStatus::running;
  }
  std::int64_t active = 0;
  for (const auto& w : store_.workers()) active += !w.gone;
  return {{"time", now_seconds()},
          {"trials_per_second", runner_.trials_per_second()},
          {"queue_depth", runner_.queue_depth()},
          {"counts", counts_json(all)},
          {"experiments_running", running},
          {"workers_active", active}};
}

json Api::throughput() {
  return stats();
}

bool Api::anything_running() {
  for (const auto& e : store_.experiments())
    if (e.status == store::ExperimentStatus::running) return true;
  return false;
}

json Api::event_json(const store::EventRecord& e) {
  return {{"id", e.id}, {"time", e.time}, {"type", e.type}, {"data", e.data}};
}

ApiResponse Api::events(const std::map<std::string, std::string>& query) {
  only_params(query, {"after", "limit", "token"});
  std::int64_t after = 0, limit = 1000;
  if (auto it = query.find("after"); it != query.end())
    after = parse_int(it->second, "after", 0, std::numeric_limits<std::int64_t>::max());
  if (auto it = query.find("limit"); it != query.end())
    limit = parse_int(it->second, "limit", 1, 10000);
  json list = json::array();
  std::int64_t last = after;
  for (const auto& e : store_.events_since(after, limit)) {
    last = e.id;
    list.push_back(event_json(e));
  }
  return json_response(200, {{"events", std::move(list)}, {"last_id", last}});
}

std::string Api::prometheus() {
  std::ostringstream o;
  o.precision(9);
  store::TrialCounts all;
  for (const auto& e : store_.experiments()) add(all, counts(e.id));
  o << "# HELP dnnlab_trials Trials by state, over all experiments.\n"
       "# TYPE dnnlab_trials gauge\n";
  const std::pair<const char*, std::int64_t> states[] = {
      {"queued", all.queued}, {"running", all.running}, {"finished", all.finished},
      {"pruned", all.pruned}, {"failed", all.failed},   {"cancelled", all.cancelled}};
  for (const auto& [s, n] : states) o << "dnnlab_trials{state=\"" << s << "\"} " << n << "\n";
  o << "# HELP dnnlab_trials_per_second Trials ended per second, over the last 10 s.\n"
       "# TYPE dnnlab_trials_per_second gauge\n"
       "dnnlab_trials_per_second "
    << runner_.trials_per_second() << "\n";
  o << "# HELP dnnlab_queue_depth Tasks waiting in the queues of running experiments.\n"
       "# TYPE dnnlab_queue_depth gauge\n"
       "dnnlab_queue_depth "
    << runner_.queue_depth() << "\n";
  std::int64_t native = 0, browser = 0;
  for (const auto& w : store_.workers())
    if (!w.gone) (w.kind == store::WorkerKind::native ? native : browser) += 1;
  o << "# HELP dnnlab_workers Workers that have not left, by kind.\n"
       "# TYPE dnnlab_workers gauge\n"
       "dnnlab_workers{kind=\"native\"} "
    << native << "\ndnnlab_workers{kind=\"browser\"} " << browser << "\n";
  o << metrics_.render();
  return o.str();
}

}  // namespace dnnlab::server
