// The network side of the server: the acceptor, HTTP/1.1 keep-alive sessions,
// WebSocket event sessions and the timers (event polling, coordinators), all
// on one io_context thread. Every handler catches everything: a malformed
// request ends its own connection at most, never the server.
#include "server/server.hpp"

#include <algorithm>
#include <array>
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
#include <type_traits>

#include "db/connections.hpp"
#include "queue/task_queue.hpp"
#include "server/api.hpp"
#include "server/experiment_runner.hpp"
#include "server/gateway.hpp"
#include "server/metrics.hpp"
#include "server/request_guard.hpp"
#include "server/static_files.hpp"
#include "server/tls.hpp"
#include "server/token.hpp"
#include "store/result_store.hpp"

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

namespace {
constexpr auto kIdleTimeout = std::chrono::seconds(60);
constexpr auto kTickPeriod = std::chrono::milliseconds(200);
// Events read from the store per page while a reader catches up: the backlog
// is paged in as the socket drains, never queued whole.
constexpr std::size_t kEventPage = 500;
// Out of descriptors (EMFILE/ENFILE): the pending connection stays in the
// backlog and the listener stays readable, so retrying at once would spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
// A TLS client has this long to finish its handshake (a silent one holds a
// connection slot until then, as an idle HTTP client does for kIdleTimeout).
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void log_error(std::string_view where, std::string_view what) {
  std::cerr << "dnnlab serve: " << where << ": " << what << "\n";
}
}  // namespace

std::pair<std::string, unsigned short> parse_listen(const std::string& listen,
                                                    const std::string& field) {
  std::size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size())
    throw std::invalid_argument(field + ": expected HOST:PORT, got '" + listen + "'");
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  unsigned long port = 0;
  try {
    std::size_t used = 0;
    port = std::stoul(listen.substr(colon + 1), &used);
    if (used != listen.size() - colon - 1) throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    throw std::invalid_argument(field + ": bad port in '" + listen + "'");
  }
  if (port > 65535) throw std::invalid_argument(field + ": port out of range in '" + listen + "'");
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  if (ec) throw std::invalid_argument(field + ": '" + host + "' is not an IP address");
  return {host, static_cast<unsigned short>(port)};
}

// What Server::Impl keeps of each session, whatever its stream: enough to
// close it, feed it events, or hand it the gateway's replies.
struct OpenSession {
  virtual ~OpenSession() = default;
  virtual void close() = 0;
};
struct EventSink : OpenSession {
  virtual void deliver(const std::string& frame, std::int64_t id) = 0;
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

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(asio::io_context& io, ServerOptions o)
      : io(io),
        opt(std::move(o)),
        acceptor(io),
        tick_timer(io),
        event_timer(io),
        accept_timer(io) {}

  void accept();
  void on_accept_error(const beast::error_code& ec);
  // Answers 503 (over the limits) on a connection that is not counted, then closes it.
  void refuse(tcp::socket socket, const std::string& why);
  void on_tick();
  void on_event_poll();
  void broadcast(const std::string& frame, std::int64_t id);
  std::int64_t newest_event_id();

  asio::io_context& io;
  ServerOptions opt;
  std::unique_ptr<store::ResultStore> store;
  std::unique_ptr<queue::TaskQueue> queue;
  std::unique_ptr<ExperimentRunner> runner;
  HttpMetrics metrics;
  std::unique_ptr<Api> api;
  tcp::acceptor acceptor;
  asio::steady_timer tick_timer, event_timer, accept_timer;
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
  std::int64_t last_event_id = 0;
  Clock::time_point last_throughput{};
  std::map<const void*, std::weak_ptr<OpenSession>> http_sessions;
  std::map<const void*, std::weak_ptr<EventSink>> event_sessions;
  LoadedToken join_token;
  std::unique_ptr<Gateway> gateway;
  std::map<Gateway::ClientId, std::weak_ptr<JoinSink>> join_sessions;
  std::unique_ptr<asio::thread_pool> pool;  // reader threads; null when read_threads is 0
  std::unique_ptr<ssl::context> tls;        // --tls-cert/--tls-key; null: plain HTTP
};

