// `dnnlab join` over a lost link: a TCP proxy between one join process and
// the server cuts the connection mid-run; the client reconnects as the same
// identity and trains on (or, refused or out of tries, ends with its
// documented exit code); --identity-file carries the identity to a new
// process; bad --reconnect values name the flag.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <regex>

#include "hybrid_net/identity_file.hpp"
#include "join_util.hpp"

namespace dnnlab::cli_test {
namespace join_reconnect_test {

// A TCP proxy on 127.0.0.1 in front of the server's port: forwards both
// ways, one thread per connection; once `cut_after` bytes have come from the
// server it shuts that connection (once: later ones pass untouched), and,
// with `close_on_cut`, closes every later connection as soon as it is made:
// no way back, whatever the port (a closed one could be taken again). With
// `pace`, it waits that long after each read from the server: a slow link,
// which makes a run last (a proxy that never cuts: cut_after = SIZE_MAX).
class CutProxy {
 public:
  CutProxy(int upstream, size_t cut_after, bool close_on_cut = false,
           std::chrono::milliseconds pace = std::chrono::milliseconds(0))
      : upstream_(upstream), cut_after_(cut_after), close_on_cut_(close_on_cut), pace_(pace) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(0);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listener_, 8), 0);
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_ = std::thread([this] { accept_loop(); });
  }
  ~CutProxy() {
    stop_ = true;
    accept_.join();
    for (auto& t : threads_) t.join();
    if (listener_ >= 0) ::close(listener_);
  }
  int port() const { return port_; }
  int connections() const { return connections_; }
  bool cut() const { return cut_; }

 private:
  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  void accept_loop() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int down = ::accept(listener_, nullptr, nullptr);
      if (down < 0) continue;
      if (refuse_) {  // no way back: every later connection is closed at once
        ::close(down);
        continue;
      }
      const int up = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = loopback(upstream_);
      if (::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(down);
        ::close(up);
        continue;
      }
      ++connections_;
      threads_.emplace_back([this, down, up] { pump(down, up); });
    }
  }
  void pump(int down, int up) {
    size_t from_server = 0;
    char buf[1 << 16];
    while (!stop_) {
      pollfd p[2] = {{down, POLLIN, 0}, {up, POLLIN, 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      bool ended = false;
      for (int i = 0; i < 2 && !ended; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
        if (n <= 0) {
          ended = true;
          break;
        }
        for (ssize_t off = 0; off < n && !ended;) {
          const ssize_t w = ::write(p[1 - i].fd, buf + off, static_cast<size_t>(n - off));
          ended = w <= 0;
          off += w;
        }
        if (i == 1) from_server += static_cast<size_t>(n);
        if (i == 1 && pace_.count() > 0) std::this_thread::sleep_for(pace_);
      }
      if (!ended && from_server >= cut_after_ && !cut_.exchange(true)) {
        refuse_ = close_on_cut_;
        ended = true;
      }
      if (ended) break;
    }
    ::shutdown(down, SHUT_RDWR);
    ::shutdown(up, SHUT_RDWR);
    ::close(down);
    ::close(up);
  }

  int upstream_;
  size_t cut_after_;
  bool close_on_cut_;
  std::chrono::milliseconds pace_;
  int listener_ = -1, port_ = 0;
  std::atomic<bool> stop_{false}, cut_{false}, refuse_{false};
  std::atomic<int> connections_{0};
  std::thread accept_;
  std::vector<std::thread> threads_;  // the accept thread's until it ends
};

int port_of(const std::string& url) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(url, m, std::regex(R"(:(\d+)/)"))) << url;
  return m.empty() ? 0 : std::stoi(m[1]);
}

std::string via(const std::string& url, int port) {
  return std::regex_replace(url, std::regex(R"(:\d+/)"), ":" + std::to_string(port) + "/");
}

// The id in a join log's "joined ... as client N".
int joined_as(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex(R"(as client (\d+):)")) ? std::stoi(m[1]) : -1;
}

