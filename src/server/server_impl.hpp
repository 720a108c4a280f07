// Server::Impl and what the sessions share with it: the stream types, the
// timeouts, the session interfaces it keeps, connection slots. Private to the
// server (included by ws_sessions.hpp, http_session.hpp, session_*.cpp and
// server.cpp only).
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <thread>
#include <type_traits>

#include "db/connections.hpp"
#include "queue/task_queue.hpp"
#include "server/api.hpp"
#include "server/experiment_runner.hpp"
#include "server/gateway.hpp"
#include "server/metrics.hpp"
#include "server/request_guard.hpp"
#include "server/server.hpp"
#include "server/static_files.hpp"
#include "server/token.hpp"
#include "store/result_store.hpp"
#include "tls/tls.hpp"

namespace dnnlab::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace ssl = asio::ssl;
// The two streams a connection can be: the session classes are templates on
// it, so HTTP, WebSocket and /join handling is one code for both.
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
template <class Stream>
constexpr bool kIsTls = std::is_same_v<Stream, TlsStream>;

inline constexpr auto kTickPeriod = std::chrono::milliseconds(200);
// The event poll and the coordinators' tick after the store was unreachable
// for ServerOptions::store_wait_seconds: the io thread waited that long, so
// it serves other requests for a while before it waits again.
inline constexpr auto kStoreDownPause = std::chrono::seconds(2);
// Events read from the store per page while a reader catches up: the backlog
// is paged in as the socket drains, never queued whole.
inline constexpr std::size_t kEventPage = 500;
// Out of descriptors (EMFILE/ENFILE): the pending connection stays in the
// backlog and the listener stays readable, so retrying at once would spin.
inline constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
// A TLS client has this long to finish its handshake (a silent one holds a
// connection slot until then, as an idle HTTP client does for kIdleTimeout).
inline constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline void log_error(std::string_view where, std::string_view what) {
  std::cerr << "dnnlab serve: " << where << ": " << what << "\n";
}

// A thread of its own running an io_context. The gateway, the experiment
// runner and the event poller each work on one, with their own store and
// queue connections, so the io thread only moves bytes: a broker round trip
// or a slow store stalls that lane, never every socket.
class Lane {
 public:
  explicit Lane(std::string name);
  ~Lane() { shutdown(); }
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  asio::io_context& context() { return ctx_; }
  template <class F>
  void post(F&& f) {
    asio::post(ctx_, std::forward<F>(f));
  }
  // True once shutdown() began: handlers still queued return at once.
  bool closing() const { return closing_.load(); }
  // Runs what is queued (`drain`: its handlers do their work; else they see
  // closing() and return), then ends the thread. Timers must not re-arm
  // once closing() is true.
  void shutdown(bool drain = false);

 private:
  std::string name_;
  asio::io_context ctx_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::atomic<bool> closing_{false};
  std::thread thread_;
};

// What Server::Impl keeps of each session, whatever its stream: enough to
// close it, feed it events, or hand it the gateway's replies.
struct OpenSession {
  virtual ~OpenSession() = default;
  virtual void close() = 0;
};
struct EventSink : OpenSession {
  virtual void deliver(const std::string& frame, std::int64_t id) = 0;
  // Whether the reader holds a token (Api::event_json's private fields).
  virtual bool private_fields() const = 0;
};
struct JoinSink {
  virtual ~JoinSink() = default;
  virtual void apply(GatewayReply r) = 0;
  virtual void abort() = 0;
};

// One counted connection (Server::Impl::connections and per_ip); released
// when the last session holding it (HTTP, then its WebSocket) is gone.
struct ConnectionSlot {
  ConnectionSlot(std::shared_ptr<Server::Impl> impl, std::string ip);
  ~ConnectionSlot();
  ConnectionSlot(const ConnectionSlot&) = delete;
  ConnectionSlot& operator=(const ConnectionSlot&) = delete;
  std::shared_ptr<Server::Impl> impl;
  std::string ip;
};

// Where the session templates are instantiated, one translation unit per
// session and stream (session_*.cpp): Beast's templates made one server.cpp
// the build's longest compile (168 CPU-s, 469 under ASan), now spread out.
using Request = http::request<http::string_body>;
void start_http_session(PlainStream stream, std::shared_ptr<Server::Impl> impl,
                        std::shared_ptr<ConnectionSlot> slot);
void start_http_session(TlsStream stream, std::shared_ptr<Server::Impl> impl,
                        std::shared_ptr<ConnectionSlot> slot);
