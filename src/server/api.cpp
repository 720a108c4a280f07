// REST routes (see docs/openapi.yaml): experiments, trials, workers, stats,
// events, /metrics, and the static dashboard for everything else.
#include "server/api.hpp"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "experiment/build_provenance.hpp"
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

}  // namespace

ApiResponse failure_response(const std::exception& e) {
  if (dynamic_cast<const std::invalid_argument*>(&e)) return error_response(400, e.what());
  if (dynamic_cast<const store::StoreUnavailableError*>(&e)) {
    ApiResponse r =
        error_response(503, std::string("the result store is unreachable: ") + e.what());
    r.retry_after = 5;
    return r;
  }
  return error_response(500, std::string("internal error: ") + e.what());
}

namespace {

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

// A query key as error messages show it: bounded, so a hostile 8 KB key is
// not echoed back whole.
std::string shown_key(std::string_view key) {
  constexpr std::size_t kMax = 64;
  return key.size() <= kMax ? std::string(key) : std::string(key.substr(0, kMax)) + "...";
}

bool is_word_of(std::string_view words, std::string_view w) {
  std::size_t start = 0;
  while (start < words.size()) {
    std::size_t end = words.find(' ', start);
    if (end == std::string_view::npos) end = words.size();
    if (words.substr(start, end - start) == w) return true;
    start = end + 1;
  }
  return false;
}

// Every key must be one of `allowed` (space-separated): 400 naming the first other.
void only_keys(const std::map<std::string, std::string>& query, std::string_view allowed) {
  for (const auto& [k, v] : query)
    if (!is_word_of(allowed, k)) {
      std::string takes = allowed.empty() ? std::string("none") : std::string(allowed);
      for (auto& c : takes)
        if (c == ' ') c = ',';
      throw ApiError{
          400, "unknown query parameter '" + shown_key(k) + "' (this route takes: " + takes + ")",
          shown_key(k)};
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
      if (key.empty())
        throw ApiError{
            400, "a query parameter has an empty name ('" + shown_key(std::string(pair)) + "')",
            "query"};
      std::string value = eq == std::string_view::npos ? "" : decode_component(pair.substr(eq + 1));
      if (out.count(key))
        throw ApiError{400, "query parameter '" + shown_key(key) + "' given twice", shown_key(key)};
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
            {"seed", std::to_string(t.seed)},  // a string: JSON numbers lose digits past 2^53
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
            {"error", t.error},
            // A browser result no native re-run has agreed with yet: shown, never ranked.
            {"provisional", t.provisional}};
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
  out += ",\"seed\":\"";
  append_int(out, t.seed);
  out += "\"";
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
  out += t.provisional ? ",\"provisional\":true}" : ",\"provisional\":false}";
}

Api::Api(store::ResultStore& store, ExperimentRunner& runner, const HttpMetrics& metrics,
         ApiConfig config)
    : store_(store), runner_(runner), metrics_(metrics), config_(std::move(config)) {}

bool Api::may_read(std::string_view authorization, std::string_view query_token) const {
  return config_.public_reads || holds_token(authorization, query_token);
}

bool Api::holds_token(std::string_view authorization, std::string_view query_token) const {
  for (const std::string* t : {&config_.token, &config_.read_token}) {
    if (t->empty()) continue;
    if (bearer_matches(authorization, *t)) return true;
    if (!query_token.empty() && bearer_matches("Bearer " + std::string(query_token), *t))
      return true;
  }
  return false;
}

// One row of the route table.
struct Api::Route {
  enum class Access { open, read, write };  // read: public, or the token with --private-reads
  // Segments; "{id}" is one segment (a positive integer, checked after the
  // method and auth), a final "{path}" is the rest of the path (any segments).
  std::string_view pattern;
  // "GET" (answers HEAD too), "POST", "WEBSOCKET" (a GET upgrade) or "*" (any).
  std::string_view method;
  Access access;
  // The query keys it takes, space-separated; "*": the query is the page's
  // own (the dashboard and join page read ?token= themselves) and not parsed.
  std::string_view query;
  ApiResponse (Api::*handler)(const Call&);
  std::string_view label = {};  // the metrics label when not the pattern
};

const std::vector<Api::Route>& Api::routes() {
  using A = Route::Access;
  // First matching pattern wins; a pattern's rows are adjacent, GET before POST.
  static const std::vector<Route> kRoutes = {
      {"/api/experiments", "GET", A::read, "token", &Api::list_experiments},
      {"/api/experiments", "POST", A::write, "", &Api::submit},
      {"/api/experiments/{id}", "GET", A::read, "token", &Api::get_experiment},
      {"/api/experiments/{id}/cancel", "POST", A::write, "", &Api::cancel},
      {"/api/experiments/{id}/trials", "GET", A::read, "sort order status limit offset token",
       &Api::list_trials},
      {"/api/trials/{id}", "GET", A::read, "token", &Api::get_trial},
      {"/api/workers", "GET", A::read, "token", &Api::workers},
      {"/api/stats", "GET", A::read, "token", &Api::get_stats},
      {"/api/events", "GET", A::read, "after limit token", &Api::events},
      {"/api/events", "WEBSOCKET", A::read, "after token", &Api::events_socket,
       "/api/events (websocket)"},
      {"/api/{path}", "*", A::open, "*", &Api::no_such_route, "/api/*"},
      {"/metrics", "GET", A::read, "token", &Api::metrics},
      {"/join", "GET", A::open, "*", &Api::join_page},
      // The join token travels in the protocol's hello, not in the URL.
      {"/join", "WEBSOCKET", A::open, "", &Api::join_socket, "/join (websocket)"},
      {"/core/{path}", "GET", A::open, "", &Api::gateway_file, "/core/{file}"},
      {"/shards/{path}", "GET", A::open, "", &Api::gateway_file, "/shards/{file}"},
      {"/{path}", "GET", A::open, "*", &Api::static_file, "static"},
  };
  return kRoutes;
}

namespace {

// Whether `parts` (split_path's) fit `pattern`; on a match the {id} segment,
// if the pattern has one, goes to `id`.
bool matches(std::string_view pattern, const std::vector<std::string_view>& parts,
             std::optional<std::string_view>& id) {
  const auto want = split_path(pattern);
  std::optional<std::string_view> got;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (want[i] == "{path}" && i + 1 == want.size()) break;
    if (i >= parts.size()) return false;
    if (want[i] == "{id}")
      got = parts[i];
    else if (want[i] != parts[i])
      return false;
    if (i + 1 == want.size() && want.size() != parts.size()) return false;
  }
  id = got;
  return true;
}

bool method_fits(std::string_view route_method, const ApiRequest& r) {
  if (r.websocket) return route_method == "WEBSOCKET";
  if (route_method == "*") return true;
  if (route_method == "GET") return r.method == "GET" || r.method == "HEAD";
  return route_method == r.method;
}

}  // namespace

