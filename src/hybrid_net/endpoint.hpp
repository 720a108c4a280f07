// The hybrid trainer's server side over WebSocket: a hybrid::ServerTransport
// that listens (127.0.0.1 by default), admits a connection once its hello
// carries the join token, answers with the welcome, and then moves binary
// frames between the sockets and the step engine. One io thread moves bytes;
// the engine (HybridServer) runs on the caller's thread and never waits on a
// socket. Every resource a connection can make it hold has a bound:
// the hello's size and time, frame size, send queue, unread inbound bytes,
// connections waiting to say hello, clients. With a TLS context
// (EndpointOptions::tls) it serves wss:// and https:// only.
//
//   hybrid_net::EndpointOptions o;
//   o.token = server::random_hex(32);
//   o.welcome = {...};                                      // spec, data fingerprint
//   o.tls = tls::server_context(cert, key);                 // or none: ws://
//   hybrid_net::HybridEndpoint ep("127.0.0.1:0", o);
//   std::cout << ep.url();                                  // wss://127.0.0.1:PORT/hybrid
//   ep.wait_for_clients(2, deadline, [](int n) { ... });
//   hybrid::HybridServer server(spec, input, classes, ep, options);
//   server.fit(...); server.finish();
//   ep.shutdown();                                          // flushes, closes
#pragma once
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>  // first: Boost 1.74's asio/awaitable.hpp uses std::exchange unincluded
#include <vector>

#include "hybrid/transport.hpp"
#include "hybrid_net/protocol.hpp"

namespace dnnlab::hybrid_net {

struct EndpointOptions {
  std::string token;        // the join token every hello must carry
  std::string watch_token;  // reads the files marked watch_token_too; "" = none
  Welcome welcome;          // sent to each admitted client, with its id filled in
  // Set (tls::server_context): every connection begins with a TLS handshake
  // (wss://, https://), and plain HTTP gets a clear-text 400 saying so.
  // Null: plain ws:// and http://, and a TLS handshake is refused.
  std::shared_ptr<boost::asio::ssl::context> tls;
  // The largest binary frame read from an admitted client (before the hello:
  // kMaxHelloBytes); the welcome tells the client.
  uint64_t max_frame_bytes = 64ull << 20;
  // A client's frames queued but not yet written; past this it is too slow
  // (it stopped reading) and is closed.
  uint64_t max_send_queue = 256ull << 20;
  // A client's frames read but not yet taken by the engine; past this it is
  // flooding and is closed.
  uint64_t max_unread = 0;  // 0: 4 x max_frame_bytes
  // From the TCP accept to the hello (the TLS handshake, the request and the
  // WebSocket handshake included): a connection that says nothing is closed.
  std::chrono::milliseconds hello_timeout{10000};
  int max_clients = 64;  // connected at once
  int max_waiting = 32;  // connections not yet admitted
  // Server-issued identities (docs/distributed.md "Identities"): how many
  // are remembered for a reconnect (the oldest not connected is forgotten
  // first), and how many client ids a run issues at most.
  size_t max_identities = 256;
  int max_ids = 4096;
  // Files answered to a plain GET of their path (a query is
  // ignored): the browser client's page, its wasm core and the training split
  // as a data shard (docs/distributed.md "Browser clients"), so that the page
  // and its WebSocket have one origin. Any other request is refused (400).
  struct File {
    std::string content_type;
    std::shared_ptr<const std::string> body;
    // Only with `Authorization: Bearer <token>` (the training data: whoever
    // may not join may not read it either); else 401.
    bool needs_token = false;
    // Also with `Authorization: Bearer <watch_token>` (the run's status: a
    // watcher may read it, but neither join nor read the data).
    bool watch_token_too = false;
    // Made at each request instead of `body` (on the io thread, so it must
    // not block: the run's status page hands over its latest snapshot).
    std::function<std::shared_ptr<const std::string>()> make = nullptr;
  };
  std::map<std::string, File> files;
  // Called (on the io thread) for each connection refused or closed for a
  // reason, and each admission: a log line.
  std::function<void(const std::string&)> log;
};

class HybridEndpoint : public hybrid::ServerTransport {
 public:
  // Binds "HOST:PORT" (PORT 0: any free port) and starts the io thread.
  // Throws std::runtime_error naming the address when it cannot.
  HybridEndpoint(const std::string& listen, EndpointOptions options);
  ~HybridEndpoint() override;
  HybridEndpoint(const HybridEndpoint&) = delete;
  HybridEndpoint& operator=(const HybridEndpoint&) = delete;

  unsigned short port() const;
  std::string url() const;  // ws://HOST:PORT/hybrid, or wss:// with EndpointOptions::tls

  // Waits until `n` clients are admitted or `deadline`; `progress` is called
  // (on this thread) each time the count changes. Returns the count.
  int wait_for_clients(int n, hybrid::Clock::time_point deadline,
                       const std::function<void(int)>& progress);

  // hybrid::ServerTransport. clients(): the ids issued (a client that
  // reconnects with its identity keeps its id).
  int clients() const override;
  // Each admitted client's `agent` from its hello ("browser", "dnnlab", or
  // what another client said; "" when it gave none), by client id.
  std::vector<std::string> agents() const;
  bool send(int client, hybrid::Bytes frame) override;
  std::optional<hybrid::Inbound> receive(hybrid::Clock::time_point deadline) override;
  void disconnect(int client) override;
  // Also quarantines the client's identity: a hello presenting it is
  // refused with `reason` from then on.
  void expel(int client, const std::string& reason) override;
  // Identities remembered now (at most EndpointOptions::max_identities).
  size_t identities() const;

  // Waits (up to `grace`) for the queued frames to be written, closes every
  // connection and stops the io thread. The destructor calls it.
  void shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

  struct Impl;

 private:
  void close_client(int client, const std::string& reason, bool quarantine);
  std::shared_ptr<Impl> impl_;
};

}  // namespace dnnlab::hybrid_net
