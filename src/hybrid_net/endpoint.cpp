// The WebSocket side of the hybrid trainer: an acceptor and one Session per
// connection on one io thread, queues to and from the step engine.
#include "hybrid_net/endpoint.hpp"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace dnnlab::hybrid_net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

// A message is read this much at a time, so that its size is checked by us
// (and refused with a reason) rather than by Beast's read_message_max,
// whose close carries no reason.
constexpr size_t kReadChunk = 64 * 1024;

class Session;

}  // namespace

struct HybridEndpoint::Impl {
  EndpointOptions opt;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::thread io;
  std::string host;
  unsigned short port = 0;
  // Shared with the engine's thread.
  mutable std::mutex mu;
  std::condition_variable cv;  // the inbox or the admitted count changed
  std::deque<hybrid::Inbound> inbox;
  std::vector<std::shared_ptr<Session>> admitted;  // by client id
  std::vector<std::string> agents;                 // by client id, from the hellos
  std::atomic<int64_t> queued{0};                  // bytes waiting to be written, all clients
  // The io thread's alone.
  int waiting = 0;  // connected, not admitted
  bool stopping = false;

  void log(const std::string& line) {
    if (opt.log) opt.log(line);
  }
  void push(hybrid::Inbound in) {
    {
      std::lock_guard lock(mu);
      inbox.push_back(std::move(in));
    }
    cv.notify_all();
  }
  void accept();
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HybridEndpoint::Impl& hub)
      : ws_(std::move(socket)), hub_(hub), timer_(hub.ioc) {
    beast::error_code ec;
    const auto ep = ws_.next_layer().socket().remote_endpoint(ec);
    peer_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  int id() const { return id_; }
  std::atomic<int64_t> unread{0};  // bytes in the inbox from this client
  std::atomic<bool> gone{false};

  void start() {
    ++hub_.waiting;
    timer_.expires_after(hub_.opt.hello_timeout);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && self->id_ < 0)
        self->fail("no hello within " + std::to_string(self->hub_.opt.hello_timeout.count()) +
                   " ms");
    });
    parser_.emplace();
    parser_->header_limit(8192);
    parser_->body_limit(0);
    http::async_read(
        ws_.next_layer(), buf_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_request(ec); });
  }

  // Queues one message (binary: a frame; text: a control message).
  void queue(std::shared_ptr<const std::string> text, std::shared_ptr<hybrid::Bytes> bin) {
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
      beast::error_code ec;
      ws_.next_layer().socket().close(ec);
      return;
    }
    if (out_.size() == 1) write_next();
  }

  // Tells the client why (an error message, then the close reason) and
  // closes. The engine hears that it left.
  void fail(const std::string& why,
            websocket::close_code code = websocket::close_code::policy_error) {
    if (closing_) return;
    hub_.log(who() + " closed: " + why);
    if (!accepted_) {  // no WebSocket yet: drop the TCP connection
      closing_ = true;
      beast::error_code ec;
      ws_.next_layer().socket().close(ec);
      return;
    }
    while (out_.size() > 1) drop_unsent();  // the one being written stays
    queue(std::make_shared<const std::string>(error_json(why)), nullptr);
    closing_ = true;
    close_ = websocket::close_reason(code, close_reason(why));
    if (out_.empty()) close_now();
  }

  // The end of the run: a normal close once the queue is written.
  void finish() {
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

  std::string who() const {
    return id_ >= 0 ? "client " + std::to_string(id_) + " (" + peer_ + ")" : peer_;
  }

  void drop_unsent() {  // the last queued
    const Out& o = out_.back();
    const size_t n = o.text ? o.text->size() : o.bin->size();
    queued_ -= n;
    hub_.queued -= static_cast<int64_t>(n);
    out_.pop_back();
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
    ws_.next_layer().expires_never();
    auto t = websocket::stream_base::timeout::suggested(beast::role_type::server);
    t.handshake_timeout = hub_.opt.hello_timeout;
    ws_.set_option(t);
    ws_.read_message_max(0);  // checked per chunk in read_more()
    ws_.auto_fragment(false);
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      if (ec) {
        self->fail("WebSocket handshake: " + ec.message());
        return self->left();
      }
      self->accepted_ = true;
      self->read_more();
    });
  }

  // One of EndpointOptions::files, then the connection is closed (a browser
  // opens another for the next).
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
    closing_ = true;
    http::async_write(ws_.next_layer(), *res,
                      [self = shared_from_this(), res](beast::error_code, size_t) {
                        beast::error_code ec;
                        self->ws_.next_layer().socket().shutdown(tcp::socket::shutdown_send, ec);
                        self->ws_.next_layer().socket().close(ec);
                        self->left();
                      });
  }

  void refuse_http(const std::string& why, http::status status = http::status::bad_request) {
    hub_.log(who() + " refused: " + why);
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::content_type, "text/plain");
    res->set(http::field::connection, "close");
    res->body() = why + "\n";
    res->prepare_payload();
    closing_ = true;
    http::async_write(ws_.next_layer(), *res,
                      [self = shared_from_this(), res](beast::error_code, size_t) {
                        beast::error_code ec;
                        self->ws_.next_layer().socket().shutdown(tcp::socket::shutdown_send, ec);
                        self->ws_.next_layer().socket().close(ec);
                        self->left();
                      });
  }

  void read_more() {
    ws_.async_read_some(
        msg_, kReadChunk,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
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
      const auto data = msg_.data();
      hybrid::Bytes b(asio::buffer_size(data));
      asio::buffer_copy(asio::buffer(b), data);
      unread += static_cast<int64_t>(b.size());
      const uint64_t max_unread =
          hub_.opt.max_unread ? hub_.opt.max_unread : 4 * hub_.opt.max_frame_bytes;
      if (static_cast<uint64_t>(unread.load()) > max_unread) {
        msg_.consume(msg_.size());
        return fail("sent " + std::to_string(unread.load()) +
                    " bytes the trainer has not yet taken (max_unread): too far ahead");
      }
      hub_.push(hybrid::Inbound{id_, std::move(b), false});
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
    int id = 0;
    {
      std::lock_guard lock(hub_.mu);
      if (static_cast<int>(hub_.admitted.size()) >= hub_.opt.max_clients) {
        id = -1;
      } else {
        id = static_cast<int>(hub_.admitted.size());
      }
    }
    if (id < 0)
      return fail("the run is full (" + std::to_string(hub_.opt.max_clients) + " clients)",
                  websocket::close_code::try_again_later);
    timer_.cancel();
    --hub_.waiting;
    id_ = id;
    Welcome w = hub_.opt.welcome;
    w.client = id;
    w.max_frame_bytes = hub_.opt.max_frame_bytes;
    // The welcome is queued before the engine can see the client: it goes first.
    queue(std::make_shared<const std::string>(to_json(w)), nullptr);
    {
      std::lock_guard lock(hub_.mu);
      hub_.admitted.push_back(shared_from_this());
      hub_.agents.push_back(h.agent);
    }
    hub_.cv.notify_all();
    hub_.log(who() + " joined (" + h.agent + ")");
  }

  void write_next() {
    writing_ = true;
    const Out& o = out_.front();
    ws_.binary(o.bin != nullptr);
    auto done = [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
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
    ws_.async_close(*close_, [self = shared_from_this()](beast::error_code) { self->left(); });
  }

  // The connection is over: the engine hears it once (if it was admitted).
  void left() {
    if (gone.exchange(true)) return;
    timer_.cancel();
    if (id_ < 0) {
      --hub_.waiting;
      return;
    }
    hub_.push(hybrid::Inbound{id_, {}, true});
  }

  websocket::stream<beast::tcp_stream> ws_;
  HybridEndpoint::Impl& hub_;
  asio::steady_timer timer_;
  std::string peer_;
  beast::flat_buffer buf_;
  beast::flat_buffer msg_;
  std::optional<http::request_parser<http::empty_body>> parser_;
  std::deque<Out> out_;
  uint64_t queued_ = 0;
  int id_ = -1;
  bool accepted_ = false, writing_ = false, closing_ = false, sent_close_ = false;
  std::optional<websocket::close_reason> close_;
};

}  // namespace