// One WebSocket client of /api/events: store events (and throughput) as text
// frames. A client catching up (?after= or {"after": ID}) is fed from the
// store a page at a time as its socket drains; live events are queued, up to
// max_send_queue bytes, past which the client is too slow and is closed.
template <class Stream>
class EventSession final : public EventSink,
                           public std::enable_shared_from_this<EventSession<Stream>> {
 public:
  // after >= 0: replay the events after that id first (the URL's ?after=).
  EventSession(Stream stream, std::shared_ptr<Server::Impl> impl, std::int64_t after)
      : ws_(std::move(stream)), impl_(std::move(impl)), cursor_(impl_->last_event_id) {
    if (after >= 0) {
      cursor_ = after;
      catching_up_ = true;
    }
  }

  void hold(std::shared_ptr<ConnectionSlot> slot) { slot_ = std::move(slot); }

  void run(http::request<http::string_body> req) {
    impl_->event_sessions[this] = this->weak_from_this();
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "dnnlab"); }));
    ws_.read_message_max(64 * 1024);
    ws_.async_accept(req, [self = this->shared_from_this()](beast::error_code ec) {
      if (ec) return self->finish();
      self->open_ = true;
      self->read();
      self->flush();
    });
  }

  // Queues a live frame; `id` (0 for synthetic events) skips what the client
  // has already. While catching up, the store pages bring stored events (and
  // a missed throughput figure is replaced by the next one).
  void deliver(const std::string& frame, std::int64_t id) override {
    if (catching_up_) return;
    if (id > 0) {
      if (id <= cursor_) return;
      cursor_ = id;
    }
    push(frame);
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    // Free the queue now; the frame being written stays until its write ends.
    while (out_.size() > (writing_ ? 1u : 0u)) out_.pop_back();
    queued_bytes_ = 0;
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(ws_).socket().close(ec);
    finish();
  }

  ~EventSession() { finish(); }

 private:
  void finish() {
    if (impl_) {
      auto it = impl_->event_sessions.find(this);
      if (it != impl_->event_sessions.end()) impl_->event_sessions.erase(it);
    }
  }

  void push(std::string frame) {
    if (closed_) return;
    queued_bytes_ += frame.size();
    if (queued_bytes_ > impl_->opt.max_send_queue) {
      log_error("events", "a reader fell " + std::to_string(queued_bytes_) +
                              " bytes behind (--max-send-queue): closed");
      return close();
    }
    out_.push_back(std::move(frame));
    flush();
  }

  void read() {
    ws_.async_read(in_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      try {
        self->on_message(beast::buffers_to_string(self->in_.data()));
      } catch (const std::exception& e) {
        self->push(json{{"type", "error"}, {"error", e.what()}}.dump());
      }
      self->in_.consume(self->in_.size());
      self->read();
    });
  }

  // {"after": ID}: catch up from ID, then continue live.
  void on_message(const std::string& text) {
    json msg = json::parse(text, nullptr, false);
    if (msg.is_discarded() || !msg.is_object() || !msg.contains("after") ||
        !msg["after"].is_number_integer() || msg["after"].get<std::int64_t>() < 0) {
      return push(
          json{{"type", "error"}, {"error", "expected {\"after\": EVENT_ID}"}, {"field", "after"}}
              .dump());
    }
    cursor_ = msg["after"].get<std::int64_t>();
    catching_up_ = true;
    flush();
  }

  // The next page of the backlog, once the queue has drained. A short page
  // means the store has nothing newer: live delivery takes over from there
  // (broadcasts of events this page already sent are skipped by the cursor).
  void next_page() {
    auto events = impl_->store->events_since(cursor_, kEventPage);
    for (const auto& e : events) {
      std::string frame = Api::event_json(e).dump();
      queued_bytes_ += frame.size();
      out_.push_back(std::move(frame));
      cursor_ = e.id;
    }
    if (events.size() < kEventPage) catching_up_ = false;
  }

  void flush() {
    if (!open_ || writing_ || closed_) return;
    if (out_.empty() && catching_up_) {
      try {
        next_page();
      } catch (const std::exception& e) {
        log_error("events", e.what());
        return close();
      }
    }
    if (out_.empty()) return;
    writing_ = true;
    ws_.text(true);
    ws_.async_write(asio::buffer(out_.front()),
                    [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                      self->writing_ = false;
                      if (ec || self->closed_) return self->close();
                      self->queued_bytes_ -= self->out_.front().size();
                      self->out_.pop_front();
                      self->flush();
                    });
  }

  websocket::stream<Stream> ws_;
  std::shared_ptr<Server::Impl> impl_;
  std::shared_ptr<ConnectionSlot> slot_;
  beast::flat_buffer in_;
  std::deque<std::string> out_;
  std::size_t queued_bytes_ = 0;
  std::int64_t cursor_;  // the newest event id queued (or skipped as already sent)
  bool catching_up_ = false;
  bool open_ = false, writing_ = false, closed_ = false;
};

