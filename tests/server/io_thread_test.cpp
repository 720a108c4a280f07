// The io thread only moves bytes: while the gateway waits on its queue (a
// lease blocked by a write lock on the embedded store, as a broker round trip
// or a slow store would block it), REST reads and /join heartbeats are still
// answered at once.
#include <sqlite3.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <iostream>
#include <vector>

#include "experiment/coordinator.hpp"
#include "queue/task_queue.hpp"
#include "server_fixture.hpp"

namespace dnnlab::server::io_thread_test {

using namespace dnnlab::server::testing;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using Clock = std::chrono::steady_clock;

constexpr const char* kTinySweep = R"(name: tiny
template:
  data: {dataset: synthetic, limit_train: 64, validation: 16}
  model:
    layers:
      - dense: 8
        activation: relu
      - dense: 10
  train:
    epochs: 1
    batch_size: 32
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: grid
  metric: val_acc
  parameters:
    lr: [0.05, 0.1]
scheduler:
  type: fifo
)";

// A /join client speaking protocol v1 with blocking calls (5 s read timeout).
class JoinClient {
 public:
  JoinClient(unsigned short port, const std::string& token) : ws_(io_) {
    ws_.next_layer().connect({asio::ip::make_address("127.0.0.1"), port});
    timeval tv{5, 0};
    setsockopt(ws_.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ws_.handshake("127.0.0.1", "/join");
    send({{"type", "hello"}, {"token", token}, {"agent", "io-thread-test"}});
    welcome_ = read();
  }
  void send(json msg) {
    msg["v"] = 1;
    ws_.write(asio::buffer(msg.dump()));
  }
  json read() {
    beast::flat_buffer buf;
    ws_.read(buf);
    return json::parse(beast::buffers_to_string(buf.data()));
  }
  const json& welcome() const { return welcome_; }

 private:
  asio::io_context io_;
  websocket::stream<asio::ip::tcp::socket> ws_;
  json welcome_;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(ServerIoThread, RestAndHeartbeatsAreAnsweredWhileALeaseWaitsOnTheQueue) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  o.run_coordinators = false;
  {
    auto st = store::open_result_store(o.store_url);
    auto q = queue::open_task_queue(o.store_url);
    const auto exp = experiment::Coordinator::submit(*st, *q, kTinySweep, "tiny.yaml");
    experiment::Coordinator(*st, *q, exp).tick(100);
  }
  RunningServer s(o);
  JoinClient waiting(s.port(), s.server().join_token());
  JoinClient beating(s.port(), s.server().join_token());
  ASSERT_EQ(waiting.welcome()["type"], "welcome") << waiting.welcome();
  ASSERT_EQ(beating.welcome()["type"], "welcome") << beating.welcome();
  // Every reader thread has opened its store before the lock is taken.
  for (int i = 0; i < 6; ++i) ASSERT_EQ(s.get("/api/stats").status, 200u);

  // Another connection holds the write lock: the gateway's lease (a queue
  // write) waits for it, as it would for a slow broker.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("dnnlab.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  const auto locked_at = Clock::now();
  waiting.send({{"type", "request"}});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the lane is in the lease now

  std::vector<double> stats_ms, heartbeat_ms;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    auto r = s.get("/api/stats");
    stats_ms.push_back(ms_since(t0));
    EXPECT_EQ(r.status, 200u) << r.body;
    EXPECT_TRUE(parse(r).contains("queue_depth")) << r.body;
    t0 = Clock::now();
    beating.send({{"type", "heartbeat"}});
    json h = beating.read();
    heartbeat_ms.push_back(ms_since(t0));
    EXPECT_EQ(h["type"], "heartbeat") << h;
  }
  const double held_ms = ms_since(locked_at);
  ASSERT_EQ(sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  // The lease was blocked all along: its reply comes only now.
  json ticket = waiting.read();
  const double lease_ms = ms_since(locked_at);
  EXPECT_TRUE(ticket["type"] == "ticket" || ticket["type"] == "idle") << ticket;
  EXPECT_GE(lease_ms, held_ms) << "the lease did not wait for the lock: the test shows nothing";
  std::cout << "lock held " << held_ms << " ms; median GET /api/stats " << median(stats_ms)
            << " ms, median heartbeat " << median(heartbeat_ms) << " ms\n";
  EXPECT_LT(median(stats_ms), 50.0) << "GET /api/stats waited on the gateway's lease";
  EXPECT_LT(median(heartbeat_ms), 50.0) << "a heartbeat waited on another client's lease";
  EXPECT_LT(*std::max_element(stats_ms.begin(), stats_ms.end()), 1000.0);
  EXPECT_LT(*std::max_element(heartbeat_ms.begin(), heartbeat_ms.end()), 1000.0);
}

// The io thread answers a heartbeat before the gateway checks it: one that
// names a ticket the client does not hold is still refused, and the
// connection closed, once the gateway's lane gets to it.
TEST(ServerIoThread, AHeartbeatAnsweredEarlyIsStillCheckedAndRefused) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  o.run_coordinators = false;
  RunningServer s(o);
  JoinClient liar(s.port(), s.server().join_token());
  ASSERT_EQ(liar.welcome()["type"], "welcome") << liar.welcome();
  liar.send({{"type", "heartbeat"}, {"ticket", "t-not-mine"}});
  EXPECT_EQ(liar.read()["type"], "heartbeat");  // the early echo
  json err = liar.read();
  EXPECT_EQ(err["type"], "error") << err;
  EXPECT_NE(err.dump().find("not_held"), std::string::npos) << err;
  EXPECT_THROW(liar.read(), boost::system::system_error);  // then closed
}

}  // namespace dnnlab::server::io_thread_test
