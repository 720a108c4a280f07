// One connection to the endpoint, a template on its stream (plain TCP or
// TLS over it): first the TLS handshake (on a TLS port), then an HTTP request
// (a GET of one of EndpointOptions::files, or the WebSocket upgrade), then the
// hello and the frames. Private to endpoint_session_{plain,tls}.cpp.
#pragma once
// clang-format off
#include <utility>  // first: Boost 1.74's asio/awaitable.hpp uses std::exchange unincluded
// clang-format on
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <optional>
#include <type_traits>

#include "hybrid_net/endpoint_impl.hpp"

namespace dnnlab::hybrid_net {
namespace session_detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// A message is read this much at a time, so that its size is checked by us
// (and refused with a reason) rather than by Beast's read_message_max,
// whose close carries no reason.
inline constexpr size_t kReadChunk = 256 * 1024;
// How long a GET of one of the files may take to be written (the training
// shard is tens of MB): the bound on a reader that stops reading.
inline constexpr auto kFileWriteTimeout = std::chrono::minutes(10);

template <class Stream>
class Session final : public Connection, public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

 public:
  // `stream_args`: what constructs the stream (the socket, and on TLS the context).
  template <class... Args>
  explicit Session(HybridEndpoint::Impl& hub, Args&&... stream_args)
      : ws_(std::forward<Args>(stream_args)...), hub_(hub), timer_(hub.ioc) {
    beast::error_code ec;
    const auto ep = socket().remote_endpoint(ec);
    peer_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  // The hello timeout bounds everything before the admission: the TLS
  // handshake, the request, the WebSocket handshake and the hello.
  void start() {
    ++hub_.waiting;
    timer_.expires_after(hub_.opt.hello_timeout);
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || self->id_ >= 0 || self->serving_file_) return;
      const std::string why =
          "no hello within " + std::to_string(self->hub_.opt.hello_timeout.count()) + " ms";
      if (self->closing_) {  // a refusal it does not read: dropped
        self->hub_.log(self->who() + " closed: " + why);
        return self->drop();
      }
      self->fail(why);
    });
    // The first bytes say which protocol the peer speaks: a TLS ClientHello,
    // or (anything else) plain HTTP. The wrong one for this port is refused
    // with a log line; the bytes read stay in buf_ for what follows.
    beast::async_detect_ssl(
        beast::get_lowest_layer(ws_), buf_,
        [self = this->shared_from_this()](beast::error_code ec, bool is_tls) {
          if (ec) {
            if (!self->closing_)
              self->hub_.log(self->who() + " closed: nothing read: " + ec.message());
            self->closing_ = true;
            return self->left();
          }
          if constexpr (kTls) {
            if (!is_tls) return self->refuse_plain();
            self->ws_.next_layer().async_handshake(
                asio::ssl::stream_base::server, self->buf_.data(),
                [self](beast::error_code ec, size_t used) {
                  if (ec) {
                    if (!self->closing_) {
                      self->hub_.log(self->who() + " closed: TLS handshake: " + ec.message());
                      self->closing_ = true;
                      self->drop();
                    }
                    return self->left();
                  }
                  self->buf_.consume(used);
                  self->read_request();
                });
          } else {
            if (is_tls) {
              self->hub_.log(self->who() +
                             " refused: a TLS handshake on a plain port (this endpoint serves "
                             "ws:// and http://; give it --tls-cert and --tls-key for wss://)");
              self->closing_ = true;
              self->drop();
              return self->left();
            }
            self->read_request();
          }
        });
  }

  void queue(std::shared_ptr<const std::string> text, std::shared_ptr<hybrid::Bytes> bin) override {
    if (closing_) return;
    const size_t n = text ? text->size() : bin->size();
    out_.push_back({std::move(text), std::move(bin)});
    queued_ += n;
    hub_.queued += static_cast<int64_t>(n);
    if (queued_ > hub_.opt.max_send_queue) {
      // It stopped reading: no polite close can reach it either.
      hub_.log(who() + ": " + std::to_string(queued_) +
               " bytes queued unsent (max_send_queue): closed");
      closing_ = true;
      while (out_.size() > 1) drop_unsent();  // the one being written fails with the socket
      drop();
      return;
    }
    if (out_.size() == 1) write_next();
  }

  void expel(const std::string& why) override { fail(why); }

  void finish() override {
    if (closing_) return;
    closing_ = true;
    close_ = websocket::close_reason(websocket::close_code::normal, "the run is over");
    if (out_.empty()) close_now();
  }

 private:
  struct Out {
    std::shared_ptr<const std::string> text;
    std::shared_ptr<hybrid::Bytes> bin;
  };

  tcp::socket& socket() { return beast::get_lowest_layer(ws_).socket(); }

  // The TCP connection is closed at once (any pending operation ends).
  void drop() {
    beast::error_code ec;
    socket().close(ec);
  }

  std::string who() const {
    return id_ >= 0 ? "client " + std::to_string(id_) + " (" + peer_ + ")" : peer_;
  }

  // Tells the client why (an error message, then the close reason) and
  // closes. The engine hears that it left.
  void fail(const std::string& why,
            websocket::close_code code = websocket::close_code::policy_error) {
    if (closing_) return;
    hub_.log(who() + " closed: " + why);
    if (!accepted_) {  // no WebSocket yet: drop the TCP connection
      closing_ = true;
      return drop();
    }
    while (out_.size() > 1) drop_unsent();  // the one being written stays
    queue(std::make_shared<const std::string>(error_json(why)), nullptr);
    closing_ = true;
    close_ = websocket::close_reason(code, close_reason(why));
    if (out_.empty()) close_now();
  }

  void drop_unsent() {  // the last queued
    const Out& o = out_.back();
    const size_t n = o.text ? o.text->size() : o.bin->size();
    queued_ -= n;
    hub_.queued -= static_cast<int64_t>(n);
    out_.pop_back();
  }

  // Plain HTTP on a TLS port: a clear-text 400 saying so, then the end.
  void refuse_plain() {
    hub_.log(who() + " refused: plain HTTP on a TLS port (use https:// and wss://)");
    closing_ = true;
    static const std::string body =
        "this port speaks TLS only: use https:// for its pages and wss:// to join\n";
    static const std::string bytes =
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    asio::async_write(socket(), asio::buffer(bytes),
                      [self = this->shared_from_this()](beast::error_code, size_t) {
                        beast::error_code ec;
                        self->socket().shutdown(tcp::socket::shutdown_send, ec);
                        self->drop();
                        self->left();
                      });
  }

  void read_request() {
    parser_.emplace();
    parser_->header_limit(8192);
    parser_->body_limit(0);
    http::async_read(
        ws_.next_layer(), buf_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_request(ec); });
  }

  void on_request(beast::error_code ec) {
    if (ec) {
      if (!closing_) hub_.log(who() + " closed: no WebSocket upgrade request: " + ec.message());
      closing_ = true;
      return left();
    }
    const auto& req = parser_->get();
    // The path only: a query is never logged (it could hold what a user
    // pasted; the browser page keeps the token in the fragment, which no
    // request carries).
    const std::string_view target(req.target().data(), req.target().size());
    const std::string path(target.substr(0, target.find('?')));
    if (!websocket::is_upgrade(req) && req.method() == http::verb::get) {
      const auto file = hub_.opt.files.find(path);
      if (file != hub_.opt.files.end()) {
        const auto auth = req[http::field::authorization];
        const std::string_view given(auth.data(), auth.size());
        const bool watcher = file->second.watch_token_too && !hub_.opt.watch_token.empty() &&
                             constant_time_equal(given, "Bearer " + hub_.opt.watch_token);
        if (file->second.needs_token && !watcher &&
            !constant_time_equal(given, "Bearer " + hub_.opt.token))
          return refuse_http("GET " + path + " needs the " +
                                 (file->second.watch_token_too ? "watch or join" : "join") +
                                 " token (Authorization: Bearer)",
                             http::status::unauthorized);
        return serve_file(file->second);
      }
    }
    if (!websocket::is_upgrade(req) || target != kPath)
      return refuse_http(std::string("this port serves the hybrid trainer's WebSocket at ") +
                         kPath + "; got " + std::string(req.method_string()) + " " + path);
    if (buf_.size() != 0)
      return refuse_http("bytes after the upgrade request before the handshake completed");
    beast::get_lowest_layer(ws_).expires_never();
    auto t = websocket::stream_base::timeout::suggested(beast::role_type::server);
    t.handshake_timeout = hub_.opt.hello_timeout;
    ws_.set_option(t);
    ws_.read_message_max(0);  // checked per chunk in read_more()
    ws_.auto_fragment(false);
    ws_.async_accept(req, [self = this->shared_from_this()](beast::error_code ec) {
      if (ec) {
        self->fail("WebSocket handshake: " + ec.message());
        return self->left();
      }
      self->accepted_ = true;
      self->read_more();
    });
  }

  // One of EndpointOptions::files, then the connection is closed (a browser
  // opens another for the next). The hello timeout no longer applies; a
  // reader that stops reading is dropped after kFileWriteTimeout.
  void serve_file(const EndpointOptions::File& f) {
    auto res = std::make_shared<http::response<http::string_body>>(http::status::ok, 11);
    res->set(http::field::content_type, f.content_type);
    res->set(http::field::cache_control, "no-cache");
    res->set("X-Content-Type-Options", "nosniff");
    res->set("X-Frame-Options", "DENY");
    res->set("Referrer-Policy", "no-referrer");
    res->set(http::field::connection, "close");
    const auto body = f.make ? f.make() : f.body;
    if (body) res->body() = *body;
    res->prepare_payload();
    serving_file_ = true;
    beast::get_lowest_layer(ws_).expires_after(kFileWriteTimeout);
    write_and_close(std::move(res));
  }

  void refuse_http(const std::string& why, http::status status = http::status::bad_request) {
    hub_.log(who() + " refused: " + why);
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::content_type, "text/plain");
    res->set(http::field::connection, "close");
    res->body() = why + "\n";
    res->prepare_payload();
    write_and_close(std::move(res));
  }

  // The reply, then the end of the connection (over TLS without the
  // close_notify exchange: the reply carries its Content-Length).
  void write_and_close(std::shared_ptr<http::response<http::string_body>> res) {
    closing_ = true;
    http::async_write(ws_.next_layer(), *res,
                      [self = this->shared_from_this(), res](beast::error_code, size_t) {
                        beast::error_code ec;
                        self->socket().shutdown(tcp::socket::shutdown_send, ec);
                        self->drop();
                        self->left();
                      });
  }

  void read_more() {
    ws_.async_read_some(
        msg_, kReadChunk,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      if (!closing_ && ec != websocket::error::closed) hub_.log(who() + " lost: " + ec.message());
      closing_ = true;
      return left();
    }
    const size_t limit = id_ < 0 ? kMaxHelloBytes : hub_.opt.max_frame_bytes;
    if (msg_.size() > limit)
      return fail(id_ < 0 ? "the hello is over " + std::to_string(limit) + " bytes"
                          : "a frame is over " + std::to_string(limit) + " bytes (max_frame_bytes)",
                  websocket::close_code::too_big);
    if (!ws_.is_message_done()) return read_more();
    const bool text = ws_.got_text();
    if (closing_) {  // reading only to see the close
      msg_.consume(msg_.size());
      return read_more();
    }
    if (id_ < 0) {
      if (!text) return fail("the first message must be the text hello, got a binary message");
      on_hello(beast::buffers_to_string(msg_.data()));
    } else if (text) {
      return fail("a text message after the hello: the trainer's frames are binary");
    } else {
      // One copy out of the (contiguous) flat buffer, not zeroed first.
      const asio::const_buffer data = msg_.data();
      const auto* p = static_cast<const uint8_t*>(data.data());
      hybrid::Bytes b(p, p + data.size());
      unread += static_cast<int64_t>(b.size());
      const uint64_t max_unread =
          hub_.opt.max_unread ? hub_.opt.max_unread : 4 * hub_.opt.max_frame_bytes;
      if (static_cast<uint64_t>(unread.load()) > max_unread) {
        msg_.consume(msg_.size());
        return fail("sent " + std::to_string(unread.load()) +
                    " bytes the trainer has not yet taken (max_unread): too far ahead");
      }
      hub_.push(hybrid::Inbound{id_, std::move(b), false}, this->shared_from_this());
    }
    msg_.consume(msg_.size());
    if (!closing_) read_more();
  }

  void on_hello(const std::string& text) {
    Hello h;
    try {
      h = parse_hello(text);
    } catch (const ProtocolError& e) {
      return fail(e.what());
    }
    if (!constant_time_equal(h.token, hub_.opt.token))
      return fail("hello: 'token' is not this run's join token");
    // The io thread alone admits, so nothing changes the book or the
    // connections between this decision and the admission below.
    Identity ident = h.identity;
    const bool back = ident.client >= 0;
    std::string refused;
    auto code = websocket::close_code::policy_error;
    {
      std::lock_guard lock(hub_.mu);
      if (back) {
        refused = hub_.identities.check(ident);
        if (refused.empty() && hub_.live(ident.client)) {
          // Refused rather than replacing the first: the holder of the
          // secret is one client, and its old link ends at its socket's
          // close or idle timeout; then it tries again.
          refused = "hello: identity " + std::to_string(ident.client) +
                    " is connected already (on another connection)";
          code = websocket::close_code::try_again_later;
        }
      }
      if (refused.empty() && hub_.live_count() >= hub_.opt.max_clients) {
        refused = "the run is full (" + std::to_string(hub_.opt.max_clients) + " clients)";
        code = websocket::close_code::try_again_later;
      }
      if (refused.empty() && !back) {
        const auto issued = hub_.identities.issue([&](int c) { return hub_.live(c); });
        if (issued)
          ident = *issued;
        else {
          refused = "the run issues no more identities (" +
                    std::to_string(hub_.identities.issued()) + " issued, " +
                    std::to_string(hub_.identities.size()) +
                    " remembered): it admits only known ones";
          code = websocket::close_code::try_again_later;
        }
      }
    }
    if (!refused.empty()) return fail(refused, code);
    timer_.cancel();
    --hub_.waiting;
    id_ = ident.client;
    Welcome w = hub_.opt.welcome;
    w.client = ident.client;
    w.secret = ident.secret;
    w.max_frame_bytes = hub_.opt.max_frame_bytes;
    // Admitted first, so that a client holding its welcome is counted
    // (clients()); the welcome still goes first: the engine's sends to it
    // are posted to this io thread and queue behind it.
    {
      std::lock_guard lock(hub_.mu);
      auto self = this->shared_from_this();
      if (back) {
        hub_.identities.touch(id_);
        hub_.admitted[id_] = self;
        hub_.agents[id_] = h.agent;
        // Routed to once the engine takes this (HybridEndpoint::receive).
        hub_.inbox.push_back({hybrid::Inbound{id_, {}, false, true}, self});
      } else {
        hub_.admitted.push_back(self);
        hub_.routed.push_back(self);
        hub_.agents.push_back(h.agent);
      }
    }
    queue(std::make_shared<const std::string>(to_json(w)), nullptr);
    hub_.cv.notify_all();
    hub_.log(who() + (back ? " is back (" : " joined (") + h.agent + ")");
  }

  void write_next() {
    const Out& o = out_.front();
    ws_.binary(o.bin != nullptr);
    auto done = [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (!self->out_.empty()) {
        const Out& f = self->out_.front();
        const size_t n = f.text ? f.text->size() : f.bin->size();
        self->queued_ -= n;
        self->hub_.queued -= static_cast<int64_t>(n);
        self->out_.pop_front();
      }
      if (ec) {  // the connection is broken: nothing more will be written
        self->closing_ = true;
        while (!self->out_.empty()) self->drop_unsent();
        return self->left();
      }
      if (!self->out_.empty()) return self->write_next();
      if (self->closing_ && self->close_) self->close_now();
    };
    if (o.bin)
      ws_.async_write(asio::buffer(*o.bin), std::move(done));
    else
      ws_.async_write(asio::buffer(*o.text), std::move(done));
  }

  void close_now() {
    if (!close_ || sent_close_) return;
    sent_close_ = true;
    ws_.async_close(*close_,
                    [self = this->shared_from_this()](beast::error_code) { self->left(); });
  }

  // The connection is over: the engine hears it once (if it was admitted).
  void left() {
    if (gone.exchange(true)) return;
    timer_.cancel();
    if (id_ < 0) {
      --hub_.waiting;
      return;
    }
    hub_.push(hybrid::Inbound{id_, {}, true}, this->shared_from_this());
  }

  websocket::stream<Stream> ws_;
  HybridEndpoint::Impl& hub_;
  asio::steady_timer timer_;
  std::string peer_;
  beast::flat_buffer buf_;
  beast::flat_buffer msg_;
  std::optional<http::request_parser<http::empty_body>> parser_;
  std::deque<Out> out_;
  uint64_t queued_ = 0;
  int id_ = -1;
  bool accepted_ = false, closing_ = false, sent_close_ = false, serving_file_ = false;
  std::optional<websocket::close_reason> close_;
};

}  // namespace session_detail
}  // namespace dnnlab::hybrid_net