ApiResponse Api::handle(const ApiRequest& r) {
  std::string_view target = r.target;
  std::size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  std::string label = "unmatched";
  auto failed = [&](ApiResponse resp) {
    resp.route = label;
    return resp;
  };
  try {
    if (path.empty() || path[0] != '/')
      throw ApiError{400, "request target must be a path", "target"};
    return failed(route(r, path, query, label));
  } catch (const ApiError& e) {
    return failed(error_response(e.status, e.message, e.field));
  } catch (const std::exception& e) {
    return failed(failure_response(e));
  }
}

// Match, then method (405 with Allow), auth, query keys and id, then the handler.
ApiResponse Api::route(const ApiRequest& r, std::string_view path, std::string_view query_text,
                       std::string& label) {
  const auto parts = split_path(path);
  const auto& table = routes();
  std::optional<std::string_view> id_text;
  std::string_view pattern;
  for (const Route& rt : table)
    if (matches(rt.pattern, parts, id_text)) {
      pattern = rt.pattern;
      break;
    }
  // Always found: "/{path}" matches every path that starts with '/'. Of the
  // pattern's rows, the one for this method; the rest make the Allow header.
  const Route* chosen = nullptr;
  std::string allow;
  for (const Route& rt : table) {
    if (rt.pattern != pattern) continue;
    if (label == "unmatched") label = rt.label.empty() ? rt.pattern : rt.label;
    if (!chosen && method_fits(rt.method, r)) chosen = &rt;
    if (rt.method == "GET" || rt.method == "POST")
      allow +=
          (allow.empty() ? "" : ", ") + std::string(rt.method == "GET" ? "GET, HEAD" : rt.method);
  }
  if (!chosen && r.websocket) {
    label += " (websocket)";
    throw ApiError{404, "WebSocket is only offered on /api/events and /join", "path"};
  }
  if (!chosen) {
    ApiResponse resp = error_response(405,
                                      "method " + r.method + " is not allowed on " +
                                          std::string(pattern) + " (allowed: " + allow + ")",
                                      "method");
    resp.allow = allow;
    return resp;
  }
  label = chosen->label.empty() ? chosen->pattern : chosen->label;

  std::map<std::string, std::string> query;
  if (chosen->query != "*") query = parse_query(query_text);
  if (chosen->access == Route::Access::write) {
    if (!bearer_matches(r.authorization, config_.token))
      throw ApiError{401,
                     r.authorization.empty() ? "this request needs 'Authorization: Bearer <token>'"
                     : bearer_credentials(r.authorization)
                         ? "the bearer token is wrong"
                         : "the Authorization header must be 'Bearer <token>'",
                     "Authorization"};
  }
  bool token_holder = chosen->access == Route::Access::write;
  if (chosen->access == Route::Access::read) {
    auto t = query.find("token");
    token_holder = holds_token(r.authorization, t == query.end() ? "" : t->second);
    if (!token_holder && !config_.public_reads)
      throw ApiError{401, "reads need the token on this server", "Authorization"};
  }
  if (chosen->query != "*") only_keys(query, chosen->query);
  const std::int64_t id = id_text ? parse_id(*id_text) : 0;
  return (this->*chosen->handler)(Call{r, path, id, query, token_holder});
}