void HybridEndpoint::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec != asio::error::operation_aborted && !stopping) accept();
      return;
    }
    if (stopping) return;
    if (waiting >= opt.max_waiting) {
      log("refused a connection: " + std::to_string(waiting) + " are waiting to say hello");
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<Session>(std::move(socket), *this)->start();
    }
    accept();
  });
}

HybridEndpoint::HybridEndpoint(const std::string& listen, EndpointOptions options)
    : impl_(std::make_shared<Impl>()) {
  Impl& m = *impl_;
  m.opt = std::move(options);
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos)
    throw std::runtime_error("--listen: '" + listen + "' is not HOST:PORT");
  m.host = listen.substr(0, colon);
  if (m.host.size() > 2 && m.host.front() == '[') m.host = m.host.substr(1, m.host.size() - 2);
  unsigned long port = 0;
  try {
    size_t used = 0;
    port = std::stoul(listen.substr(colon + 1), &used);
    if (used != listen.size() - colon - 1 || port > 65535) throw std::invalid_argument("port");
  } catch (const std::exception&) {
    throw std::runtime_error("--listen: the port in '" + listen + "' is not 0..65535");
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(m.host, ec);
  if (ec)
    throw std::runtime_error("--listen: '" + m.host + "' is not an IP address (" + ec.message() +
                             ")");
  const tcp::endpoint ep(address, static_cast<unsigned short>(port));
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("--listen: cannot listen on " + listen + ": " + ec.message());
  m.port = m.acceptor.local_endpoint().port();
  m.accept();
  m.io = std::thread([&m] { m.ioc.run(); });
}

