// Issue 24 ("Nothing unverified counts, and no input crashes it"), the
// server's network side, each attack made against a real server on loopback:
// silent /api/events streams that would hold their slots for five minutes,
// a hello pipelined behind the WebSocket upgrade, odd Transfer-Encodings,
// and a volunteer's address and User-Agent shown to anyone.
#include <sys/socket.h>

#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <thread>

#include "server_fixture.hpp"

namespace dnnlab::server::testing {
// Named: the unity build puts this file beside others with the same helpers.
namespace net_hardening {
namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

ServerOptions options(const TempDir& dir) {
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  o.listen = "127.0.0.1:0";
  return o;
}

unsigned status_of(const std::string& raw) {
  return raw.size() >= 12 && raw.rfind("HTTP/1.", 0) == 0
             ? static_cast<unsigned>(std::stoul(raw.substr(9, 3)))
             : 0;
}

// A WebSocket client of /api/events that completes the handshake and then
// never reads: it answers no ping.
struct SilentStream {
  asio::io_context io;
  websocket::stream<tcp::socket> ws{io};
  explicit SilentStream(unsigned short port, const std::string& target = "/api/events") {
    ws.next_layer().connect({asio::ip::make_address("127.0.0.1"), port});
    ws.handshake("127.0.0.1", target);
  }
  // Reads the raw socket until the server closes it (true) or `limit` passes.
  bool closed_within(std::chrono::milliseconds limit) {
    timeval tv{0, 200 * 1000};
    setsockopt(ws.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const auto give_up = Clock::now() + limit;
    char buf[512];
    while (Clock::now() < give_up) {
      const ssize_t n = ::recv(ws.next_layer().native_handle(), buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
  }
};

// The status of a WebSocket upgrade of `target` (101, or the refusal's).
unsigned upgrade_status(unsigned short port, const std::string& target) {
  return status_of(raw_exchange(port, "GET " + target +
                                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                                          "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                                          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"));
}

// 1,024 silent streams from 18 addresses locked every new client out for
// 300 s. Now a silent stream is pinged at half of event_idle_seconds and
// closed at it; streams hold at most half the connections, the other half
// stay for requests; a client that answers pings stays.
TEST(NetHardening, SilentEventStreamsAreClosedAndLeaveHalfTheSlots) {
  TempDir dir;
  ServerOptions o = options(dir);
  o.max_connections = 6;  // event streams: 3 at most
  o.event_idle_seconds = 1.5;
  RunningServer s(o);
  std::vector<std::unique_ptr<SilentStream>> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(std::make_unique<SilentStream>(s.port()));
  const auto opened = Clock::now();
  // The streams' share is taken: another stream is refused, requests still served.
  EXPECT_EQ(upgrade_status(s.port(), "/api/events"), 503u);
  EXPECT_EQ(s.get("/api/stats").status, 200u);
  EXPECT_EQ(s.get("/api/workers").status, 200u);
  // Closed within the idle time (plus slack for a loaded machine), not after 300 s.
  for (auto& c : silent) EXPECT_TRUE(c->closed_within(6s)) << "a silent stream kept its slot";
  EXPECT_LT(Clock::now() - opened, 6s);
  EXPECT_GT(Clock::now() - opened, 1s) << "closed before the ping was due";

  // Their slots are free again; a client that reads (and so answers pings)
  // keeps its stream past several idle times.
  silent.clear();
  asio::io_context io;
  websocket::stream<tcp::socket> ws{io};
  const auto deadline = Clock::now() + 5s;
  websocket::response_type res;
  beast::error_code ec;
  do {
    ws.next_layer().close(ec);
    ws.next_layer().connect({asio::ip::make_address("127.0.0.1"), s.port()});
    ws.handshake(res, "127.0.0.1", "/api/events", ec);
  } while (ec && Clock::now() < deadline);
  ASSERT_FALSE(ec) << ec.message() << " (status " << res.result_int() << ")";
  beast::flat_buffer buf;
  beast::error_code read_error;
  bool read_ended = false;
  ws.async_read(buf, [&](beast::error_code e, std::size_t) {
    read_ended = true;
    read_error = e;
  });
  io.run_for(4s);
  EXPECT_FALSE(read_ended) << "a stream that answers pings was closed: " << read_error.message();
}

// A masked client text frame.
std::string client_text_frame(const std::string& payload) {
  std::string f;
  f += static_cast<char>(0x81);
  if (payload.size() < 126) {
    f += static_cast<char>(0x80 | payload.size());
  } else {
    f += static_cast<char>(0x80 | 126);
    f += static_cast<char>(payload.size() >> 8);
    f += static_cast<char>(payload.size() & 0xff);
  }
  const unsigned char mask[4] = {0x12, 0x34, 0x56, 0x78};
  for (unsigned char m : mask) f += static_cast<char>(m);
  for (std::size_t i = 0; i < payload.size(); ++i) f += static_cast<char>(payload[i] ^ mask[i % 4]);
  return f;
}

// A hello sent in the same segment as the upgrade request (the client does
// not wait for the 101) was read into the HTTP parser's buffer and lost: no
// welcome, and the connection closed at --hello-timeout as if silent.
TEST(NetHardening, HelloPipelinedBehindTheUpgradeIsAnswered) {
  TempDir dir;
  RunningServer s(options(dir));
  for (const std::string target : {"/join", "/api/events"}) {
    const std::string frame = target == "/join" ? client_text_frame(json{
                                                      {"v", 1},
                                                      {"type", "hello"},
                                                      {"token", s.server().join_token()},
                                                      {"client", nullptr},
                                                      {"agent",
                                                       "pipelined"}}.dump())
                                                : client_text_frame("not an after");
    asio::io_context io;
    tcp::socket sock(io);
    sock.connect({asio::ip::make_address("127.0.0.1"), s.port()});
    timeval tv{0, 200 * 1000};
    setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const std::string bytes = "GET " + target +
                              " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                              "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" +
                              frame;
    asio::write(sock, asio::buffer(bytes));  // one write: one segment on loopback
    // /join answers the hello with "welcome"; /api/events answers a frame
    // that is not {"after": ID} with an error naming the form.
    const std::string want = target == "/join" ? "\"welcome\"" : "EVENT_ID";
    std::string got;
    const auto give_up = Clock::now() + 5s;
    char buf[4096];
    while (got.find(want) == std::string::npos && Clock::now() < give_up) {
      const ssize_t n = ::recv(sock.native_handle(), buf, sizeof buf, 0);
      if (n == 0) break;
      if (n > 0) got.append(buf, static_cast<std::size_t>(n));
    }
    EXPECT_EQ(status_of(got), 101u) << target << ": " << got;
    EXPECT_NE(got.find(want), std::string::npos) << target << ": no answer to the pipelined frame\n"
                                                 << got;
  }
}

// Anything but one "Transfer-Encoding: chunked" (any case) gets 400: a
// proxy in front may delimit "gzip, chunked" or "chunked, gzip" bodies
// otherwise than Beast does (request smuggling).
TEST(NetHardening, OddTransferEncodingsGet400) {
  TempDir dir;
  RunningServer s(options(dir));
  const std::string head = "POST /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  const std::string chunked_body = "5\r\nhello\r\n0\r\n\r\n";
  for (const std::string te :
       {"Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding: chunked, gzip\r\n",
        "Transfer-Encoding: identity\r\n", "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 17\r\n",
        "Content-Length: 17\r\nTransfer-Encoding: chunked\r\n"}) {
    const std::string raw = raw_exchange(s.port(), head + te + "\r\n" + chunked_body, true);
    EXPECT_EQ(status_of(raw), 400u) << te << raw;
    EXPECT_TRUE(raw.find("Transfer-Encoding") != std::string::npos ||
                raw.find("Content-Length") != std::string::npos)
        << te << raw;
  }
  // Plain chunked passes the framing check (and the route answers 405: GET only).
  for (const std::string te : {"Transfer-Encoding: chunked\r\n", "Transfer-Encoding: CHUNKED\r\n",
                               "Transfer-Encoding:  Chunked \r\n"}) {
    const std::string raw = raw_exchange(s.port(), head + te + "\r\n" + chunked_body, true);
    EXPECT_EQ(status_of(raw), 405u) << te << raw;
  }
  EXPECT_EQ(s.get("/api/stats").status, 200u);
}

// A volunteer's address (/api/workers "host") and User-Agent (worker.joined's
// "agent") are for token holders; public readers get the rows without them.
TEST(NetHardening, WorkerAddressesAndAgentsAreForTokenHolders) {
  for (bool private_reads : {false, true}) {
    TempDir dir;
    ServerOptions o = options(dir);
    o.public_reads = !private_reads;
    const std::string kAddress = "203.0.113.7:51234", kAgent = "Mozilla/5.0 (Volunteer 42)";
    {
      auto st = store::open_result_store(o.store_url);
      store::WorkerRecord w;
      w.id = "browser-abc";
      w.kind = store::WorkerKind::browser;
      w.host = kAddress;
      w.started_at = 1;
      st->upsert_worker(w);
      st->append_event("worker.joined",
                       {{"worker", "browser-abc"}, {"kind", "browser"}, {"agent", kAgent}});
    }
    RunningServer s(o);
    const std::string reader = private_reads ? s.server().read_token() : std::string();
    // Public reads: no token at all. Private reads: the read token is what
    // the dashboard carries, and it is a token: it sees them.
    if (!private_reads) {
      for (const char* target : {"/api/workers", "/api/events?after=0"}) {
        auto r = s.get(target);
        ASSERT_EQ(r.status, 200u) << target;
        EXPECT_EQ(r.body.find("203.0.113.7"), std::string::npos) << target << ": " << r.body;
        EXPECT_EQ(r.body.find("Volunteer 42"), std::string::npos) << target << ": " << r.body;
      }
      EXPECT_EQ(parse(s.get("/api/workers"))["workers"][0]["id"], "browser-abc");
      EXPECT_FALSE(parse(s.get("/api/workers"))["workers"][0].contains("host"));
      EXPECT_EQ(parse(s.get("/api/events?after=0"))["events"][0]["data"]["worker"], "browser-abc");
      SilentStream ev(s.port(), "/api/events?after=0");
      beast::flat_buffer buf;
      ev.ws.read(buf);
      const std::string frame = beast::buffers_to_string(buf.data());
      EXPECT_NE(frame.find("browser-abc"), std::string::npos) << frame;
      EXPECT_EQ(frame.find("Volunteer 42"), std::string::npos) << frame;
    }
    for (const std::string& token : {s.token(), reader}) {
      if (token.empty()) continue;
      EXPECT_EQ(parse(s.get("/api/workers", token))["workers"][0]["host"], kAddress);
      EXPECT_EQ(parse(s.get("/api/workers?token=" + token))["workers"][0]["host"], kAddress);
      EXPECT_EQ(parse(s.get("/api/events?after=0", token))["events"][0]["data"]["agent"], kAgent);
      SilentStream ev(s.port(), "/api/events?after=0&token=" + token);
      beast::flat_buffer buf;
      ev.ws.read(buf);
      EXPECT_NE(beast::buffers_to_string(buf.data()).find("Volunteer 42"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace net_hardening
}  // namespace dnnlab::server::testing