ApiResponse Api::no_such_route(const Call& c) {
  return error_response(404, "no such API route: " + std::string(c.path), "path");
}

ApiResponse Api::metrics(const Call&) {
  ApiResponse resp;
  resp.content_type = "text/plain; version=0.0.4; charset=utf-8";
  resp.body = prometheus();
  return resp;
}

namespace {
ApiResponse from_static(StaticReply s) {
  ApiResponse resp;
  resp.status = s.status;
  resp.content_type = s.content_type;
  resp.body = std::move(s.body);
  return resp;
}
}  // namespace

ApiResponse Api::static_file(const Call& c) {
  return from_static(serve_static(config_.web_root, c.path));
}

ApiResponse Api::join_page(const Call&) {
  return from_static(serve_static(config_.web_root, "/join.html"));
}

ApiResponse Api::join_socket(const Call&) {
  ApiResponse resp;
  resp.status = 101;
  resp.upgrade = Upgrade::join;
  return resp;
}

// The wasm core and data shards: content-hashed names, cached for good.
ApiResponse Api::gateway_file(const Call& c) {
  std::optional<ServedFile> f;
  if (config_.gateway_file) f = config_.gateway_file(c.path);
  ApiResponse resp;
  if (!f || !f->body) {
    resp.status = 404;
    resp.content_type = "text/plain; charset=utf-8";
    resp.body = "not found\n";
    return resp;
  }
  resp.content_type = f->content_type;
  resp.body = *f->body;
  resp.immutable = true;
  return resp;
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

ApiResponse Api::list_experiments(const Call&) {
  json list = json::array();
  for (const auto& e : store_.experiments()) list.push_back(experiment_summary(e));
  return json_response(200, {{"experiments", std::move(list)}});
}

ApiResponse Api::get_experiment(const Call& c) {
  const std::int64_t id = c.id;
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

// The body and the sweep are parsed on a worker thread (a large sweep takes
// a while); the experiment is written back on the io thread.
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
      sweep = ExperimentRunner::parse(text, name);
    } catch (const SpecError& e) {
      return fail(error_response(400, e.what(), e.field().empty() ? "spec" : e.field()));
    }
    // Back on the io thread: `this` outlives every pending handler of the server.
    return [this, sweep, text = std::move(text), name = std::move(name)]() {
      try {
        std::int64_t id = runner_.submit_parsed(sweep, text, name);
        forget_counts();
        return json_response(202, {{"id", id}});
      } catch (const SpecError& e) {
        return error_response(400, e.what(), e.field().empty() ? "spec" : e.field());
      } catch (const NotBuiltError& e) {
        return error_response(501, e.what());
      }
    };
  };
  return resp;
}