// One browser worker on /join: frames go to the gateway, its replies come back.
template <class Stream>
class JoinSession final : public JoinSink,
                          public std::enable_shared_from_this<JoinSession<Stream>> {
 public:
  JoinSession(Stream stream, std::shared_ptr<Server::Impl> impl)
      : ws_(std::move(stream)), impl_(std::move(impl)) {}

  void hold(std::shared_ptr<ConnectionSlot> slot) { slot_ = std::move(slot); }

  void run(http::request<http::string_body> req) {
    beast::error_code ec;
    auto ep = beast::get_lowest_layer(ws_).socket().remote_endpoint(ec);
    id_ =
        impl_->gateway->open(ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port()));
    impl_->join_sessions[id_] = this->weak_from_this();
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "dnnlab"); }));
    ws_.read_message_max(impl_->gateway->max_frame(id_));
    ws_.async_accept(req, [self = this->shared_from_this()](beast::error_code ec) {
      if (ec) return self->finish();
      self->open_ = true;
      self->read();
    });
  }

  // Sends the reply's frames, then closes if it says so. A client that
  // lets more than max_send_queue bytes pile up (it stopped reading) is
  // closed: its ticket goes back as for any closed connection.
  void apply(GatewayReply r) override {
    if (finished_) return;
    for (auto& f : r.frames) {
      queued_bytes_ += f.size();
      out_.push_back(std::move(f));
    }
    if (queued_bytes_ > impl_->opt.max_send_queue) {
      log_error("join", "a client fell " + std::to_string(queued_bytes_) +
                            " bytes behind (--max-send-queue): closed");
      while (out_.size() > (writing_ ? 1u : 0u)) out_.pop_back();
      queued_bytes_ = 0;
      return abort();
    }
    if (r.close && !closing_) {
      closing_ = true;
      reason_.code = r.close_code;
      reason_.reason = r.reason;
    }
    flush();
  }

  void abort() override {
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(ws_).socket().close(ec);
    finish();
  }

  ~JoinSession() { finish(); }

 private:
  void finish() {
    if (finished_ || !impl_) return;
    finished_ = true;
    impl_->join_sessions.erase(id_);
    if (impl_->gateway) impl_->gateway->close(id_);
  }

  void read() {
    // Small until hello: a client that has not said hello cannot make us hold 64 MiB.
    ws_.read_message_max(impl_->gateway->max_frame(id_));
    ws_.async_read(in_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec == websocket::error::message_too_big) {
        // Beast has already sent close 1009; end the session.
        return self->finish();
      }
      if (ec) return self->abort();
      if (self->closing_) return;
      try {
        const std::string frame = beast::buffers_to_string(self->in_.data());
        self->in_.consume(self->in_.size());
        self->apply(self->ws_.got_binary() ? self->impl_->gateway->on_binary(self->id_, frame)
                                           : self->impl_->gateway->on_text(self->id_, frame));
      } catch (const std::exception& e) {
        log_error("join", e.what());
        return self->abort();
      }
      if (!self->closing_) self->read();
    });
  }

  void flush() {
    if (!open_ || writing_ || finished_) return;
    if (out_.empty()) {
      if (closing_ && !close_sent_) {
        close_sent_ = true;
        writing_ = true;
        ws_.async_close(reason_, [self = this->shared_from_this()](beast::error_code) {
          self->writing_ = false;
          self->finish();
        });
      }
      return;
    }
    writing_ = true;
    ws_.text(true);
    ws_.async_write(asio::buffer(out_.front()), [self = this->shared_from_this()](
                                                    beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec || self->finished_) return self->abort();
      self->queued_bytes_ -= std::min(self->queued_bytes_, self->out_.front().size());
      self->out_.pop_front();
      self->flush();
    });
  }

  websocket::stream<Stream> ws_;
  std::shared_ptr<Server::Impl> impl_;
  std::shared_ptr<ConnectionSlot> slot_;
  std::size_t queued_bytes_ = 0;
  Gateway::ClientId id_ = 0;
  beast::flat_buffer in_;
  std::deque<std::string> out_;
  websocket::close_reason reason_;
  bool open_ = false, writing_ = false, closing_ = false, close_sent_ = false, finished_ = false;
};

