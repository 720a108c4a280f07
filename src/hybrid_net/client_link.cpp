// The client's WebSocket: a synchronous hello and welcome, then an io thread
// with one read loop and one write queue.
#include "hybrid_net/client_link.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace dnnlab::hybrid_net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

struct ClientLink::Impl {
  asio::io_context ioc;
  websocket::stream<beast::tcp_stream> ws{ioc};
  std::thread io;
  Welcome welcome;
  beast::flat_buffer in;
  // Shared with the caller's thread.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<hybrid::Bytes> inbox;
  bool is_closed = false;
  std::string reason;  // the server's error message or close reason
  // The io thread's alone.
  std::deque<std::shared_ptr<hybrid::Bytes>> out;
  bool closing = false;

  void end(const std::string& why) {
    {
      std::lock_guard lock(mu);
      if (!is_closed && reason.empty()) reason = why;  // "": a normal close
      is_closed = true;
    }
    cv.notify_all();
  }

  void read() {
    ws.async_read(in, [this](beast::error_code ec, size_t) {
      if (ec) {  // a normal close (the run is over, or our own) is no error
        const auto& r = ws.reason();
        if (ec == websocket::error::closed && r.code == websocket::close_code::normal)
          return end("");
        return end(r.reason.empty() ? ec.message() : std::string(r.reason.data(), r.reason.size()));
      }
      if (ws.got_text()) {  // an error message from the server; its close follows
        std::lock_guard lock(mu);
        try {
          parse_welcome(beast::buffers_to_string(in.data()));
        } catch (const ProtocolError& e) {
          reason = e.what();
        }
      } else {
        const auto data = in.data();
        hybrid::Bytes b(asio::buffer_size(data));
        asio::buffer_copy(asio::buffer(b), data);
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

  void write_next() {
    ws.binary(true);
    ws.async_write(asio::buffer(*out.front()), [this](beast::error_code ec, size_t) {
      out.pop_front();
      if (ec) return;
      if (!out.empty()) return write_next();
      if (closing) close_now();
    });
  }

  void close_now() {
    ws.async_close(websocket::close_code::normal, [this](beast::error_code) { end(""); });
  }
};

ClientLink::ClientLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<ClientLink> ClientLink::join(const std::string& url, const std::string& token,
                                             std::chrono::milliseconds timeout) {
  const WsUrl u = parse_ws_url(url);
  auto m = std::make_unique<Impl>();
  beast::error_code ec;
  tcp::resolver resolver(m->ioc);
  const auto found = resolver.resolve(u.host, u.port, ec);
  if (ec) throw std::runtime_error("--join: cannot resolve " + u.host + ": " + ec.message());
  auto& tcp_stream = beast::get_lowest_layer(m->ws);
  tcp_stream.expires_after(timeout);
  tcp_stream.connect(found, ec);
  if (ec) throw std::runtime_error("--join: cannot connect to " + url + ": " + ec.message());
  tcp_stream.socket().set_option(tcp::no_delay(true), ec);
  try {
    m->ws.handshake(u.host + ":" + u.port, u.path);
    m->ws.text(true);
    Hello h;
    h.token = token;
    m->ws.write(asio::buffer(to_json(h)));
    m->ws.read_message_max(1 << 22);
    m->ws.read(m->in);
  } catch (const beast::system_error& e) {
    const auto& r = m->ws.reason();
    throw std::runtime_error(
        "--join: " + url + ": " +
        (r.reason.empty() ? e.code().message()
                          : "the server closed: " + std::string(r.reason.data(), r.reason.size())));
  }
  if (!m->ws.got_text())
    throw ProtocolError("--join: the server's first message is not the text welcome");
  m->welcome = parse_welcome(beast::buffers_to_string(m->in.data()));
  m->in.consume(m->in.size());
  tcp_stream.expires_never();
  m->ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
  m->ws.read_message_max(m->welcome.max_frame_bytes);
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

std::string ClientLink::close_reason() const {
  std::lock_guard lock(impl_->mu);
  return impl_->reason;
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
