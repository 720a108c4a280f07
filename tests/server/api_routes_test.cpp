// The route table's contract against docs/openapi.yaml: strict query strings
// on every route (the WebSocket's `?after=` included), HEAD on every GET
// route, 405 with Allow, case-insensitive auth schemes, seeds as decimal
// strings, metric labels by matched route, and the static files' replies.
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <fstream>
#include <map>

#include "server_fixture.hpp"
#include "store_backends.hpp"

namespace dnnlab::server::testing {
namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;

struct RawReply {
  unsigned status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// One request on its own connection (Connection: close), the reply parsed by hand
// so that HEAD replies (a Content-Length and no body) can be checked as sent.
RawReply raw_request(unsigned short port, const std::string& method, const std::string& target,
                     const std::string& headers = {}, const std::string& body = {}) {
  const bool own_connection = headers.find("Connection:") != std::string::npos;
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                    (own_connection ? "" : "Connection: close\r\n") + headers +
                    "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string raw = raw_exchange(port, req, true);
  RawReply r;
  const auto end = raw.find("\r\n\r\n");
  EXPECT_NE(end, std::string::npos) << raw;
  if (end == std::string::npos) return r;
  r.status = static_cast<unsigned>(std::stoul(raw.substr(9, 3)));
  std::size_t line = raw.find("\r\n") + 2;
  while (line < end) {
    std::size_t next = raw.find("\r\n", line);
    std::string h = raw.substr(line, next - line);
    auto colon = h.find(':');
    std::string name = h.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = h.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    r.headers[name] = value;
    line = next + 2;
  }
  r.body = raw.substr(end + 4);
  return r;
}

class ApiRoutesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    url_ = store_url(GetParam(), dir_);
    DNNLAB_REQUIRE_STORE(url_);
    store_ = store::open_result_store(url_);
    exp_ = populate(*store_, 12);
    trial_ = store_->trials(exp_, {}).at(0).id;
    std::filesystem::create_directories(dir_.path() / "web" / "assets");
    std::ofstream(dir_.path() / "web" / "index.html") << "<html>dash</html>";
    std::ofstream(dir_.path() / "web" / "join.html") << "<html>join</html>";
    std::ofstream(dir_.path() / "web" / "assets" / "app-1234.js") << "console.log(1)";
    ServerOptions o;
    o.store_url = url_;
    o.broker_url = broker_url(url_, dir_);
    o.run_coordinators = false;
    o.web_root = (dir_.path() / "web").string();
    server_ = std::make_unique<RunningServer>(o);
  }
  void TearDown() override { server_.reset(); }

  std::string exp_path() const { return "/api/experiments/" + std::to_string(exp_); }
  std::string auth() const { return "Authorization: Bearer " + server_->token() + "\r\n"; }

  TempDir dir_;
  std::string url_;
  std::unique_ptr<store::ResultStore> store_;
  std::int64_t exp_ = 0, trial_ = 0;
  std::unique_ptr<RunningServer> server_;
};

INSTANTIATE_TEST_SUITE_P(Stores, ApiRoutesTest, DNNLAB_STORE_BACKENDS, store_backend_name);

TEST_P(ApiRoutesTest, EveryRouteRejectsUnknownQueryKeys) {
  const std::string spec = json{{"spec", "name: x\n"}}.dump();
  const std::pair<std::string, std::string> cases[] = {
      {"GET", "/api/experiments"},
      {"POST", "/api/experiments"},
      {"GET", exp_path()},
      {"POST", exp_path() + "/cancel"},
      {"GET", exp_path() + "/trials"},
      {"GET", "/api/trials/" + std::to_string(trial_)},
      {"GET", "/api/workers"},
      {"GET", "/api/stats"},
      {"GET", "/api/events"},
      {"GET", "/metrics"},
      {"GET", "/core/dnnlab.0123456789abcdef.wasm"},
      {"GET", "/shards/abc.safetensors"},
  };
  for (const auto& [method, path] : cases) {
    auto r = raw_request(server_->port(), method, path + "?foo=1", auth(),
                         method == "POST" && path == "/api/experiments" ? spec : "");
    EXPECT_EQ(r.status, 400u) << method << " " << path << ": " << r.body;
    json j = json::parse(r.body, nullptr, false);
    EXPECT_EQ(j.value("field", ""), "foo") << method << " " << path << ": " << r.body;
  }
  // Nothing happened: no experiment made, none cancelled.
  json list = parse(server_->get("/api/experiments"));
  ASSERT_EQ(list["experiments"].size(), 1u);
  EXPECT_EQ(list["experiments"][0]["status"], "running");
  // Writes take the token in the header only.
  auto t = raw_request(server_->port(), "POST", exp_path() + "/cancel?token=" + server_->token(),
                       auth());
  EXPECT_EQ(t.status, 400u) << t.body;
  EXPECT_EQ(parse({t.status, "", t.body})["field"], "token");
}