// One HTTP/1.1 connection: read a request, answer it, repeat while keep-alive.
template <class Stream>
class HttpSession final : public OpenSession,
                          public std::enable_shared_from_this<HttpSession<Stream>> {
 public:
  HttpSession(Stream stream, std::shared_ptr<Server::Impl> impl,
              std::shared_ptr<ConnectionSlot> slot)
      : stream_(std::move(stream)), impl_(std::move(impl)), slot_(std::move(slot)) {}

  void start() {
    impl_->http_sessions[this] = this->weak_from_this();
    if constexpr (kIsTls<Stream>)
      detect_tls();
    else
      read();
  }

  void close() override {
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(stream_).socket().close(ec);
  }

  ~HttpSession() {
    auto it = impl_->http_sessions.find(this);
    if (it != impl_->http_sessions.end()) impl_->http_sessions.erase(it);
  }

 private:
  // A TLS port: peek at the first bytes. A TLS ClientHello gets the
  // handshake (with those bytes); plain HTTP gets a plain-text 400 saying to
  // use https, then the connection ends. Handshake failures end their own
  // connection only, unlogged (a scanner would otherwise fill the log).
  void detect_tls() {
    beast::get_lowest_layer(stream_).expires_after(kHandshakeTimeout);
    beast::async_detect_ssl(beast::get_lowest_layer(stream_), buffer_,
                            [self = this->shared_from_this()](beast::error_code ec, bool is_tls) {
                              if (ec) return self->close();
                              if (!is_tls) return self->refuse_plain_http();
                              self->stream_.async_handshake(
                                  ssl::stream_base::server, self->buffer_.data(),
                                  [self](beast::error_code ec, std::size_t used) {
                                    if (ec) return self->close();
                                    self->buffer_.consume(used);
                                    self->read();
                                  });
                            });
  }

  void refuse_plain_http() {
    impl_->metrics.observe("?", "unparsed", 400, 0.0);
    const std::string body = json{
        {"error", "this server speaks HTTPS only: use https:// (and wss://)"},
        {"field", "scheme"}}.dump();
    auto bytes = std::make_shared<std::string>(
        "HTTP/1.1 400 Bad Request\r\nServer: dnnlab\r\nContent-Type: application/json\r\n"
        "Connection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(5));
    asio::async_write(
        beast::get_lowest_layer(stream_), asio::buffer(*bytes),
        [self = this->shared_from_this(), bytes](beast::error_code ec, std::size_t) {
          if (ec) return self->close();
          beast::error_code ignored;
          beast::get_lowest_layer(self->stream_)
              .socket()
              .shutdown(tcp::socket::shutdown_send, ignored);
          beast::get_lowest_layer(self->stream_).expires_after(std::chrono::seconds(2));
          self->drain();
        });
  }

  void read() {
    parser_.emplace();
    parser_->body_limit(impl_->opt.max_body);
    parser_->header_limit(16 * 1024);
    beast::get_lowest_layer(stream_).expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                       try {
                         self->on_read(ec);
                       } catch (const std::exception& e) {
                         log_error("connection", e.what());
                         self->close();
                       }
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof) return close();
    if (ec == http::error::body_limit)
      return reply_error_and_close(
          http::status::payload_too_large,
          "request body is larger than " + std::to_string(impl_->opt.max_body) + " bytes", "body");
    if (ec == http::error::header_limit)
      return reply_error_and_close(http::status::request_header_fields_too_large,
                                   "request headers are too large", "headers");
    if (ec && ec.category() == http::make_error_code(http::error::bad_method).category())
      return reply_error_and_close(http::status::bad_request,
                                   "malformed HTTP request: " + ec.message(), "request");
    if (ec) return close();  // timeout, reset: nobody to answer

    auto req = parser_->release();
    // A page on another name that resolves here (DNS rebinding) names
    // itself in Host; a loopback server answers only to its own names.
    const std::string_view host(req[http::field::host].data(), req[http::field::host].size());
    if (!impl_->guard->host_allowed(host))
      return reply_error_and_close(
          http::status::misdirected_request,
          "this server does not answer to Host '" + std::string(host.substr(0, 200)) +
              "' (a loopback server serves localhost, 127.0.0.1 and [::1]; see --allow-host)",
          "Host");
    // Every request, upgrades included, is routed by the API's one table.
    const auto t0 = Clock::now();
    ApiRequest a;
    a.method = std::string(req.method_string());
    a.target = std::string(req.target());
    a.authorization = std::string(req[http::field::authorization]);
    a.websocket = websocket::is_upgrade(req);
    if (!a.websocket) a.body = std::move(req.body());
    ApiResponse r = impl_->api->handle(a);
    if (r.upgrade != Upgrade::none) {
      // Browsers send Origin on every WebSocket handshake and let any page
      // open one: without this check a page anywhere could read the event
      // stream or join as a worker with a visitor's browser.
      const std::string_view origin(req[http::field::origin].data(),
                                    req[http::field::origin].size());
      if (!impl_->guard->origin_allowed(origin, host))
        return reply_error_and_close(http::status::forbidden,
                                     "WebSocket from Origin '" +
                                         std::string(origin.substr(0, 200)) +
                                         "' refused (see --allow-origin)",
                                     "Origin");
      impl_->metrics.observe(a.method, r.route, 101, 0.0);
      beast::get_lowest_layer(stream_).expires_never();
      if (r.upgrade == Upgrade::join) {
        auto js = std::make_shared<JoinSession<Stream>>(std::move(stream_), impl_);
        js->hold(std::move(slot_));
        js->run(std::move(req));
      } else {
        auto es = std::make_shared<EventSession<Stream>>(std::move(stream_), impl_, r.events_after);
        es->hold(std::move(slot_));
        es->run(std::move(req));
      }
      return;
    }
    Reply reply{req.version(), req.keep_alive(), req.method() == http::verb::head,
                std::move(a.method), t0};
    if (r.background) {
      // Slow parsing on a worker thread; the io thread keeps serving, and
      // the store writes it returns run back here.
      asio::post(*impl_->work_pool, [self = this->shared_from_this(), job = std::move(r.background),
                                     route = r.route, reply = std::move(reply)]() mutable {
        std::function<ApiResponse()> finish;
        try {
          finish = job();
        } catch (const std::exception& e) {
          std::string what = e.what();
          finish = [what] {
            ApiResponse out;
            out.status = 500;
            out.body = json{{"error", "internal error: " + what}}.dump();
            return out;
          };
        }
        auto ex = self->stream_.get_executor();
        asio::post(ex, [self = std::move(self), finish = std::move(finish),
                        route = std::move(route), reply = std::move(reply)]() mutable {
          ApiResponse out;
          try {
            out = finish();
          } catch (const std::exception& e) {
            out.status = 500;
            out.body = json{{"error", std::string("internal error: ") + e.what()}}.dump();
          }
          out.route = route;
          self->respond(std::move(out), reply);
        });
      });
      return;
    }
    if (r.deferred && impl_->pool) {
      // The io thread keeps serving sockets while a reader thread queries.
      asio::post(*impl_->pool, [self = this->shared_from_this(), r = std::move(r),
                                reply = std::move(reply)]() mutable {
        ApiResponse out = run_deferred(r, reader_store(self->impl_->opt.store_url));
        auto ex = self->stream_.get_executor();
        asio::post(
            ex, [self = std::move(self), out = std::move(out), reply = std::move(reply)]() mutable {
              self->respond(std::move(out), reply);
            });
      });
      return;
    }
    if (r.deferred) r = run_deferred(r, *impl_->store);
    respond(std::move(r), reply);
  }

  struct Reply {
    unsigned version;
    bool keep_alive, head;
    std::string method;
    Clock::time_point t0;
  };

  static ApiResponse run_deferred(const ApiResponse& r, store::ResultStore& st) {
    ApiResponse out;
    try {
      out = r.deferred(st);
    } catch (const std::invalid_argument& e) {
      out.status = 400;
      out.body = json{{"error", e.what()}}.dump();
    } catch (const std::exception& e) {
      out.status = 500;
      out.body = json{{"error", std::string("internal error: ") + e.what()}}.dump();
    }
    out.route = r.route;
    return out;
  }

  // The store a reader thread uses: one per thread and URL, opened on first use.
  static store::ResultStore& reader_store(const std::string& url) {
    thread_local std::map<std::string, std::unique_ptr<store::ResultStore>> stores;
    auto& s = stores[url];
    if (!s) s = store::open_result_store(url);
    return *s;
  }

  void respond(ApiResponse r, const Reply& q) {
    impl_->metrics.observe(q.method, r.route, r.status,
                           std::chrono::duration<double>(Clock::now() - q.t0).count());
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), q.version);
    res->set(http::field::server, "dnnlab");
    res->set(http::field::content_type, r.content_type);
    res->set("X-Content-Type-Options", "nosniff");
    if (!r.allow.empty()) res->set(http::field::allow, r.allow);
    if (r.status == 401) res->set(http::field::www_authenticate, "Bearer");
    res->set(http::field::cache_control, r.immutable ? "public, max-age=31536000, immutable"
                                         : r.route == "static" ? "no-cache"
                                                               : "no-store");
    res->keep_alive(q.keep_alive);
    const std::size_t size = r.body.size();
    if (!q.head) res->body() = std::move(r.body);
    res->content_length(size);
    write(std::move(res));
  }

  void write(std::shared_ptr<http::response<http::string_body>> res) {
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res](beast::error_code ec, std::size_t) {
                        if (ec) return self->close();
                        if (res->need_eof()) return self->close();
                        self->read();
                      });
  }

  // Answers, stops sending, then reads and drops what the client still sends
  // (briefly) so it sees the answer rather than a reset.
  void reply_error_and_close(http::status status, const std::string& message,
                             const std::string& field) {
    impl_->metrics.observe("?", "unparsed", static_cast<unsigned>(status), 0.0);
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::server, "dnnlab");
    res->set(http::field::content_type, "application/json");
    res->set(http::field::connection, "close");
    res->body() = json{{"error", message}, {"field", field}}.dump();
    res->prepare_payload();
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(5));
    http::async_write(
        stream_, *res, [self = this->shared_from_this(), res](beast::error_code ec, std::size_t) {
          if (ec) return self->close();
          beast::error_code ignored;
          beast::get_lowest_layer(self->stream_)
              .socket()
              .shutdown(tcp::socket::shutdown_send, ignored);
          beast::get_lowest_layer(self->stream_).expires_after(std::chrono::seconds(2));
          self->drain();
        });
  }

  void drain() {
    // Raw bytes are dropped, TLS records or not: no need to decrypt them.
    beast::get_lowest_layer(stream_).async_read_some(
        asio::buffer(sink_), [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return self->close();
          self->drain();
        });
  }

  Stream stream_;
  std::shared_ptr<Server::Impl> impl_;
  std::shared_ptr<ConnectionSlot> slot_;  // moves to the WebSocket session on an upgrade
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::array<char, 16384> sink_;
};

