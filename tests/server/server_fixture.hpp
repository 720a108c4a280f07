// Shared by the server tests: a temp directory, a real server on 127.0.0.1
// port 0 running its io_context on a thread, and small HTTP helpers.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <filesystem>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "server/http_client.hpp"
#include "server/server.hpp"
#include "store/result_store.hpp"

namespace dnnlab::server::testing {

namespace asio = boost::asio;
using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dnnlab-srv-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A server over `store_url` on its own io thread; stopped and joined on destruction.
class RunningServer {
 public:
  explicit RunningServer(ServerOptions o) {
    if (o.listen == "127.0.0.1:8080") o.listen = "127.0.0.1:0";
    server_ = std::make_unique<Server>(io_, std::move(o));
    server_->start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~RunningServer() {
    asio::post(io_, [this] { server_->stop(); });
    thread_.join();
    server_.reset();
  }
  Server& server() { return *server_; }
  std::string url() const { return server_->url(); }
  unsigned short port() const { return server_->port(); }
  const std::string& token() const { return server_->token(); }

  HttpReply get(const std::string& target, const std::string& token = {}) {
    return http_request(url(), "GET", target, {}, token);
  }
  HttpReply post(const std::string& target, const std::string& body, const std::string& token) {
    return http_request(url(), "POST", target, body, token);
  }

 private:
  asio::io_context io_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

inline json parse(const HttpReply& r) {
  json j = json::parse(r.body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.body;
  return j;
}

// Sends raw bytes on one connection, half-closes when `close_after` and
// returns everything the server sent back (until it closes or 3 s pass).
inline std::string raw_exchange(unsigned short port, const std::string& bytes,
                                bool close_after = false) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  timeval tv{3, 0};
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  asio::write(s, asio::buffer(bytes));
  if (close_after) s.shutdown(asio::ip::tcp::socket::shutdown_send);
  std::string out;
  char buf[4096];
  for (;;) {
    boost::system::error_code ec;
    std::size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
    if (!close_after && out.find("\r\n\r\n") != std::string::npos) {
      // Enough for a header-only check once the body has arrived.
      auto cl = out.find("Content-Length: ");
      auto end = out.find("\r\n\r\n");
      if (cl != std::string::npos && cl < end) {
        std::size_t len = std::stoul(out.substr(cl + 16));
        if (out.size() >= end + 4 + len) break;
      }
    }
  }
  return out;
}

// Fills an experiment with `n` trials: index i has val_acc = (i * 37 % n) / n,
// every third one is finished (with metrics), the rest queued.
// `spec_text` is what the API parses for the experiment's parameters.
inline std::int64_t populate(store::ResultStore& st, int n, const std::string& name = "pop",
                             const std::string& spec_text = "not a sweep") {
  store::ExperimentRecord e;
  e.name = name;
  e.spec_text = spec_text;
  e.method = "grid";
  std::int64_t id = st.create_experiment(e);
  std::vector<store::NewTrial> trials;
  for (int i = 0; i < n; ++i)
    trials.push_back({i, json{{"depth", i % 7 + 1}, {"activation", i % 2 ? "relu" : "tanh"}}.dump(),
                      static_cast<std::uint64_t>(1000 + i)});
  auto ids = st.add_trials(id, trials);
  for (int i = 0; i < n; i += 3) {
    EXPECT_TRUE(st.mark_running(ids[i], 1, "w1"));
    store::TrialMetrics m;
    m.val_acc = static_cast<double>(i * 37 % n) / n;
    m.val_loss = 1.0 - *m.val_acc;
    m.epochs_done = 2;
    m.seconds = 0.5;
    EXPECT_TRUE(st.finish_trial(ids[i], 1, store::TrialStatus::finished, m));
  }
  return id;
}

}  // namespace dnnlab::server::testing