TEST_P(ApiRoutesTest, HostileQueryStringsAreNamed) {
  const std::string base = "/api/stats";
  auto field_of = [&](const std::string& q) {
    auto r = server_->get(base + q);
    EXPECT_EQ(r.status, 400u) << q << " -> " << r.body;
    return parse(r).value("field", std::string("<none>"));
  };
  EXPECT_EQ(field_of("?=1"), "query");
  EXPECT_EQ(field_of("?=1&token=x"), "query");
  EXPECT_EQ(field_of("?token=a&token=b"), "token");
  EXPECT_EQ(field_of("?%00=1"), std::string(1, '\0'));
  EXPECT_EQ(field_of("?foo"), "foo");
  EXPECT_EQ(field_of("?a=%zz"), "query");
  const std::string long_key(8000, 'k');
  auto r = server_->get(base + "?" + long_key + "=1");
  EXPECT_EQ(r.status, 400u);
  EXPECT_LT(r.body.size(), 1000u) << "the error should not echo 8000 bytes back";
  EXPECT_EQ(server_->get(base + "?&&").status, 200u);  // empty pairs are nothing
  EXPECT_EQ(server_->get(base + "?").status, 200u);
}

TEST_P(ApiRoutesTest, DashboardPagesLeaveTheirQueryToThePage) {
  // The dashboard and join page read ?token= themselves (web/src/api.js, join.js).
  auto r = server_->get("/?token=abc&x=%zz");
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, "<html>dash</html>");
  EXPECT_EQ(server_->get("/join?token=abc").status, 200u);
}

TEST_P(ApiRoutesTest, HeadAnswersEveryGetRouteWithoutABody) {
  const std::string targets[] = {"/api/experiments",
                                 exp_path(),
                                 exp_path() + "/trials?limit=3",
                                 "/api/trials/" + std::to_string(trial_),
                                 "/api/workers",
                                 "/api/stats",
                                 "/api/events",
                                 "/metrics",
                                 "/",
                                 "/assets/app-1234.js",
                                 "/join"};
  for (const auto& t : targets) {
    auto get = raw_request(server_->port(), "GET", t);
    auto head = raw_request(server_->port(), "HEAD", t);
    EXPECT_EQ(head.status, 200u) << t << ": " << head.body;
    EXPECT_EQ(get.status, 200u) << t;
    EXPECT_TRUE(head.body.empty()) << t << ": " << head.body;
    EXPECT_EQ(head.headers["content-type"], get.headers["content-type"]) << t;
    EXPECT_GT(std::stoul(head.headers["content-length"]), 0u) << t;
  }
}

TEST_P(ApiRoutesTest, WrongMethodsGet405WithAllow) {
  const std::tuple<std::string, std::string, std::string> cases[] = {
      {"DELETE", "/api/workers", "GET, HEAD"}, {"PUT", "/api/experiments", "GET, HEAD, POST"},
      {"GET", exp_path() + "/cancel", "POST"}, {"HEAD", exp_path() + "/cancel", "POST"},
      {"POST", "/metrics", "GET, HEAD"},       {"POST", "/", "GET, HEAD"},
      {"DELETE", "/join", "GET, HEAD"},
  };
  for (const auto& [method, target, allow] : cases) {
    auto r = raw_request(server_->port(), method, target, auth());
    EXPECT_EQ(r.status, 405u) << method << " " << target;
    EXPECT_EQ(r.headers["allow"], allow) << method << " " << target;
    if (method != "HEAD") {
      EXPECT_EQ(json::parse(r.body, nullptr, false).value("field", ""), "method") << r.body;
    }
  }
}

