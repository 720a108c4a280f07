// The HTTP/1.1 keep-alive session, a template on the stream (plain or TLS):
// REST, static files, /metrics, and the upgrades to the WebSocket sessions.
// Private to the server.
#pragma once
#include "server/server_impl.hpp"

namespace dnnlab::server {

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
    parser_->header_limit(kMaxRequestHeaderBytes);
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
    // Framing two parsers could read differently (a proxy in front taking
    // "chunked, gzip" as one body, Beast as none) is refused outright.
    std::vector<std::string_view> codings;
    for (auto [it, end] = req.equal_range(http::field::transfer_encoding); it != end; ++it)
      codings.emplace_back(it->value().data(), it->value().size());
    if (auto problem = framing_problem(codings, req.count(http::field::content_length) > 0);
        !problem.empty())
      return reply_error_and_close(http::status::bad_request, problem, "Transfer-Encoding");
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
    if (impl_->pool && !a.websocket && on_reader_thread(a.target)) {
      // The REST API reads and writes the store (and the runner, the
      // broker): a reader thread, with its own store, answers it; the io
      // thread goes on serving sockets.
      Reply reply{req.version(), req.keep_alive(), req.method() == http::verb::head, a.method, t0};
      asio::post(*impl_->pool, [self = this->shared_from_this(), a = std::move(a),
                                reply = std::move(reply)]() mutable {
        ApiResponse out = self->answer_on_reader(a);
        auto ex = self->stream_.get_executor();
        asio::post(
            ex, [self = std::move(self), out = std::move(out), reply = std::move(reply)]() mutable {
              self->respond(std::move(out), reply);
            });
      });
      return;
    }
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
      // Event streams live long: they may hold half the connections, the
      // rest stay for requests and /join.
      if (r.upgrade == Upgrade::events &&
          impl_->event_sessions.size() >= max_event_streams(impl_->opt)) {
        return reply_error_and_close(
            http::status::service_unavailable,
            "too many event streams: " + std::to_string(impl_->event_sessions.size()) +
                " are open, half of --max-connections",
            "connections", 5);
      }
      impl_->metrics.observe(a.method, r.route, 101, 0.0);
      beast::get_lowest_layer(stream_).expires_never();
      Upgraded up{std::move(slot_), std::move(req), std::move(buffer_)};
      if (r.upgrade == Upgrade::join)
        start_join_session(std::move(stream_), impl_, std::move(up));
      else
        start_event_session(std::move(stream_), impl_, std::move(up), r.events_after,
                            r.private_fields);
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
          finish = [failed = failure_response(e)] { return failed; };
        }
        auto ex = self->stream_.get_executor();
        asio::post(ex, [self = std::move(self), finish = std::move(finish),
                        route = std::move(route), reply = std::move(reply)]() mutable {
          ApiResponse out;
          try {
            out = finish();
          } catch (const std::exception& e) {
            out = failure_response(e);
          }
          out.route = route;
          self->respond(std::move(out), reply);
        });
      });
      return;
    }
    // Without reader threads (--read-threads 0) deferred reads run here too.
    if (r.deferred) r = run_deferred(r, [&]() -> store::ResultStore& { return *impl_->store; });
    respond(std::move(r), reply);
  }

  struct Reply {
    unsigned version;
    bool keep_alive, head;
    std::string method;
    Clock::time_point t0;
  };

  // /api/... and /metrics; the upgrades, the pages and files stay on the io thread.
  static bool on_reader_thread(std::string_view target) {
    const std::string_view path = target.substr(0, target.find('?'));
    return path.rfind("/api/", 0) == 0 || path == "/metrics";
  }

  // The whole request on this reader thread, with its store: the handler,
  // then what it hands on (a slow parse, a deferred read) here too.
  ApiResponse answer_on_reader(const ApiRequest& a) {
    ApiResponse out;
    try {
      store::ResultStore& st = reader_store(impl_->opt.store_url, impl_->opt.store_wait_seconds);
      out = impl_->api->handle(a, &st);
      const std::string route = out.route;
      if (out.background) out = out.background()();
      if (out.deferred) out = out.deferred(st);
      out.route = route;
    } catch (const std::exception& e) {
      const std::string route = out.route;
      out = failure_response(e);
      out.route = route;
    }
    return out;
  }

  // `store` is called inside the try: opening a reader's store can fail too
  // (the server store unreachable), and must answer, not end the thread.
  static ApiResponse run_deferred(const ApiResponse& r,
                                  const std::function<store::ResultStore&()>& store) {
    ApiResponse out;
    try {
      out = r.deferred(store());
    } catch (const std::exception& e) {
      out = failure_response(e);
    }
    out.route = r.route;
    return out;
  }

  // The store a reader thread uses: one per thread and URL, opened on first use.
  static store::ResultStore& reader_store(const std::string& url, double wait_seconds) {
    thread_local std::map<std::string, std::unique_ptr<store::ResultStore>> stores;
    auto& s = stores[url];
    if (!s) {
      store::StoreOptions o;
      o.reconnect_seconds = wait_seconds;
      try {
        s = store::open_result_store(url, nullptr, o);
      } catch (const store::StoreUnavailableError&) {
        throw;
      } catch (const std::exception& e) {
        // Not connected yet (the server's store is down): the next request
        // tries again; this one gets 503, as a lost connection's would.
        throw store::StoreUnavailableError(e.what(), false);
      }
    }
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
    if (r.retry_after) res->set(http::field::retry_after, std::to_string(r.retry_after));
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
                             const std::string& field, unsigned retry_after = 0) {
    impl_->metrics.observe("?", "unparsed", static_cast<unsigned>(status), 0.0);
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::server, "dnnlab");
    res->set(http::field::content_type, "application/json");
    res->set(http::field::connection, "close");
    if (retry_after) res->set(http::field::retry_after, std::to_string(retry_after));
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

}  // namespace dnnlab::server