// A served run (not quiet, so that its log says who is back) for `clients`.
struct Served {
  TempDir dir;
  pid_t pid = -1;
  Join join;
  explicit Served(int clients) {
    const auto spec = dir.write("net.yaml", kNetSpec);
    pid = spawn(dir.path,
                {"train", spec.string(), "--distributed", "--listen", "127.0.0.1:0", "--clients",
                 std::to_string(clients), "--client-wait", "30", "--out", "."});
    join = read_join_line(dir.path / "log.txt");
  }
  ~Served() {
    if (pid > 0 && ::kill(pid, 0) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  pid_t client(const TempDir& d, const std::string& url, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"join", url, "--token", join.token};
    args.insert(args.end(), extra.begin(), extra.end());
    return spawn(d.path, args);
  }
  nlohmann::json metrics() const {
    return nlohmann::json::parse(slurp(dir.path / "net.metrics.json"));
  }
  std::string log() const { return slurp(dir.path / "log.txt"); }
};

TEST(JoinReconnect, ALinkCutMidRunIsResumedAsTheSameClient) {
  Served run(2);
  CutProxy proxy(port_of(run.join.url), 150000);
  // The other client's link is slow (20 ms a read from the server, a few
  // reads a ticket, 32 synchronous rounds): the run outlasts the cut
  // client's pause before it reconnects (at most 0.5 s), however fast the
  // machine.
  CutProxy slow(port_of(run.join.url), SIZE_MAX, false, std::chrono::milliseconds(20));
  TempDir a, b;
  const pid_t cut = run.client(a, via(run.join.url, proxy.port()));
  const pid_t direct = run.client(b, via(run.join.url, slow.port()), {"-q"});
  ASSERT_EQ(wait_exit(run.pid, 60), 0) << run.log();
  run.pid = -1;
  const std::string log = slurp(a.path / "log.txt");
  EXPECT_EQ(wait_exit(cut, 10), 0) << log;
  EXPECT_EQ(wait_exit(direct, 10), 0) << slurp(b.path / "log.txt");
  EXPECT_TRUE(proxy.cut());
  EXPECT_GE(proxy.connections(), 2);
  const int id = joined_as(log);
  ASSERT_GE(id, 0) << log;
  EXPECT_NE(log.find("reconnecting as client " + std::to_string(id) + " in"), std::string::npos)
      << log;
  EXPECT_NE(log.find("reconnected as client " + std::to_string(id) + ";"), std::string::npos)
      << log;
  EXPECT_NE(run.log().find("client " + std::to_string(id) + " is back"), std::string::npos)
      << run.log();
  const auto m = run.metrics();
  // Two ids in all: the reconnect took no new one, and both trained.
  ASSERT_EQ(m["distributed"]["tickets_by_client"].size(), 2u) << m.dump();
  EXPECT_GT(m["distributed"]["tickets_by_client"][id].get<int>(), 0);
  EXPECT_LE(m["distributed"]["reissued"].get<int>(), 1);
  EXPECT_EQ(m["distributed"]["tickets"].get<int>(), 64 + m["distributed"]["reissued"].get<int>());
  EXPECT_EQ(m["distributed"]["quarantined"].size(), 0u);
  EXPECT_LT(m["epochs"][1]["val_loss"].get<double>(), 2.0);
  EXPECT_LT(m["epochs"][1]["train_loss"].get<double>(), m["epochs"][0]["train_loss"].get<double>());
}

// The run's only client is cut: the run waits for it (the grace of a
// --listen run) instead of ending with "no client is left".
TEST(JoinReconnect, ARunWhoseOnlyClientIsCutWaitsForItToComeBack) {
  Served run(1);
  CutProxy proxy(port_of(run.join.url), 150000);
  TempDir a;
  const pid_t cut = run.client(a, via(run.join.url, proxy.port()));
  ASSERT_EQ(wait_exit(run.pid, 60), 0) << run.log();
  run.pid = -1;
  const std::string log = slurp(a.path / "log.txt");
  EXPECT_EQ(wait_exit(cut, 10), 0) << log;
  EXPECT_TRUE(proxy.cut());
  EXPECT_NE(run.log().find("every client has left; waiting up to 30"), std::string::npos)
      << run.log();
  EXPECT_NE(run.log().find("client 0 is back"), std::string::npos) << run.log();
  const auto m = run.metrics();
  ASSERT_EQ(m["distributed"]["tickets_by_client"].size(), 1u) << m.dump();
  EXPECT_LE(m["distributed"]["reissued"].get<int>(), 1);
  EXPECT_LT(m["epochs"][1]["train_loss"].get<double>(), m["epochs"][0]["train_loss"].get<double>());
}

TEST(JoinReconnect, NoWayBackEndsJoinWithExitEightAfterItsTries) {
  Served run(2);
  CutProxy proxy(port_of(run.join.url), 150000, /*close_on_cut=*/true);
  TempDir a, b;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t cut = run.client(a, via(run.join.url, proxy.port()), {"--reconnect", "2"});
  const pid_t direct = run.client(b, run.join.url, {"-q"});
  const std::string log = [&] {
    const int code = wait_exit(cut, 20);
    const std::string text = slurp(a.path / "log.txt");
    EXPECT_EQ(code, 8) << text;
    return text;
  }();
  // Two pauses of at most 0.5 s and 1 s, and refused connections.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(log.find("(try 2 of 2)"), std::string::npos) << log;
  EXPECT_NE(log.find("the link was lost and 2 tries at reconnecting failed"), std::string::npos)
      << log;
  EXPECT_EQ(wait_exit(direct, 30), 0);  // the other client finishes the run
}

TEST(JoinReconnect, ARefusedIdentityEndsJoinWithExitSeven) {
  Served run(1);
  TempDir a;
  const std::string file = (a.path / "id.json").string();
  // An identity of this run's token that the run never issued.
  hybrid_net::write_identity_file(file, run.join.token, {5, std::string(64, 'a')});
  const pid_t p = run.client(a, run.join.url, {"--identity-file", file});
  const int code = wait_exit(p, 10);
  const std::string log = slurp(a.path / "log.txt");
  EXPECT_EQ(code, 7) << log;
  EXPECT_NE(log.find("the server refused to resume client 5 of " + file), std::string::npos) << log;
  EXPECT_NE(log.find("identity 5 is not known here"), std::string::npos) << log;
}

TEST(JoinReconnect, ARestartedJoinResumesTheIdentityInItsFile) {
  Served run(2);
  CutProxy proxy(port_of(run.join.url), 100000);
  TempDir a, b, c;
  const std::string file = (a.path / "id.json").string();
  // The first process does not reconnect: the cut ends it (exit 1).
  const pid_t first =
      run.client(a, via(run.join.url, proxy.port()), {"--identity-file", file, "--reconnect", "0"});
  // The direct client holds each answer 50 ms (join's test pacing): alone
  // after the cut it would otherwise finish the run before the restarted
  // process connects, on a loaded machine ("Connection refused").
  const pid_t direct = run.client(b, run.join.url, {"-q", "--send-delay-ms", "50"});
  EXPECT_EQ(wait_exit(first, 20), 1) << slurp(a.path / "log.txt");
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const int id = joined_as(slurp(a.path / "log.txt"));
  const pid_t again = run.client(c, run.join.url, {"--identity-file", file});
  EXPECT_EQ(wait_exit(run.pid, 60), 0) << run.log();
  run.pid = -1;
  const std::string log = slurp(c.path / "log.txt");
  EXPECT_EQ(wait_exit(again, 10), 0) << log;
  EXPECT_EQ(wait_exit(direct, 10), 0);
  EXPECT_EQ(joined_as(log), id) << log;
  EXPECT_NE(run.log().find("client " + std::to_string(id) + " is back"), std::string::npos)
      << run.log();
  EXPECT_EQ(run.metrics()["distributed"]["tickets_by_client"].size(), 2u);
}

TEST(JoinReconnect, BadFlagValuesNameTheFlag) {
  for (const char* bad : {"-1", "1001", "ten"}) {
    const Result r = run(std::string("join ws://127.0.0.1:9/hybrid --token t --reconnect ") + bad);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--reconnect"), std::string::npos) << r.err;
  }
  TempDir d;
  const auto file = d.write("id.json", "{}");
  ::chmod(file.c_str(), 0644);
  const Result r = run("join ws://127.0.0.1:9/hybrid --token t --identity-file " + file.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--identity-file " + file.string() + " has mode 0644"), std::string::npos)
      << r.err;
  ::chmod(file.c_str(), 0600);
  const Result junk =
      run("join ws://127.0.0.1:9/hybrid --token t --identity-file " + file.string());
  EXPECT_EQ(junk.code, 2) << junk.err;
  EXPECT_NE(junk.err.find("no \"run\""), std::string::npos) << junk.err;
}

}  // namespace join_reconnect_test
}  // namespace dnnlab::cli_test
