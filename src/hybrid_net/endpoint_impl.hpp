// Private to the endpoint (endpoint.cpp, endpoint_session*.cpp): the state
// the io thread and the engine's thread share, and a connection as they see
// it. Session<Stream> (endpoint_session.hpp) is the connection behind it,
// compiled once for plain TCP and once for TLS, each in a file of its own.
#pragma once
// clang-format off
#include <utility>  // first: Boost 1.74's asio/awaitable.hpp uses std::exchange unincluded
// clang-format on
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hybrid_net/endpoint.hpp"
#include "hybrid_net/identities.hpp"

namespace dnnlab::hybrid_net {

// One connection, from the moment it is accepted.
class Connection {
 public:
  virtual ~Connection() = default;
  // Queues one message (binary: a frame; text: a control message).
  virtual void queue(std::shared_ptr<const std::string> text,
                     std::shared_ptr<hybrid::Bytes> bin) = 0;
  // Tells the client why (an error message, then the close reason), closes.
  virtual void expel(const std::string& why) = 0;
  // The end of the run: a normal close once the queue is written.
  virtual void finish() = 0;

  std::atomic<int64_t> unread{0};  // bytes in the inbox from this client
  std::atomic<bool> gone{false};
};

struct HybridEndpoint::Impl {
  EndpointOptions opt;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor acceptor{ioc};
  std::thread io;
  std::string host;
  unsigned short port = 0;
  // Shared with the engine's thread.
  mutable std::mutex mu;
  std::condition_variable cv;  // the inbox or the admitted count changed
  struct Event {
    hybrid::Inbound in;
    std::shared_ptr<Connection> from;
  };
  std::deque<Event> inbox;
  // By client id: each id's newest connection (null once the engine heard
  // that it left), and the one the engine knows, which sends go to. They
  // differ from a reconnect's admission until the engine takes its `back`
  // event, so that nothing meant for the old link reaches the new one.
  std::vector<std::shared_ptr<Connection>> admitted, routed;
  std::vector<std::string> agents;  // by client id, from the hellos
  IdentityBook identities{{}};
  std::atomic<int64_t> queued{0};  // bytes waiting to be written, all clients
  // The io thread's alone.
  int waiting = 0;  // connected, not admitted
  bool stopping = false;

  void log(const std::string& line) {
    if (opt.log) opt.log(line);
  }
  void push(hybrid::Inbound in, std::shared_ptr<Connection> from) {
    {
      std::lock_guard lock(mu);
      inbox.push_back({std::move(in), std::move(from)});
    }
    cv.notify_all();
  }
  // Under `mu`: clients connected now (max_clients), and whether id `c` is.
  bool live(int c) const { return admitted[c] && !admitted[c]->gone; }
  int live_count() const {
    int n = 0;
    for (int c = 0; c < static_cast<int>(admitted.size()); ++c) n += live(c);
    return n;
  }
  void accept();
};

// A connection just accepted: a plain one (ws://, http://) or one that must
// begin with a TLS handshake (wss://, https://; opt.tls).
void start_plain_session(boost::asio::ip::tcp::socket socket, HybridEndpoint::Impl& hub);
void start_tls_session(boost::asio::ip::tcp::socket socket, HybridEndpoint::Impl& hub);

}  // namespace dnnlab::hybrid_net
