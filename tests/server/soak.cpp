// Issue 12, point 3, the soak test: a real server in a child process (so its
// RSS is its own, not the attacking threads'), then for kHostileSeconds every
// kind of hostile client the issue lists, at once, each from its own
// loopback address: big frames before hello, clients that never say hello,
// slow readers on /api/events and /join, connection floods past the caps,
// made-up HTTP methods, hello/close churn, out-of-range results and forged
// identities. Afterwards the server's RSS must be back within kRssSlackMiB of
// what it was before, and an honest browser client must finish a sweep.
// Labelled "slow" (tests/server/CMakeLists.txt); about 30 s.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/signal_set.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <fstream>
#include <random>
#include <sstream>

#include "browser_client.hpp"
#include "server_fixture.hpp"

namespace dnnlab::server::testing {
namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr int kHostileSeconds = 15;
// The bound on what the hostile phase may leave behind. Measured (release
// build, 2026-12-03, 2 vCPUs under load): ~29,000 connections in the 15 s;
// RSS 9.7 MiB before, 16.4 MiB at the peak and after (+6.8 MiB, glibc keeps
// what it freed). 64 MiB leaves room for that and still catches a leak of
// about 2 KiB per connection.
constexpr double kRssSlackMiB = 64;

constexpr const char* kSweep = R"(name: soak
template:
  data: {dataset: synthetic, limit_train: 128, validation: 32}
  model:
    layers:
      - dense: 16
        activation: relu
      - dense: 10
  train:
    epochs: 2
    batch_size: 32
    optimizer: {type: sgd, lr: ${lr}, momentum: 0.9}
search:
  method: grid
  metric: val_acc
  parameters:
    lr: [0.05, 0.1, 0.2]
scheduler:
  type: fifo
)";

double rss_mib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