ConnectionSlot::ConnectionSlot(std::shared_ptr<Server::Impl> i, std::string address)
    : impl(std::move(i)), ip(std::move(address)) {
  ++impl->connections;
  ++impl->per_ip[ip];
}

ConnectionSlot::~ConnectionSlot() {
  --impl->connections;
  auto it = impl->per_ip.find(ip);
  if (it != impl->per_ip.end() && --it->second == 0) impl->per_ip.erase(it);
}

void Server::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (self->stopped || ec == asio::error::operation_aborted) return;
    if (ec) return self->on_accept_error(ec);
    try {
      beast::error_code e2;
      auto remote = socket.remote_endpoint(e2);
      std::string ip = e2 ? std::string("?") : remote.address().to_string();
      auto it = self->per_ip.find(ip);
      const std::size_t from_ip = it == self->per_ip.end() ? 0 : it->second;
      if (self->connections >= self->opt.max_connections)
        self->refuse(std::move(socket), "the server has " + std::to_string(self->connections) +
                                            " connections open (--max-connections)");
      else if (from_ip >= self->opt.max_connections_per_ip)
        self->refuse(std::move(socket), "your address has " + std::to_string(from_ip) +
                                            " connections open (--max-connections-per-ip)");
      else {
        socket.set_option(tcp::no_delay(true), e2);
        auto slot = std::make_shared<ConnectionSlot>(self, std::move(ip));
        if (self->tls)
          std::make_shared<HttpSession<TlsStream>>(TlsStream(std::move(socket), *self->tls), self,
                                                   std::move(slot))
              ->start();
        else
          std::make_shared<HttpSession<PlainStream>>(PlainStream(std::move(socket)), self,
                                                     std::move(slot))
              ->start();
      }
    } catch (const std::exception& e) {
      log_error("accept", e.what());
    }
    self->accept();
  });
}

