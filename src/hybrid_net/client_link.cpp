// The client's WebSocket, plain or over TLS: a synchronous handshake, hello
// and welcome, then an io thread with one read loop and one write queue.
#include "hybrid_net/client_link.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <type_traits>
#include <utility>

#include "tls/tls.hpp"

namespace dnnlab::hybrid_net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// What the caller's thread and the io thread share; the stream is in Link.
struct ClientLink::Impl {
  asio::io_context ioc;
  std::shared_ptr<asio::ssl::context> tls;  // wss:// only; outlives the stream
  std::thread io;
  Welcome welcome;
  // Shared with the caller's thread.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<hybrid::Bytes> inbox;
  bool is_closed = false;
  std::string reason;  // the server's error message or close reason
  bool lost = false;   // ended without the server's word (ClientLink::lost)
  // The io thread's alone.
  std::deque<std::shared_ptr<hybrid::Bytes>> out;
  bool closing = false;

  virtual ~Impl() = default;
  virtual void read() = 0;
  virtual void write_next() = 0;
  virtual void close_now() = 0;

  // `dropped`: the connection failed with no close frame from the server.
  void end(const std::string& why, bool dropped = false) {
    {
      std::lock_guard lock(mu);
      if (!is_closed) lost = dropped && reason.empty();  // an error message is the server's word
      if (!is_closed && reason.empty()) reason = why;    // "": a normal close
      is_closed = true;
    }
    cv.notify_all();
  }
};

namespace {

template <class Stream>
struct Link final : ClientLink::Impl {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
  websocket::stream<Stream> ws;
  beast::flat_buffer in;

  explicit Link(std::shared_ptr<asio::ssl::context> ctx) : ws(make(ioc, ctx)) {
    tls = std::move(ctx);
  }
  static websocket::stream<Stream> make(asio::io_context& ioc,
                                        const std::shared_ptr<asio::ssl::context>& ctx) {
    if constexpr (kTls)
      return websocket::stream<Stream>(ioc, *ctx);
    else
      return websocket::stream<Stream>(ioc);
  }

  // Connect, (TLS handshake,) WebSocket handshake, hello, welcome; on the
  // caller's thread, all within `timeout`.
  void open(const std::string& url, const WsUrl& u, const Hello& h,
            std::chrono::milliseconds timeout) {
    beast::error_code ec;
    tcp::resolver resolver(ioc);
    const auto found = resolver.resolve(u.host, u.port, ec);
    if (ec) throw std::runtime_error("--join: cannot resolve " + u.host + ": " + ec.message());
    auto& tcp_stream = beast::get_lowest_layer(ws);
    tcp_stream.expires_after(timeout);
    tcp_stream.connect(found, ec);
    if (ec) throw std::runtime_error("--join: cannot connect to " + url + ": " + ec.message());
    tcp_stream.socket().set_option(tcp::no_delay(true), ec);
    if constexpr (kTls) {
      tls::expect_host(ws.next_layer().native_handle(), u.host);
      ws.next_layer().handshake(asio::ssl::stream_base::client, ec);
      if (ec) {
        const std::string why = tls::verify_error(ws.next_layer().native_handle());
        if (!why.empty())
          throw std::runtime_error(
              "--join: the certificate of " + u.host + ":" + u.port +
              " failed verification: " + why +
              " (trust its CA or the self-signed certificate itself with --tls-ca FILE; "
              "the certificate must name " +
              u.host + ")");
        throw std::runtime_error("--join: TLS handshake with " + u.host + ":" + u.port +
                                 " failed: " + ec.message() +
                                 " (does it serve wss://? a server without --tls-cert serves "
                                 "ws://)");
      }
    }
    websocket::response_type res;
    bool declined = false;  // the server answered the upgrade with another status
    try {
      // Asynchronously: Boost 1.74's synchronous handshake drops a refusal's
      // response, whose body says why.
      beast::error_code hec;
      ws.async_handshake(res, u.host + ":" + u.port, u.path,
                         [&hec](beast::error_code e) { hec = e; });
      ioc.run();
      ioc.restart();
      declined = hec == websocket::error::upgrade_declined;
      if (hec) throw beast::system_error(hec);
      ws.text(true);
      ws.write(asio::buffer(to_json(h)));
      ws.read_message_max(1 << 22);
      ws.read(in);
    } catch (const beast::system_error& e) {
      const auto& r = ws.reason();
      std::string body = res.body();
      while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
      const std::string where = "--join: " + url + ": ";
      if (!r.reason.empty())
        throw Refused(where + "the server closed: " + std::string(r.reason.data(), r.reason.size()),
                      r.code);
      // Only a response that was read: `res` starts as 200, which a
      // connection lost during the handshake leaves there.
      if (declined && res.result() != http::status::switching_protocols)
        throw Refused(where + "the server refused the WebSocket (" +
                          std::to_string(res.result_int()) + ")" +
                          (body.empty() ? "" : ": " + body.substr(0, 300)),
                      static_cast<int>(res.result_int()));
      throw std::runtime_error(where + e.code().message());
    }
    if (!ws.got_text())
      throw ProtocolError("--join: the server's first message is not the text welcome");
    const std::string text = beast::buffers_to_string(in.data());
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object() && j.value("type", nlohmann::json()) == "error") {
      // A refusal: its close frame follows, with the code that says whether
      // to try again (1013) or not.
      in.consume(in.size());
      beast::error_code ec;
      ws.read(in, ec);
      try {
        parse_welcome(text);
      } catch (const ProtocolError& e) {
        throw Refused("--join: " + url + ": " + e.what(),
                      ec == websocket::error::closed ? static_cast<int>(ws.reason().code) : 0);
      }
    }
    welcome = parse_welcome(text);
    in.consume(in.size());
    tcp_stream.expires_never();
    ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
    ws.read_message_max(welcome.max_frame_bytes);
  }