// The WebSocket upgrades of an HTTP session: the stream, its slot, the
// upgrade request and the bytes read past it (a client's first frames may
// come in the same segment as the request) move to the new session.
struct Upgraded {
  std::shared_ptr<ConnectionSlot> slot;
  Request req;
  beast::flat_buffer read_ahead;
};
void start_join_session(PlainStream&& stream, std::shared_ptr<Server::Impl> impl, Upgraded up);
void start_join_session(TlsStream&& stream, std::shared_ptr<Server::Impl> impl, Upgraded up);
// after >= 0: replay the events after that id first; private_fields: the
// reader holds a token.
void start_event_session(PlainStream&& stream, std::shared_ptr<Server::Impl> impl, Upgraded up,
                         std::int64_t after, bool private_fields);
void start_event_session(TlsStream&& stream, std::shared_ptr<Server::Impl> impl, Upgraded up,
                         std::int64_t after, bool private_fields);

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(asio::io_context& io, ServerOptions o)
      : io(io), opt(std::move(o)), acceptor(io), accept_timer(io) {}

  void accept();
  void on_accept_error(const beast::error_code& ec);
  // Answers 503 (over the limits) on a connection that is not counted, then closes it.
  void refuse(tcp::socket socket, const std::string& why);
  // The runner lane's timer: ticks the coordinators and samples the figures.
  void on_tick();
  // The events lane's timer: new store events (and throughput) to readers.
  void on_event_poll();
  // The gateway lane's timer: the gateway's periodic duties.
  void on_gateway_poll();
  // Ends the lanes (the gateway's queued work first: closed connections
  // give their tickets back). Called by ~Server.
  void stop_lanes();
  // `public_frame` goes to readers without a token (the same text, mostly).
  // On the io thread.
  void broadcast(const std::string& frame, const std::string& public_frame, std::int64_t id);
  std::int64_t newest_event_id(store::ResultStore& store);

  asio::io_context& io;
  ServerOptions opt;
  // The io thread's own store: used only when read_threads is 0 (REST
  // handlers then run on the io thread).
  std::unique_ptr<store::ResultStore> store;
  // The runner lane's connections and the runner (also called from reader
  // threads: it is thread-safe).
  std::unique_ptr<store::ResultStore> runner_store;
  std::unique_ptr<queue::TaskQueue> runner_queue;
  std::unique_ptr<ExperimentRunner> runner;
  std::unique_ptr<store::ResultStore> events_store;  // the events lane's
  // The gateway lane's connections.
  std::unique_ptr<store::ResultStore> gateway_store;
  std::unique_ptr<queue::TaskQueue> gateway_queue;
  HttpMetrics metrics;
  std::unique_ptr<Api> api;
  tcp::acceptor acceptor;
  asio::steady_timer accept_timer;
  std::unique_ptr<RequestGuard> guard;
  std::size_t connections = 0;                // counted by ConnectionSlot
  std::map<std::string, std::size_t> per_ip;  // remote address -> open connections
  Clock::time_point last_accept_log{};        // accept errors: one line per 10 s
  std::size_t accept_errors_unlogged = 0;
  LoadedToken read_token;
  std::unique_ptr<asio::thread_pool> work_pool;  // slow parsing off the io thread
  LoadedToken token;
  std::string host;
  unsigned short port = 0;
  bool stopped = false;
  std::int64_t last_event_id = 0;             // io thread: the newest event broadcast
  std::int64_t polled_event_id = 0;           // events lane: the newest event read
  std::int64_t handed_event_id = 0;           // events lane: the newest handed to the io thread
  std::atomic<std::size_t> event_readers{0};  // event_sessions.size(), for the lane
  Clock::time_point last_throughput{};
  std::map<const void*, std::weak_ptr<OpenSession>> http_sessions;
  std::map<const void*, std::weak_ptr<EventSink>> event_sessions;
  LoadedToken join_token;
  std::unique_ptr<Gateway> gateway;
  std::map<Gateway::ClientId, std::weak_ptr<JoinSink>> join_sessions;
  Gateway::ClientId next_join_id = 1;       // io thread
  std::unique_ptr<asio::thread_pool> pool;  // reader threads; null when read_threads is 0
  std::unique_ptr<ssl::context> tls;        // --tls-cert/--tls-key; null: plain HTTP
  // Last, so they end first: their handlers use everything above.
  std::unique_ptr<Lane> runner_lane, events_lane, gateway_lane;
  // Their timers, after them so that they go before their lanes' contexts.
  std::unique_ptr<asio::steady_timer> tick_timer, event_timer, gateway_timer;
};

}  // namespace dnnlab::server