TEST_P(ApiRoutesTest, AuthSchemeIsCaseInsensitive) {
  const std::string tok = server_->token();
  const std::string cancel = exp_path() + "/cancel";
  auto wrong = [&](const std::string& header) {
    auto r = raw_request(server_->port(), "POST", cancel, "Authorization: " + header + "\r\n");
    EXPECT_EQ(r.status, 401u) << header;
    EXPECT_EQ(r.headers["www-authenticate"], "Bearer");
    return json::parse(r.body, nullptr, false).value("error", "");
  };
  EXPECT_NE(wrong("Basic " + tok).find("Bearer"), std::string::npos);
  wrong("bearer " + tok + "x");
  wrong("bearer");
  wrong("bearer ");
  wrong("bearertoken" + tok);
  for (const std::string scheme : {"bearer ", "BEARER ", "bEaReR ", "Bearer  "}) {
    auto r =
        raw_request(server_->port(), "POST", cancel, "Authorization: " + scheme + tok + "\r\n");
    EXPECT_EQ(r.status, 200u) << "'" << scheme << "': " << r.body;
  }
}

TEST(ApiRoutesPrivate, ReadTokenSchemeIsCaseInsensitive) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("d.db");
  o.public_reads = false;
  o.run_coordinators = false;
  RunningServer s(o);
  auto r =
      raw_request(s.port(), "GET", "/api/stats", "Authorization: bearer " + s.token() + "\r\n");
  EXPECT_EQ(r.status, 200u) << r.body;
}

TEST_P(ApiRoutesTest, SeedsAreDecimalStringsSortedUnsigned) {
  store::ExperimentRecord e;
  e.name = "seeds";
  e.spec_text = "x";
  const auto id = store_->create_experiment(e);
  const std::uint64_t big = 14612436867286432432ull, small = 1052595102462929473ull;
  store_->add_trials(id, {{0, "{}", big}, {1, "{}", small}, {2, "{}", 18446744073709551615ull}});
  json list =
      parse(server_->get("/api/experiments/" + std::to_string(id) + "/trials?sort=seed&order=asc"));
  ASSERT_EQ(list["trials"].size(), 3u);
  EXPECT_EQ(list["trials"][0]["seed"], "1052595102462929473");
  EXPECT_EQ(list["trials"][1]["seed"], "14612436867286432432");
  EXPECT_EQ(list["trials"][2]["seed"], "18446744073709551615");
  json one = parse(server_->get("/api/trials/" + list["trials"][1]["id"].dump()));
  EXPECT_EQ(one["seed"], "14612436867286432432");
}

TEST_P(ApiRoutesTest, MetricsLabelErrorsWithTheMatchedRoute) {
  EXPECT_EQ(server_->get(exp_path() + "/trials?limit=0").status, 400u);
  EXPECT_EQ(server_->get("/api/trials/abc").status, 400u);
  EXPECT_EQ(server_->get("/api/stats?bogus=1").status, 400u);
  EXPECT_EQ(server_->get("/api/no/such/route").status, 404u);
  const std::string m = server_->get("/metrics").body;
  for (const std::string want :
       {"route=\"/api/experiments/{id}/trials\",code=\"400\"} 1",
        "route=\"/api/trials/{id}\",code=\"400\"} 1", "route=\"/api/stats\",code=\"400\"} 1",
        "route=\"/api/*\",code=\"404\"} 1"})
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  EXPECT_EQ(m.find("route=\"/api/*\",code=\"400\""), std::string::npos) << m;
}

TEST_P(ApiRoutesTest, StaticRepliesMatchTheDoc) {
  // Gateway files: 404 as text, like every other file.
  for (const std::string p :
       {"/core/nothing.0123456789abcdef.js", "/shards/abc.safetensors", "/missing.css"}) {
    auto r = raw_request(server_->port(), "GET", p);
    EXPECT_EQ(r.status, 404u) << p;
    EXPECT_EQ(r.headers["content-type"].rfind("text/plain", 0), 0u) << p << ": " << r.body;
  }
  // The dashboard bundle has no content-hashed names: every file revalidates.
  auto js = raw_request(server_->port(), "GET", "/assets/app-1234.js");
  EXPECT_EQ(js.status, 200u);
  EXPECT_EQ(js.headers["cache-control"], "no-cache");
}

