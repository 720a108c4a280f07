// The REST API's front (see docs/openapi.yaml): the route table, matching,
// auth, query parsing; the handlers are in api_<resource>.cpp.
#include "server/api.hpp"

#include <charconv>
#include <limits>

#include "server/api_internal.hpp"
#include "server/token.hpp"

namespace dnnlab::server {

using namespace api_detail;
using nlohmann::json;

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

std::int64_t api_detail::parse_int(std::string_view s, std::string_view field, std::int64_t lo,
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

namespace {

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
      {"/api/trials/{id}/weights", "GET", A::read, "token", &Api::get_trial_weights},
      {"/api/trials/{id}/pin", "POST", A::write, "", &Api::pin_trial},
      {"/api/trials/{id}/unpin", "POST", A::write, "", &Api::pin_trial},
      {"/api/workers", "GET", A::read, "gone token", &Api::workers},
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

ApiResponse Api::handle(const ApiRequest& r, store::ResultStore* store) {
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
    return failed(route(r, path, query, label, store ? *store : store_));
  } catch (const ApiError& e) {
    return failed(error_response(e.status, e.message, e.field));
  } catch (const std::exception& e) {
    return failed(failure_response(e));
  }
}

// Match, then method (405 with Allow), auth, query keys and id, then the handler.
ApiResponse Api::route(const ApiRequest& r, std::string_view path, std::string_view query_text,
                       std::string& label, store::ResultStore& store) {
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
  return (this->*chosen->handler)(Call{r, path, id, query, token_holder, store});
}

ApiResponse Api::no_such_route(const Call& c) {
  return error_response(404, "no such API route: " + std::string(c.path), "path");
}

}  // namespace dnnlab::server
