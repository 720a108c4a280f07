// The wire: garbage and truncated requests, keep-alive, the WebSocket event
// stream, /metrics in the Prometheus text format, the token file and the
// static dashboard files.
#include <sys/stat.h>

#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <fstream>
#include <regex>

#include "server/token.hpp"
#include "server_fixture.hpp"

namespace dnnlab::server::testing {
namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;

ServerOptions options_for(const TempDir& dir) {
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  o.run_coordinators = false;
  return o;
}

TEST(Protocol, GarbageRequestLineGets400AndTheServerLives) {
  TempDir dir;
  RunningServer s(options_for(dir));
  std::string reply = raw_exchange(s.port(), "HELLO THERE\r\n\r\n", true);
  EXPECT_NE(reply.find("400"), std::string::npos) << reply;
  EXPECT_NE(reply.find("\"error\""), std::string::npos) << reply;
  std::string binary(300, '\0');
  for (std::size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 7);
  raw_exchange(s.port(), binary, true);
  EXPECT_EQ(s.get("/api/stats").status, 200u);
}

TEST(Protocol, TruncatedRequestsDoNotHurt) {
  TempDir dir;
  RunningServer s(options_for(dir));
  // Headers cut short, and a body shorter than its Content-Length.
  raw_exchange(s.port(), "GET /api/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Len", true);
  raw_exchange(
      s.port(),
      "POST /api/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"sp",
      true);
  std::string bad_len = raw_exchange(
      s.port(), "POST /api/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: zz\r\n\r\n",
      true);
  EXPECT_NE(bad_len.find("400"), std::string::npos) << bad_len;
  EXPECT_EQ(s.get("/api/experiments").status, 200u);
}

TEST(Protocol, KeepAliveServesManyRequestsOnOneConnection) {
  TempDir dir;
  RunningServer s(options_for(dir));
  std::string two =
      "GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /api/workers HTTP/1.1\r\nHost: "
      "127.0.0.1\r\n"
      "Connection: close\r\n\r\n";
  std::string reply = raw_exchange(s.port(), two, false);
  // raw_exchange stops at the first full reply; read both by closing after.
  reply = raw_exchange(s.port(), two, true);
  std::size_t first = reply.find("HTTP/1.1 200");
  ASSERT_NE(first, std::string::npos) << reply;
  EXPECT_NE(reply.find("HTTP/1.1 200", first + 1), std::string::npos) << reply;
  EXPECT_NE(reply.find("\"workers\""), std::string::npos);
}

TEST(Protocol, WebSocketReceivesNewEvents) {
  TempDir dir;
  auto o = options_for(dir);
  auto st = store::open_result_store(o.store_url);
  auto before = st->append_event("worker.joined", {{"worker", "old"}});
  RunningServer s(o);

  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  websocket::stream<asio::ip::tcp::socket> ws(io);
  ws.next_layer().connect({asio::ip::make_address("127.0.0.1"), s.port()});
  timeval tv{5, 0};
  setsockopt(ws.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ws.handshake("127.0.0.1", "/api/events");

  st->append_event("trial.finished", {{"trial", 9}, {"val_acc", 0.9}});
  beast::flat_buffer buf;
  json ev;
  do {
    buf.clear();
    ws.read(buf);
    ev = json::parse(beast::buffers_to_string(buf.data()));
  } while (ev["type"] == "throughput");
  EXPECT_EQ(ev["type"], "trial.finished");
  EXPECT_EQ(ev["data"]["trial"], 9);
  EXPECT_GT(ev["id"].get<std::int64_t>(), before);
  EXPECT_TRUE(ev["time"].is_number());

  // Catch up from the start: every stored event again, in order.
  ws.write(asio::buffer(json{{"after", 0}}.dump()));
  std::vector<json> replay;
  while (replay.size() < 2) {
    buf.clear();
    ws.read(buf);
    json x = json::parse(beast::buffers_to_string(buf.data()));
    if (x["type"] != "throughput") replay.push_back(x);
  }
  EXPECT_EQ(replay[0]["id"], before);
  EXPECT_EQ(replay[0]["data"]["worker"], "old");
  EXPECT_EQ(replay[1]["id"], ev["id"]);

  // A bad client message gets an error frame, not a closed stream.
  ws.write(asio::buffer(std::string("nonsense")));
  buf.clear();
  ws.read(buf);
  json err = json::parse(beast::buffers_to_string(buf.data()));
  EXPECT_EQ(err["type"], "error");
  ws.close(websocket::close_code::normal);
}

TEST(Protocol, MetricsAreValidPrometheusTextAndCountRequests) {
  TempDir dir;
  RunningServer s(options_for(dir));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(s.get("/api/stats").status, 200u);
  ASSERT_EQ(s.get("/api/experiments/nope").status, 400u);
  auto r = s.get("/metrics");
  ASSERT_EQ(r.status, 200u);
  EXPECT_NE(r.content_type.find("text/plain"), std::string::npos);
  // Every line: a comment, or name{labels} value.
  const std::regex sample(
      R"re(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? [-+0-9.eEInfa]+$)re");
  std::istringstream in(r.body);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      EXPECT_TRUE(line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) << line;
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    ++samples;
  }
  EXPECT_GT(samples, 10);
  EXPECT_NE(
      r.body.find("dnnlab_http_requests_total{method=\"GET\",route=\"/api/stats\",code=\"200\"} 3"),
      std::string::npos)
      << r.body;
  EXPECT_NE(r.body.find("code=\"400\""), std::string::npos);
  EXPECT_NE(r.body.find("dnnlab_trials{state=\"finished\"} 0"), std::string::npos);
  EXPECT_NE(r.body.find("dnnlab_queue_depth "), std::string::npos);
  EXPECT_NE(r.body.find("dnnlab_trials_per_second "), std::string::npos);
  EXPECT_NE(r.body.find("dnnlab_workers{kind=\"native\"}"), std::string::npos);
  EXPECT_NE(r.body.find(
                "dnnlab_http_request_duration_seconds_bucket{route=\"/api/stats\",le=\"+Inf\"} 3"),
            std::string::npos);
}

TEST(Protocol, TokenFileIsPrivateAndReused) {
  TempDir dir;
  auto o = options_for(dir);
  std::string first;
  {
    RunningServer s(o);
    EXPECT_TRUE(s.server().token_is_new());
    first = s.token();
    EXPECT_EQ(first.size(), 64u);
  }
  struct stat st {};
  ASSERT_EQ(stat(dir.file("dnnlab.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  RunningServer again(o);
  EXPECT_FALSE(again.server().token_is_new());
  EXPECT_EQ(again.token(), first);
  EXPECT_TRUE(bearer_matches("Bearer " + first, first));
  EXPECT_FALSE(bearer_matches("Bearer " + first + "x", first));
  EXPECT_FALSE(bearer_matches(first, first));
}

TEST(Protocol, WeakTokenFilesAreRefused) {
  TempDir dir;
  auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    std::string p = dir.file(name);
    std::ofstream(p) << text << "\n";
    chmod(p.c_str(), mode);
    return p;
  };
  const std::string good(40, 'k');
  EXPECT_EQ(load_or_create_token(write("ok", good, 0600)).token, good);
  EXPECT_EQ(load_or_create_token(write("owner-only", good, 0400)).token, good);
  for (mode_t m : {0644, 0640, 0604, 0660, 0602, 0620}) {
    std::string p = write("open" + std::to_string(m), good, m);
    try {
      load_or_create_token(p);
      ADD_FAILURE() << "mode " << std::oct << m << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
    }
  }
  for (std::string t : {std::string("x"), std::string(kMinTokenChars - 1, 'a')}) {
    std::string p = write("short" + std::to_string(t.size()), t, 0600);
    try {
      load_or_create_token(p);
      ADD_FAILURE() << t.size() << "-character token was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("at least 32"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(load_or_create_token(write("exact", std::string(kMinTokenChars, 'b'), 0600)).token,
            std::string(kMinTokenChars, 'b'));
}

TEST(Protocol, JoinTokenMustDifferFromWriteToken) {
  TempDir dir;
  auto o = options_for(dir);
  o.token_file = dir.file("same.token");
  o.join_token_file = o.token_file;
  asio::io_context io;
  try {
    Server s(io, o);
    ADD_FAILURE() << "a join token equal to the write token was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("must differ"), std::string::npos) << e.what();
  }
}

TEST(Protocol, StaticFilesAndNoTraversal) {
  TempDir dir;
  auto o = options_for(dir);
  {
    RunningServer bare(o);
    auto r = bare.get("/");
    EXPECT_EQ(r.status, 200u);
    EXPECT_NE(r.body.find("dashboard was not built"), std::string::npos);
  }
  std::filesystem::create_directories(dir.path() / "web" / "assets");
  std::ofstream(dir.path() / "web" / "index.html") << "<html>dash</html>";
  std::ofstream(dir.path() / "web" / "assets" / "app-1234.js") << "console.log(1)";
  std::ofstream(dir.path() / "secret.txt") << "secret";
  o.web_root = (dir.path() / "web").string();
  RunningServer s(o);
  auto index = s.get("/");
  EXPECT_EQ(index.body, "<html>dash</html>");
  EXPECT_EQ(index.content_type, "text/html; charset=utf-8");
  auto js = s.get("/assets/app-1234.js");
  EXPECT_EQ(js.status, 200u);
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(s.get("/missing.css").status, 404u);
  EXPECT_EQ(s.get("/../secret.txt").status, 400u);
  EXPECT_EQ(s.get("/assets/%2e%2e/%2e%2e/secret.txt").status, 400u);
  std::string raw =
      raw_exchange(s.port(), "GET /../secret.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", true);
  EXPECT_EQ(raw.find("secret\n"), std::string::npos);
  EXPECT_EQ(raw.find("\r\n\r\nsecret"), std::string::npos);
}

// Nothing outside the web root is served, whatever the encoding: each hostile
// path goes out as a raw request line (no client normalizes it) and the reply
// must hold neither the secret beside the root, nor /etc/passwd, nor the token.
TEST(Protocol, StaticFilesNeverLeaveTheWebRoot) {
  TempDir dir;
  auto o = options_for(dir);
  namespace fs = std::filesystem;
  fs::create_directories(dir.path() / "web" / "assets");
  std::ofstream(dir.path() / "web" / "index.html") << "<html>dash</html>";
  std::ofstream(dir.path() / "web" / "assets" / "app.js") << "console.log(1)";
  std::ofstream(dir.path() / "secret.txt") << "TOPSECRET";
  fs::create_symlink(dir.path() / "secret.txt", dir.path() / "web" / "link.txt");
  fs::create_directory_symlink("/etc", dir.path() / "web" / "etc");
  fs::create_directory_symlink(dir.path(), dir.path() / "web" / "up");
  o.web_root = (dir.path() / "web").string();
  RunningServer s(o);
  const std::string token = s.token();
  const std::string tmp = dir.path().string();
  const std::vector<std::string> hostile = {
      "//etc/passwd",
      "///etc/passwd",
      "/%2Fetc/passwd",
      "/%2fetc/passwd",
      "/%2F%2Fetc%2Fpasswd",
      "//proc/self/cwd/dnnlab.token",
      "/" + tmp + "/secret.txt",
      "/%2F" + tmp.substr(1) + "/dnnlab.token",
      "/../secret.txt",
      "/../../../../../../../etc/passwd",
      "/..%2Fsecret.txt",
      "/%2e%2e/secret.txt",
      "/%2E%2E/secret.txt",
      "/.%2e/secret.txt",
      "/%2e./secret.txt",
      "/assets/../../secret.txt",
      "/assets/%2e%2e/%2e%2e/secret.txt",
      "/assets/%2F..%2F..%2Fsecret.txt",
      "/assets//etc/passwd",
      "/%252e%252e/secret.txt",
      "/%252Fetc/passwd",
      "/..\\secret.txt",
      "/%5c..%5csecret.txt",
      "/assets\\..\\..\\secret.txt",
      "/\\etc\\passwd",
      "/%00",
      "/index.html%00.txt",
      "/%09../secret.txt",
      "/./secret.txt",
      "/assets/./../../secret.txt",
      "/%c0%ae%c0%ae/secret.txt",
      "/..;/secret.txt",
      "/link.txt",
      "/etc/passwd",
      "/up/secret.txt",
      "/up/dnnlab.token",
      "/proc/self/environ",
  };
  ASSERT_GE(hostile.size(), 30u);
  for (const std::string& p : hostile) {
    std::string reply =
        raw_exchange(s.port(), "GET " + p + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", true);
    EXPECT_EQ(reply.find("TOPSECRET"), std::string::npos) << p;
    EXPECT_EQ(reply.find("root:"), std::string::npos) << p;
    EXPECT_EQ(reply.find(token), std::string::npos) << p;
    EXPECT_TRUE(reply.rfind("HTTP/1.1 400", 0) == 0 || reply.rfind("HTTP/1.1 404", 0) == 0)
        << p << " -> " << reply.substr(0, reply.find("\r\n"));
  }
  // The root itself still serves, and the server lives.
  EXPECT_EQ(s.get("/assets/app.js").status, 200u);
  EXPECT_EQ(s.get("/").body, "<html>dash</html>");
}

TEST(Protocol, ListenAddressesAreChecked) {
  EXPECT_EQ(parse_listen("127.0.0.1:8080").second, 8080);
  EXPECT_EQ(parse_listen("[::1]:0").first, "::1");
  EXPECT_THROW(parse_listen("localhost"), std::invalid_argument);
  EXPECT_THROW(parse_listen("127.0.0.1:99999"), std::invalid_argument);
  EXPECT_THROW(parse_listen("example.com:80"), std::invalid_argument);
}

}  // namespace
}  // namespace dnnlab::server::testing