HybridEndpoint::~HybridEndpoint() {
  shutdown(std::chrono::milliseconds(0));
}

unsigned short HybridEndpoint::port() const {
  return impl_->port;
}

std::string HybridEndpoint::url() const {
  const bool v6 = impl_->host.find(':') != std::string::npos;
  return "ws://" + (v6 ? "[" + impl_->host + "]" : impl_->host) + ":" +
         std::to_string(impl_->port) + kPath;
}

int HybridEndpoint::wait_for_clients(int n, hybrid::Clock::time_point deadline,
                                     const std::function<void(int)>& progress) {
  std::unique_lock lock(impl_->mu);
  int seen = -1;
  while (true) {
    const int now = static_cast<int>(impl_->admitted.size());
    if (now != seen) {
      seen = now;
      if (progress) {
        lock.unlock();
        progress(now);
        lock.lock();
        continue;
      }
    }
    if (now >= n) return now;
    if (impl_->cv.wait_until(lock, deadline) == std::cv_status::timeout)
      return static_cast<int>(impl_->admitted.size());
  }
}

std::vector<std::string> HybridEndpoint::agents() const {
  std::lock_guard lock(impl_->mu);
  return impl_->agents;
}

int HybridEndpoint::clients() const {
  std::lock_guard lock(impl_->mu);
  return static_cast<int>(impl_->admitted.size());
}

bool HybridEndpoint::send(int client, hybrid::Bytes frame) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard lock(impl_->mu);
    if (client < 0 || client >= static_cast<int>(impl_->admitted.size())) return false;
    s = impl_->admitted[client];
  }
  if (s->gone) return false;
  auto bytes = std::make_shared<hybrid::Bytes>(std::move(frame));
  asio::post(impl_->ioc, [s, bytes] { s->queue(nullptr, bytes); });
  return true;
}

std::optional<hybrid::Inbound> HybridEndpoint::receive(hybrid::Clock::time_point deadline) {
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait_until(lock, deadline, [&] { return !impl_->inbox.empty(); });
  if (impl_->inbox.empty()) return std::nullopt;
  hybrid::Inbound in = std::move(impl_->inbox.front());
  impl_->inbox.pop_front();
  if (!in.left && in.client >= 0 && in.client < static_cast<int>(impl_->admitted.size()))
    impl_->admitted[in.client]->unread -= static_cast<int64_t>(in.frame.size());
  return in;
}

void HybridEndpoint::disconnect(int client) {
  expel(client, "disconnected by the trainer");
}

void HybridEndpoint::expel(int client, const std::string& reason) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard lock(impl_->mu);
    if (client < 0 || client >= static_cast<int>(impl_->admitted.size())) return;
    s = impl_->admitted[client];
  }
  asio::post(impl_->ioc, [s, reason] { s->fail(reason); });
}

void HybridEndpoint::shutdown(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  if (!m.io.joinable()) return;
  const auto until = hybrid::Clock::now() + grace;
  while (m.queued > 0 && hybrid::Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard lock(m.mu);
    all = m.admitted;
  }
  asio::post(m.ioc, [&m, all] {
    m.stopping = true;
    beast::error_code ec;
    m.acceptor.close(ec);
    for (const auto& s : all) s->finish();
  });
  // The closing handshakes, briefly; then whatever is left is dropped.
  const auto close_until = hybrid::Clock::now() + std::min(grace, std::chrono::milliseconds(1000));
  while (hybrid::Clock::now() < close_until) {
    bool open = false;
    for (const auto& s : all) open |= !s->gone;
    if (!open) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  m.ioc.stop();
  m.io.join();
  std::lock_guard lock(m.mu);
  m.admitted.clear();  // the sessions refer to m
}

}  // namespace dnnlab::hybrid_net