ApiResponse Api::cancel(const Call& c) {
  const std::int64_t id = c.id;
  if (!runner_.cancel(id)) return error_response(404, "no experiment " + std::to_string(id), "id");
  forget_counts();
  auto e = store_.experiment(id);
  return json_response(200, {{"id", id}, {"status", store::to_string(e->status)}});
}

ApiResponse Api::list_trials(const Call& c) {
  const std::int64_t id = c.id;
  const auto& query = c.query;
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
  const store::TrialCounts n = counts(id);
  const std::int64_t total = tq.status ? count_of(n, *tq.status) : n.total();
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

ApiResponse Api::get_trial(const Call& c) {
  const std::int64_t id = c.id;
  auto t = store_.trial(id);
  if (!t) return error_response(404, "no trial " + std::to_string(id), "id");
  return json_response(200, trial_json(*t, true));
}

// A volunteer's address (a browser worker's host) is shown to token holders
// only: public readers get the rows without "host".
ApiResponse Api::workers(const Call& c) {
  json list = json::array();
  for (const auto& w : store_.workers()) {
    json row = {{"id", w.id},
                {"kind", store::to_string(w.kind)},
                {"pid", w.pid},
                {"started_at", w.started_at},
                {"last_seen", w.last_seen},
                {"current_trial", w.current_trial ? json(*w.current_trial) : json(nullptr)},
                {"gone", w.gone}};
    if (c.token_holder) row["host"] = w.host;
    list.push_back(std::move(row));
  }
  return json_response(200, {{"workers", std::move(list)}});
}

ApiResponse Api::get_stats(const Call&) {
  return json_response(200, stats());
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
          {"workers_active", active},
          {"build", experiment::build_provenance()}};
}

json Api::throughput() {
  return stats();
}

bool Api::anything_running() {
  for (const auto& e : store_.experiments())
    if (e.status == store::ExperimentStatus::running) return true;
  return false;
}

bool Api::event_has_private_fields(const store::EventRecord& e) {
  return e.type == "worker.joined" && e.data.is_object() && e.data.contains("agent");
}

json Api::event_json(const store::EventRecord& e, bool private_fields) {
  json out = {{"id", e.id}, {"time", e.time}, {"type", e.type}, {"data", e.data}};
  // A browser's User-Agent, as its address on /api/workers, is for token holders.
  if (!private_fields && event_has_private_fields(e)) out["data"].erase("agent");
  return out;
}

ApiResponse Api::events(const Call& c) {
  const auto& query = c.query;
  std::int64_t after = 0, limit = 1000;
  if (auto it = query.find("after"); it != query.end())
    after = parse_int(it->second, "after", 0, std::numeric_limits<std::int64_t>::max());
  if (auto it = query.find("limit"); it != query.end())
    limit = parse_int(it->second, "limit", 1, 10000);
  json list = json::array();
  std::int64_t last = after;
  for (const auto& e : store_.events_since(after, limit)) {
    last = e.id;
    list.push_back(event_json(e, c.token_holder));
  }
  return json_response(200, {{"events", std::move(list)}, {"last_id", last}});
}

// The WebSocket stream: events from the moment of connecting, or after ?after=ID.
ApiResponse Api::events_socket(const Call& c) {
  ApiResponse resp;
  resp.status = 101;
  resp.upgrade = Upgrade::events;
  resp.private_fields = c.token_holder;
  if (auto it = c.query.find("after"); it != c.query.end())
    resp.events_after = parse_int(it->second, "after", 0, std::numeric_limits<std::int64_t>::max());
  return resp;
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
