// Server: the HTTP side of dnnlab — the REST API (docs/openapi.yaml), the
// WebSocket event stream, Prometheus /metrics and the static dashboard — on
// Boost.Beast, all on one io_context thread, and the browser gateway on
// /join (server/gateway.hpp). It also drives the coordinators
// of running experiments with a timer on that thread.
//
//   boost::asio::io_context io;
//   dnnlab::server::ServerOptions o;
//   o.store_url = "sqlite:runs/dnnlab.db";     // broker_url defaults to it
//   o.listen = "127.0.0.1:0";                  // port 0: any free port
//   dnnlab::server::Server server(io, o);
//   server.start();
//   std::cout << server.url() << " token " << server.token() << "\n";
//   io.run();                                  // server.stop() makes it return
//
// Writes (POST, DELETE) need `Authorization: Bearer <token>`; the token is
// made on first start (32 random bytes, hex) and kept, mode 0600, in
// token_file. Every malformed request gets a JSON 4xx; none stops the server.
#pragma once
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/gateway.hpp"

namespace dnnlab::server {

namespace asio = boost::asio;

struct ServerOptions {
  std::string listen = "127.0.0.1:8080";  // host:port; port 0 picks a free one
  std::string store_url;                  // required, e.g. "sqlite:dnnlab.db"
  // A server store (postgres://) that is unreachable: each call retries on
  // new connections this long, then the request gets 503 with Retry-After
  // (the io thread serves nothing while it waits, so keep it short).
  double store_wait_seconds = 2;
  std::string broker_url;          // default: store_url
  std::string token_file;          // default: <dir of the sqlite store>/dnnlab.token
  std::string web_root;            // static dashboard files (<build>/web/dist)
  bool public_reads = true;        // false: GETs need the token too
  std::size_t max_body = 1 << 20;  // larger request bodies get 413
  bool run_coordinators = true;    // tick coordinators of running experiments
  unsigned read_threads = 2;       // threads (each with its own store) for trial lists; 0: none
  // Browser workers on /join (docs/protocol.md).
  std::string join_token_file;             // default: dnnlab.join-token beside token_file
  std::string data_dir;                    // where data sets are, for shards and re-runs
  double verify_fraction = 0.05;           // of trusted browser results re-run natively
  double browser_lease_seconds = 120;      // a closed tab gives its trial back at once anyway
  std::size_t max_join_frame = 64u << 20;  // larger /join frames close the connection (1009)
  // The gateway's other limits (hello, tickets, trust; docs/protocol.md).
  // Its join token, secret, paths, lease, verify fraction and binary frame
  // limit come from the fields above.
  GatewayOptions gateway;

  // Limits on what connections can make the server hold (docs/security.md).
  std::size_t max_connections = 1024;       // open connections of every kind; more get 503
  std::size_t max_connections_per_ip = 64;  // from one remote address; more get 503
  // Bytes waiting to be sent on one WebSocket (/api/events, /join): a reader
  // slower than that is closed and its queue freed. The event backlog is not
  // counted: it is read from the store a page at a time as the socket drains.
  std::size_t max_send_queue = 8u << 20;
  // An /api/events stream that sends nothing (no pong, no frame) for this
  // long is closed; the server pings it at half of it, and browsers answer
  // pings by themselves. (Left at Beast's 300 s, 1,024 silent streams from
  // 18 addresses locked every new client out for five minutes.)
  double event_idle_seconds = 60;
  // Origins (scheme://host[:port]) whose pages may open /api/events and /join
  // besides the server's own; requests without Origin (non-browsers) pass.
  std::vector<std::string> allow_origins;
  // Host names served besides localhost, 127.0.0.1, [::1] and the listen
  // address. On a loopback listener other Host headers get 421 (DNS
  // rebinding); naming any host here checks Host on other listeners too.
  std::vector<std::string> allow_hosts;
  // With public_reads false: the read token, for dashboard URLs (it cannot
  // write). Default: dnnlab.read-token beside token_file.
  std::string read_token_file;
  // Both set: the port speaks only HTTPS and WSS (TLS 1.2+), with this PEM
  // certificate chain and key; a plain-HTTP request there gets a 400 in
  // clear text. A bad file stops the constructor with its name.
  std::string tls_cert;
  std::string tls_key;
  // Threads for work too slow for the io thread (parsing submitted sweeps).
  unsigned work_threads = 1;
};

class Server {
 public:
  // Opens the store and queue, loads or creates the token, binds the socket
  // (so port() is known before start()). Throws on a bad listen address, a
  // port in use or a store that cannot be opened.
  Server(asio::io_context& io, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  unsigned short port() const;
  std::string url() const;  // "http://127.0.0.1:PORT" (https:// with TLS)
  const std::string& token() const;
  bool token_is_new() const;  // made by this start: print it once
  const std::string& token_file() const;
  // The join token: takes tickets on /join and nothing else.
  const std::string& join_token() const;
  bool join_token_is_new() const;
  std::string join_url() const;  // url() + "/join?token=..."
  // The read token (public_reads false only; empty otherwise): reads, never writes.
  const std::string& read_token() const;
  bool read_token_is_new() const;
  const std::string& read_token_file() const;
  // url() + "/", with ?token=<read token> when reads are private: what to
  // print and open. Never carries the write token.
  std::string dashboard_url() const;

  // Starts accepting, polling events and (if asked) ticking coordinators.
  void start();
  // Closes the listener, every connection and every timer; io.run() returns
  // once the handlers drain. Safe to call from the io thread only (post it).
  void stop();

  // The caller (`dnnlab run`) drives this experiment's coordinator itself:
  // the server never makes one for it and only reports on it.
  void adopt(std::int64_t experiment_id);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Limits without a flag (docs/security.md, "Limits"; tests/server/docs_defaults_test.cpp
// checks the page against them).
inline constexpr std::size_t kMaxRequestHeaderBytes = 16 * 1024;  // more: 431
inline constexpr std::chrono::seconds kIdleTimeout{60};        // an idle HTTP keep-alive connection
inline constexpr std::size_t kMaxEventFrameBytes = 64 * 1024;  // a frame a dashboard sends: 1009

// How many /api/events streams may be open at once: half of max_connections
// (at least 1), so that streams, which live long, leave the other half to
// HTTP requests and /join; more get 503.
std::size_t max_event_streams(const ServerOptions& o);

// "host:port" -> parts; throws std::invalid_argument naming `field`.
std::pair<std::string, unsigned short> parse_listen(const std::string& listen,
                                                    const std::string& field = "listen");

}  // namespace dnnlab::server