// The server, forked before this process has any thread. It writes
// "PORT WRITE_TOKEN JOIN_TOKEN\n" to `ready` and serves until SIGTERM.
[[noreturn]] void serve_child(const ServerOptions& o, int ready) {
  try {
    asio::io_context io;
    Server srv(io, o);
    srv.start();
    asio::signal_set sig(io, SIGTERM);
    sig.async_wait([&](const boost::system::error_code&, int) { srv.stop(); });
    const std::string line =
        std::to_string(srv.port()) + " " + srv.token() + " " + srv.join_token() + "\n";
    if (write(ready, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(4);
    close(ready);
    io.run();
  } catch (const std::exception& e) {
    fprintf(stderr, "soak server: %s\n", e.what());
    _exit(3);
  }
  _exit(0);
}

struct Target {
  unsigned short port;
  std::string join_token;
};

void timeouts(tcp::socket& s, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// A socket from `source` to the server; rcvbuf > 0 makes it a small window.
void connect_from(tcp::socket& s, const std::string& source, unsigned short port, int rcvbuf = 0) {
  s.open(tcp::v4());
  if (rcvbuf > 0) setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  s.bind({asio::ip::make_address(source), 0});
  timeouts(s, 3);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
}

using Ws = websocket::stream<tcp::socket>;

bool ws_open(Ws& ws, const std::string& source, unsigned short port, const std::string& target,
             int rcvbuf = 0) {
  beast::error_code ec;
  try {
    connect_from(ws.next_layer(), source, port, rcvbuf);
  } catch (const std::exception&) {
    return false;
  }
  ws.handshake("127.0.0.1:" + std::to_string(port), target, ec);
  return !ec;
}

void drain_until_closed(Ws& ws) {
  beast::flat_buffer b;
  beast::error_code ec;
  for (int i = 0; i < 100 && !ec; ++i) {
    b.clear();
    ws.read(b, ec);
  }
}

std::string hello(const std::string& token, const std::string& client) {
  return json{{"v", 1}, {"type", "hello"}, {"token", token}, {"client", client}}.dump();
}

// Each kind of hostile client: runs rounds until `stop`, returns how many.
using Attack = std::function<void(const Target&, const std::string& source)>;

struct Kind {
  const char* name;
  Attack round;
};

std::vector<Kind> hostile_kinds() {
  return {
      {"big frame before hello",
       [](const Target& t, const std::string& src) {
         asio::io_context io;
         Ws ws(io);
         if (!ws_open(ws, src, t.port, "/join")) return;
         beast::error_code ec;
         ws.write(asio::buffer(std::string(1 << 20, 'x')), ec);
         drain_until_closed(ws);
       }},
      {"never says hello",
       [](const Target& t, const std::string& src) {
         asio::io_context io;
         std::vector<std::unique_ptr<Ws>> held;
         for (int i = 0; i < 16; ++i) {
           auto ws = std::make_unique<Ws>(io);
           if (ws_open(*ws, src, t.port, "/join")) held.push_back(std::move(ws));
         }
         for (auto& ws : held) drain_until_closed(*ws);  // the hello deadline closes them
       }},
      {"slow reader on /api/events",
       [](const Target& t, const std::string& src) {
         asio::io_context io;
         std::vector<std::unique_ptr<Ws>> held;
         for (int i = 0; i < 8; ++i) {
           auto ws = std::make_unique<Ws>(io);
           if (ws_open(*ws, src, t.port, "/api/events?after=0", 4096))
             held.push_back(std::move(ws));
         }
         std::this_thread::sleep_for(std::chrono::seconds(3));  // never reading
       }},
      {"slow reader on /join",
       [](const Target& t, const std::string& src) {
         asio::io_context io;
         Ws ws(io);
         if (!ws_open(ws, src, t.port, "/join", 4096)) return;
         beast::error_code ec;
         ws.write(asio::buffer(hello(t.join_token, "slow")), ec);
         const std::string beat = json{{"v", 1}, {"type", "heartbeat"}, {"ticket", nullptr}}.dump();
         for (int i = 0; i < 20000 && !ec; ++i) ws.write(asio::buffer(beat), ec);
       }},
      {"connection flood past the caps",
       [](const Target& t, const std::string& src) {
         asio::io_context io;
         std::vector<std::unique_ptr<tcp::socket>> held;
         for (int i = 0; i < 100; ++i) {
           auto s = std::make_unique<tcp::socket>(io);
           try {
             connect_from(*s, src, t.port);
             held.push_back(std::move(s));
           } catch (const std::exception&) {
           }
         }
         std::this_thread::sleep_for(std::chrono::milliseconds(500));
       }},
      {"made-up HTTP methods",
       [](const Target& t, const std::string& src) {
         static thread_local std::mt19937 rng(7);
         asio::io_context io;
         tcp::socket s(io);
         try {
           connect_from(s, src, t.port);
           for (int i = 0; i < 50; ++i) {
             const std::string req =
                 "M" + std::to_string(rng()) + " /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
             asio::write(s, asio::buffer(req));
             char buf[4096];
             s.read_some(asio::buffer(buf));
           }
         } catch (const std::exception&) {
         }
       }},
      {"hello/close churn",
       [](const Target& t, const std::string& src) {
         asio::io_context io;
         Ws ws(io);
         if (!ws_open(ws, src, t.port, "/join")) return;
         beast::error_code ec;
         ws.write(asio::buffer(hello(t.join_token, "churn")), ec);
         beast::flat_buffer b;
         ws.read(b, ec);
         ws.close(websocket::close_code::normal, ec);
       }},
      {"out-of-range results",
       [](const Target& t, const std::string& src) {
         asio::io_context io;
         Ws ws(io);
         if (!ws_open(ws, src, t.port, "/join")) return;
         beast::error_code ec;
         beast::flat_buffer b;
         ws.write(asio::buffer(hello(t.join_token, "liar")), ec);
         ws.read(b, ec);
         for (int i = 0; i < 20 && !ec; ++i) {
           b.clear();
           ws.write(asio::buffer(json{{"v", 1}, {"type", "request"}}.dump()), ec);
           ws.read(b, ec);
           if (ec) return;
           json m = json::parse(beast::buffers_to_string(b.data()), nullptr, false);
           if (m.is_discarded() || m.value("type", "") != "ticket") {
             std::this_thread::sleep_for(std::chrono::milliseconds(100));
             continue;
           }
           ws.write(asio::buffer(json{
                        {"v", 1},
                        {"type", "progress"},
                        {"ticket", m["ticket"]},
                        {"epoch", 1},
                        {"train_loss", -3.0},
                        {"train_acc", 7.5},
                        {"val_loss", 1e300},
                        {"val_acc", 7.5},
                        {"seconds",
                         -1.0}}.dump()),
                    ec);
           drain_until_closed(ws);
           return;
         }
       }},
      {"forged identity",
       [](const Target& t, const std::string& src) {
         asio::io_context io;
         Ws ws(io);
         if (!ws_open(ws, src, t.port, "/join")) return;
         beast::error_code ec;
         const std::string forged = std::string(24, 'a') + "." + std::string(32, 'f');
         ws.write(asio::buffer(hello(t.join_token, forged)), ec);
         beast::flat_buffer b;
         ws.read(b, ec);
         if (!ec) {
           json w = json::parse(beast::buffers_to_string(b.data()), nullptr, false);
           if (!w.is_discarded() && w.value("worker", "") == "browser-" + std::string(24, 'a'))
             ADD_FAILURE() << "a forged identity was honoured";
         }
         ws.close(websocket::close_code::normal, ec);
       }},
  };
}

TEST(Soak, HostileClientsLeaveNoMemoryBehindAndAnHonestSweepFinishes) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  o.listen = "127.0.0.1:0";
  o.max_send_queue = 256 * 1024;        // slow readers are found sooner
  o.gateway.hello_timeout_seconds = 2;  // and silent clients
  {
    // A backlog for the slow event readers, and trials for the liars.
    auto st = store::open_result_store(o.store_url);
    for (int i = 0; i < 5000; ++i) st->append_event("worker.joined", {{"worker", i}});
  }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    serve_child(o, ready[1]);
  }
  close(ready[1]);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(pid, SIGTERM);
      int status = 0;
      waitpid(pid, &status, 0);
    }
  } reaper{pid};
  std::string line;
  {
    char buf[512];
    ssize_t n = 0;
    while ((n = read(ready[0], buf, sizeof buf)) > 0) {
      line.append(buf, static_cast<std::size_t>(n));
      if (line.find('\n') != std::string::npos) break;
    }
    close(ready[0]);
  }
  std::istringstream in(line);
  Target target;
  std::string write_token;
  in >> target.port >> write_token >> target.join_token;
  ASSERT_GT(target.port, 0) << "the server did not start: '" << line << "'";
  const std::string url = "http://127.0.0.1:" + std::to_string(target.port);

  // Bait for the liars: an experiment with more trials than they can take.
  std::string bait = kSweep;
  bait.replace(bait.find("[0.05, 0.1, 0.2]"), 16,
               "[0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.11, 0.12]");
  auto posted = http_request(url, "POST", "/api/experiments",
                             json{{"spec", bait}, {"name", "bait.yaml"}}.dump(), write_token);
  ASSERT_EQ(posted.status, 202u) << posted.body;
  const std::int64_t bait_id = json::parse(posted.body)["id"];
  // Warm up what any first use allocates (the routes, the shard, SQLite's cache).
  ASSERT_EQ(http_request(url, "GET", "/api/stats").status, 200u);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double baseline = rss_mib(pid);
  ASSERT_GT(baseline, 0);

  const auto kinds = hostile_kinds();
  std::atomic<bool> stop{false};
  std::vector<std::atomic<long>> rounds(kinds.size());
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < kinds.size(); ++k)
    threads.emplace_back([&, k] {
      const std::string src = "127.0.1." + std::to_string(k + 1);
      while (!stop) {
        try {
          kinds[k].round(target, src);
        } catch (const std::exception&) {
          // Refused, reset, timed out: what hostile clients get.
        }
        ++rounds[k];
      }
    });
  double peak = baseline;
  const auto end = Clock::now() + std::chrono::seconds(kHostileSeconds);
  while (Clock::now() < end) {
    peak = std::max(peak, rss_mib(pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stop = true;
  for (auto& t : threads) t.join();
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    std::cout << "  " << kinds[k].name << ": " << rounds[k] << " rounds\n";
    EXPECT_GT(rounds[k], 0) << kinds[k].name;
  }

  // The server is still answering, and gives back what the attack made it hold.
  auto stats = http_request(url, "GET", "/api/stats");
  EXPECT_EQ(stats.status, 200u);
  double after = rss_mib(pid);
  for (int i = 0; i < 50 && after > baseline + kRssSlackMiB; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    after = rss_mib(pid);
  }
  std::cout << "  RSS MiB: baseline " << baseline << ", peak " << peak << ", after " << after
            << " (bound: baseline + " << kRssSlackMiB << ")\n";
  EXPECT_LE(after, baseline + kRssSlackMiB);

  // An honest client then finishes a sweep (the bait is cancelled so that
  // the sweep's trials are the ones on offer).
  EXPECT_EQ(http_request(url, "POST", "/api/experiments/" + std::to_string(bait_id) + "/cancel", "",
                         write_token)
                .status,
            200u);
  posted = http_request(url, "POST", "/api/experiments",
                        json{{"spec", kSweep}, {"name", "honest.yaml"}}.dump(), write_token);
  ASSERT_EQ(posted.status, 202u) << posted.body;
  const std::int64_t id = json::parse(posted.body)["id"];
  HonestBrowser honest(target.port, target.join_token, o.store_url, "127.0.0.2");
  auto results = honest.work(id, Clock::now() + std::chrono::seconds(60));
  EXPECT_EQ(results.size(), 3u);
  auto st = store::open_result_store(o.store_url);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (st->experiment(id)->status == store::ExperimentStatus::running && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(st->experiment(id)->status, store::ExperimentStatus::finished);
  EXPECT_EQ(st->trial_counts(id).finished, 3);
}

}  // namespace
}  // namespace dnnlab::server::testing