TEST_P(ApiRoutesTest, WebSocketTakesAfterFromTheUrl) {
  const auto first = store_->append_event("worker.joined", {{"worker", "a"}});
  const auto second = store_->append_event("worker.joined", {{"worker", "b"}});
  asio::io_context io;
  websocket::stream<asio::ip::tcp::socket> ws(io);
  ws.next_layer().connect({asio::ip::make_address("127.0.0.1"), server_->port()});
  timeval tv{5, 0};
  setsockopt(ws.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ws.handshake("127.0.0.1", "/api/events?after=" + std::to_string(first));
  beast::flat_buffer buf;
  json ev;
  do {
    buf.clear();
    ws.read(buf);
    ev = json::parse(beast::buffers_to_string(buf.data()));
  } while (ev["type"] == "throughput");
  EXPECT_EQ(ev["id"], second);
  EXPECT_EQ(ev["data"]["worker"], "b");
  ws.close(websocket::close_code::normal);

  // Bad or unknown keys refuse the upgrade with a JSON 400 naming them.
  for (const auto& [q, field] : std::vector<std::pair<std::string, std::string>>{
           {"?after=x", "after"}, {"?after=-1", "after"}, {"?limit=5", "limit"}, {"?x=1", "x"}}) {
    auto r = raw_request(server_->port(), "GET", "/api/events" + q,
                         "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: "
                         "13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n");
    EXPECT_EQ(r.status, 400u) << q << ": " << r.body;
    EXPECT_EQ(json::parse(r.body, nullptr, false).value("field", ""), field) << q;
  }
  EXPECT_EQ(server_->get("/api/stats").status, 200u);
}

TEST_P(ApiRoutesTest, PathsMatchWholePatternsOnly) {
  auto r = server_->get("/api/experiments/abc/nothing");
  EXPECT_EQ(r.status, 404u) << r.body;
  EXPECT_EQ(parse(r)["field"], "path");
  auto empty = server_->get("/api/experiments//trials");
  EXPECT_EQ(empty.status, 400u) << empty.body;
  EXPECT_EQ(parse(empty)["field"], "id");
  EXPECT_EQ(server_->get("/api").status, 404u);
  EXPECT_EQ(server_->get("/api/workers/").status, 200u);
  auto star = raw_request(server_->port(), "OPTIONS", "*");
  EXPECT_EQ(star.status, 400u) << star.body;
  EXPECT_EQ(json::parse(star.body, nullptr, false).value("field", ""), "target");
}

TEST_P(ApiRoutesTest, CancelledRunningTrialKeepsItsEpochsAndIsAnnounced) {
  const auto id = store_->trials(exp_, {}).at(1).id;  // index 1: queued
  ASSERT_TRUE(store_->mark_running(id, 1, "w9"));
  for (int ep = 1; ep <= 6; ++ep) {
    store::EpochMetrics m;
    m.epoch = ep;
    m.val_acc = 0.1 * ep;
    ASSERT_TRUE(store_->record_epoch(id, 1, m));
  }
  auto c = server_->post(exp_path() + "/cancel", "", server_->token());
  ASSERT_EQ(c.status, 200u) << c.body;
  json t = parse(server_->get("/api/trials/" + std::to_string(id)));
  EXPECT_EQ(t["status"], "cancelled");
  EXPECT_EQ(t["curve"].size(), 6u);
  EXPECT_EQ(t["epochs_done"], 6);
  json events = parse(server_->get("/api/events?limit=10000"));
  int cancelled = 0;
  for (const auto& e : events["events"])
    if (e["type"] == "trial.cancelled") {
      ++cancelled;
      EXPECT_EQ(e["data"]["trial"], id);
    }
  EXPECT_EQ(cancelled, 1);
}

}  // namespace
}  // namespace dnnlab::server::testing