void Server::Impl::on_accept_error(const beast::error_code& ec) {
  const bool out_of_resources = ec == asio::error::no_descriptors ||
                                ec == boost::system::errc::too_many_files_open_in_system ||
                                ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
  const auto now = Clock::now();
  if (now - last_accept_log >= std::chrono::seconds(10)) {
    log_error("accept",
              ec.message() +
                  (out_of_resources ? " (retrying every 100 ms; existing connections "
                                      "are served)"
                                    : "") +
                  (accept_errors_unlogged ? "; " + std::to_string(accept_errors_unlogged) +
                                                " more since the last report"
                                          : ""));
    last_accept_log = now;
    accept_errors_unlogged = 0;
  } else {
    ++accept_errors_unlogged;
  }
  if (!out_of_resources) return accept();  // one bad connection (reset before accept): next
  // The pending connection stays in the backlog, so accepting again at once
  // fails again at once: wait for descriptors to be freed.
  accept_timer.expires_after(kAcceptBackoff);
  accept_timer.async_wait([self = shared_from_this()](beast::error_code e) {
    if (!e && !self->stopped) self->accept();
  });
}

void Server::Impl::refuse(tcp::socket socket, const std::string& why) {
  if (tls) {
    // A 503 would need a TLS handshake first: too dear for a flood. The
    // client sees the connection closed.
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    return;
  }
  struct Refusal {
    beast::tcp_stream stream;
    std::string bytes;
    std::array<char, 4096> sink;
  };
  const std::string body = json{{"error", "too many connections: " + why}}.dump();
  auto r = std::make_shared<Refusal>(Refusal{beast::tcp_stream(std::move(socket)),
                                             "HTTP/1.1 503 Service Unavailable\r\n"
                                             "Server: dnnlab\r\n"
                                             "Content-Type: application/json\r\n"
                                             "Retry-After: 5\r\n"
                                             "Connection: close\r\n"
                                             "Content-Length: " +
                                                 std::to_string(body.size()) + "\r\n\r\n" + body,
                                             {}});
  r->stream.expires_after(std::chrono::seconds(2));
  asio::async_write(r->stream, asio::buffer(r->bytes), [r](beast::error_code ec, std::size_t) {
    if (ec) return;
    // Read and drop what the client sent, briefly, so it sees the answer
    // rather than a reset; the 2 s deadline ends it either way.
    beast::error_code ignored;
    r->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    auto drain = std::make_shared<std::function<void()>>();
    *drain = [r, drain]() {
      r->stream.async_read_some(asio::buffer(r->sink),
                                [r, drain](beast::error_code e, std::size_t) {
                                  if (e) {
                                    *drain = nullptr;  // breaks the cycle
                                    return;
                                  }
                                  (*drain)();
                                });
    };
    (*drain)();
  });
}