  void read() override {
    ws.async_read(in, [this](beast::error_code ec, size_t) {
      if (ec) {  // a normal close (the run is over, or our own) is no error
        const auto& r = ws.reason();
        if (ec == websocket::error::closed && r.code == websocket::close_code::normal)
          return end("");
        if (ec == websocket::error::closed)
          return end(r.reason.empty() ? "closed by the server (code " + std::to_string(r.code) + ")"
                                      : std::string(r.reason.data(), r.reason.size()));
        return end(ec.message(), !closing);  // no close frame: the link is lost
      }
      if (ws.got_text()) {  // an error message from the server; its close follows
        std::lock_guard lock(mu);
        try {
          parse_welcome(beast::buffers_to_string(in.data()));
        } catch (const ProtocolError& e) {
          reason = e.what();
        }
      } else {
        // One copy out of the (contiguous) flat buffer, not zeroed first.
        const asio::const_buffer data = in.data();
        const auto* p = static_cast<const uint8_t*>(data.data());
        hybrid::Bytes b(p, p + data.size());
        {
          std::lock_guard lock(mu);
          inbox.push_back(std::move(b));
        }
        cv.notify_all();
      }
      in.consume(in.size());
      read();
    });
  }

  void write_next() override {
    ws.binary(true);
    ws.async_write(asio::buffer(*out.front()), [this](beast::error_code ec, size_t) {
      out.pop_front();
      if (ec) return;
      if (!out.empty()) return write_next();
      if (closing) close_now();
    });
  }

  void close_now() override {
    ws.async_close(websocket::close_code::normal, [this](beast::error_code) { end(""); });
  }
};

}  // namespace

ClientLink::ClientLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<ClientLink> ClientLink::join(const std::string& url, const std::string& token,
                                             const std::string& tls_ca,
                                             std::chrono::milliseconds timeout,
                                             const Identity& identity) {
  const WsUrl u = parse_ws_url(url);
  Hello h;
  h.token = token;
  h.identity = identity;
  std::unique_ptr<Impl> m;
  if (u.tls) {
    auto link = std::make_unique<Link<TlsStream>>(tls::client_context(tls_ca, "--tls-ca"));
    link->open(url, u, h, timeout);
    m = std::move(link);
  } else {
    if (!tls_ca.empty())
      throw std::invalid_argument("--tls-ca: " + url +
                                  " is not a wss:// URL; a CA is for TLS only");
    auto link = std::make_unique<Link<PlainStream>>(nullptr);
    link->open(url, u, h, timeout);
    m = std::move(link);
  }
  Impl* raw = m.get();
  raw->read();
  raw->io = std::thread([raw] { raw->ioc.run(); });
  return std::unique_ptr<ClientLink>(new ClientLink(std::move(m)));
}

ClientLink::~ClientLink() {
  close();
  // The close handshake, briefly.
  const auto until = hybrid::Clock::now() + std::chrono::milliseconds(1000);
  while (!closed() && hybrid::Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->ioc.stop();
  if (impl_->io.joinable()) impl_->io.join();
}

const Welcome& ClientLink::welcome() const {
  return impl_->welcome;
}

Identity ClientLink::identity() const {
  return {impl_->welcome.client, impl_->welcome.secret};
}

std::string ClientLink::close_reason() const {
  std::lock_guard lock(impl_->mu);
  return impl_->reason;
}

bool ClientLink::lost() const {
  std::lock_guard lock(impl_->mu);
  return impl_->lost;
}

bool ClientLink::send(hybrid::Bytes frame) {
  if (closed()) return false;
  auto b = std::make_shared<hybrid::Bytes>(std::move(frame));
  Impl* m = impl_.get();
  asio::post(m->ioc, [m, b] {
    if (m->closing) return;
    m->out.push_back(b);
    if (m->out.size() == 1) m->write_next();
  });
  return true;
}

std::optional<hybrid::Bytes> ClientLink::receive(hybrid::Clock::time_point deadline) {
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait_until(lock, deadline, [&] { return impl_->is_closed || !impl_->inbox.empty(); });
  if (impl_->inbox.empty()) return std::nullopt;
  hybrid::Bytes b = std::move(impl_->inbox.front());
  impl_->inbox.pop_front();
  return b;
}

bool ClientLink::closed() const {
  std::lock_guard lock(impl_->mu);
  return impl_->is_closed;
}

void ClientLink::close() {
  Impl* m = impl_.get();
  asio::post(m->ioc, [m] {
    if (m->closing) return;
    m->closing = true;
    if (m->out.empty()) m->close_now();
  });
}

}  // namespace dnnlab::hybrid_net