std::int64_t Server::Impl::newest_event_id() {
  std::int64_t id = 0;
  for (;;) {
    auto events = store->events_since(id, 10000);
    if (events.empty()) return id;
    id = events.back().id;
  }
}

void Server::Impl::broadcast(const std::string& frame, std::int64_t id) {
  std::vector<std::shared_ptr<EventSink>> live;
  for (auto& [p, w] : event_sessions)
    if (auto s = w.lock()) live.push_back(std::move(s));
  for (auto& s : live) s->deliver(frame, id);
}

void Server::Impl::on_event_poll() {
  if (stopped) return;
  try {
    for (;;) {
      auto events = store->events_since(last_event_id, 1000);
      for (const auto& e : events) {
        last_event_id = e.id;
        if (!event_sessions.empty()) broadcast(Api::event_json(e).dump(), e.id);
      }
      if (events.size() < 1000) break;
    }
    for (auto& [id, reply] : gateway->poll()) {
      auto it = join_sessions.find(id);
      if (it != join_sessions.end())
        if (auto js = it->second.lock()) js->apply(std::move(reply));
    }
    auto now = Clock::now();
    if (now - last_throughput >= std::chrono::seconds(1)) {
      last_throughput = now;
      if (!event_sessions.empty() && api->anything_running())
        broadcast(json{{"id", nullptr},
                       {"time", unix_now()},
                       {"type", "throughput"},
                       {"data", api->throughput()}}
                      .dump(),
                  0);
    }
  } catch (const std::exception& e) {
    log_error("event poll", e.what());
  }
  event_timer.expires_after(kTickPeriod);
  event_timer.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->on_event_poll();
  });
}

void Server::Impl::on_tick() {
  if (stopped) return;
  try {
    runner->tick();
  } catch (const std::exception& e) {
    log_error("coordinators", e.what());
  }
  tick_timer.expires_after(kTickPeriod);
  tick_timer.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->on_tick();
  });
}

Server::Server(asio::io_context& io, ServerOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {
  Impl& s = *impl_;
  if (s.opt.store_url.empty()) throw std::invalid_argument("store: a store URL is needed");
  if (s.opt.broker_url.empty()) s.opt.broker_url = s.opt.store_url;
  auto [host, port] = parse_listen(s.opt.listen);
  s.host = host;
  // One connection when both are the same embedded file.
  db::Connections shared;
  s.queue = queue::open_task_queue(s.opt.broker_url, {}, &shared);
  s.store = store::open_result_store(s.opt.store_url, &shared);
  s.runner = std::make_unique<ExperimentRunner>(*s.store, *s.queue, s.opt.run_coordinators);
  if (s.opt.token_file.empty()) s.opt.token_file = default_token_file(s.opt.store_url);
  s.token = load_or_create_token(s.opt.token_file);
  if (s.opt.read_token_file.empty())
    s.opt.read_token_file =
        (std::filesystem::path(s.opt.token_file).parent_path() / "dnnlab.read-token").string();
  if (!s.opt.public_reads) {
    // What dashboard URLs carry: it reads, and cannot write.
    s.read_token = load_or_create_token(s.opt.read_token_file);
    if (s.read_token.token == s.token.token)
      throw std::invalid_argument("--read-token-file " + s.opt.read_token_file +
                                  " holds the write token (from " + s.opt.token_file +
                                  "): the read token must differ from it");
  }
  ApiConfig ac;
  ac.token = s.token.token;
  ac.read_token = s.read_token.token;
  ac.public_reads = s.opt.public_reads;
  ac.web_root = s.opt.web_root;
  ac.gateway_file = [&s](std::string_view path) -> std::optional<ServedFile> {
    if (!s.gateway) return std::nullopt;
    auto f = s.gateway->asset(path);
    if (!f) return std::nullopt;
    return ServedFile{f->content_type, f->body};
  };
  s.api = std::make_unique<Api>(*s.store, *s.runner, s.metrics, std::move(ac));
  if (s.opt.join_token_file.empty())
    s.opt.join_token_file =
        (std::filesystem::path(s.opt.token_file).parent_path() / "dnnlab.join-token").string();
  s.join_token = load_or_create_token(s.opt.join_token_file);
  // Volunteers get the join token; if it were the write token, any of them
  // could cancel experiments.
  if (!s.read_token.token.empty() && s.join_token.token == s.read_token.token)
    throw std::invalid_argument("--join-token-file " + s.opt.join_token_file +
                                " holds the read token (from " + s.opt.read_token_file +
                                "): the tokens must differ");
  if (s.join_token.token == s.token.token)
    throw std::invalid_argument("--join-token-file " + s.opt.join_token_file +
                                " holds the write token (from " + s.opt.token_file +
                                "): the join token must differ from it");
  GatewayOptions go = s.opt.gateway;
  go.join_token = s.join_token.token;
  // Signs browser identities; kept beside the tokens, never sent.
  go.secret = load_or_create_token((std::filesystem::path(s.opt.join_token_file).parent_path() /
                                    "dnnlab.gateway-secret")
                                       .string())
                  .token;
  go.web_root = s.opt.web_root;
  go.data_dir = s.opt.data_dir;
  go.store_url = s.opt.store_url;
  go.broker_url = s.opt.broker_url;
  go.lease_seconds = s.opt.browser_lease_seconds;
  go.verify_fraction = s.opt.verify_fraction;
  go.max_binary_bytes = s.opt.max_join_frame;
  s.gateway = std::make_unique<Gateway>(*s.store, *s.queue, go);

  // Before binding: a bad certificate or key stops the start, naming the file.
  if (!s.opt.tls_cert.empty() || !s.opt.tls_key.empty()) {
    if (s.opt.tls_cert.empty()) throw std::invalid_argument("--tls-key needs --tls-cert too");
    if (s.opt.tls_key.empty()) throw std::invalid_argument("--tls-cert needs --tls-key too");
    s.tls = load_tls_context(s.opt.tls_cert, s.opt.tls_key);
  }

  tcp::endpoint ep(asio::ip::make_address(host), port);
  s.acceptor.open(ep.protocol());
  s.acceptor.set_option(asio::socket_base::reuse_address(true));
  s.acceptor.bind(ep);
  s.acceptor.listen(asio::socket_base::max_listen_connections);
  s.port = s.acceptor.local_endpoint().port();
  s.guard = std::make_unique<RequestGuard>(
      GuardConfig{s.host, s.port, s.tls != nullptr, s.opt.allow_hosts, s.opt.allow_origins});
  s.work_pool = std::make_unique<asio::thread_pool>(std::max(1u, s.opt.work_threads));
  if (s.opt.read_threads > 0) s.pool = std::make_unique<asio::thread_pool>(s.opt.read_threads);
}

Server::~Server() {
  if (impl_ && !impl_->stopped) {
    impl_->stopped = true;
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->tick_timer.cancel();
    impl_->event_timer.cancel();
    impl_->accept_timer.cancel();
  }
  // Reader jobs hand their sessions back to the io thread; none is left here.
  if (impl_ && impl_->pool) impl_->pool->join();
  if (impl_ && impl_->work_pool) impl_->work_pool->join();
}

unsigned short Server::port() const {
  return impl_->port;
}
std::string Server::url() const {
  std::string h = impl_->host == "0.0.0.0" ? "127.0.0.1" : impl_->host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return std::string(impl_->tls ? "https://" : "http://") + h + ":" + std::to_string(impl_->port);
}
const std::string& Server::token() const {
  return impl_->token.token;
}
bool Server::token_is_new() const {
  return impl_->token.created;
}
const std::string& Server::token_file() const {
  return impl_->opt.token_file;
}
const std::string& Server::join_token() const {
  return impl_->join_token.token;
}
bool Server::join_token_is_new() const {
  return impl_->join_token.created;
}
std::string Server::join_url() const {
  return url() + "/join?token=" + impl_->join_token.token;
}
const std::string& Server::read_token() const {
  return impl_->read_token.token;
}
bool Server::read_token_is_new() const {
  return impl_->read_token.created;
}
const std::string& Server::read_token_file() const {
  return impl_->opt.read_token_file;
}
std::string Server::dashboard_url() const {
  if (impl_->read_token.token.empty()) return url() + "/";
  return url() + "/?token=" + impl_->read_token.token;
}

void Server::start() {
  Impl& s = *impl_;
  s.last_event_id = s.newest_event_id();
  s.runner->resume_running();
  s.accept();
  s.on_event_poll();
  if (s.opt.run_coordinators) s.on_tick();
}

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  beast::error_code ec;
  s.acceptor.close(ec);
  s.tick_timer.cancel();
  s.event_timer.cancel();
  s.accept_timer.cancel();
  std::vector<std::shared_ptr<OpenSession>> https;
  for (auto& [p, w] : s.http_sessions)
    if (auto h = w.lock()) https.push_back(std::move(h));
  for (auto& h : https) h->close();
  std::vector<std::shared_ptr<EventSink>> wss;
  for (auto& [p, w] : s.event_sessions)
    if (auto e = w.lock()) wss.push_back(std::move(e));
  for (auto& e : wss) e->close();
  std::vector<std::shared_ptr<JoinSink>> joins;
  for (auto& [id, w] : s.join_sessions)
    if (auto j = w.lock()) joins.push_back(std::move(j));
  for (auto& j : joins) j->abort();  // their tickets go back to the queue
}

void Server::adopt(std::int64_t experiment_id) {
  impl_->runner->adopt(experiment_id);
}

}  // namespace dnnlab::server
