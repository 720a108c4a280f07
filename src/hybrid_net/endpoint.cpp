// The hybrid endpoint's acceptor and its face to the step engine: queues to
// and from the sessions (endpoint_session.hpp), which run on one io thread.
#include "hybrid_net/endpoint.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core/error.hpp>
#include <utility>

#include "hybrid_net/endpoint_impl.hpp"

namespace dnnlab::hybrid_net {
namespace {
namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
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
      // Frames are written whole: Nagle's algorithm would hold each one's
      // last segment until the client's (delayed, up to 40 ms) ACK of the
      // ones before: tens of ms per frame.
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      if (opt.tls)
        start_tls_session(std::move(socket), *this);
      else
        start_plain_session(std::move(socket), *this);
    }
    accept();
  });
}

HybridEndpoint::HybridEndpoint(const std::string& listen, EndpointOptions options)
    : impl_(std::make_shared<Impl>()) {
  Impl& m = *impl_;
  m.opt = std::move(options);
  m.identities = IdentityBook({m.opt.max_identities, m.opt.max_ids});
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
  return (impl_->opt.tls ? "wss://" : "ws://") + (v6 ? "[" + impl_->host + "]" : impl_->host) +
         ":" + std::to_string(impl_->port) + kPath;
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
  std::shared_ptr<Connection> s;
  {
    std::lock_guard lock(impl_->mu);
    if (client < 0 || client >= static_cast<int>(impl_->routed.size())) return false;
    s = impl_->routed[client];
  }
  if (!s || s->gone) return false;
  auto bytes = std::make_shared<hybrid::Bytes>(std::move(frame));
  asio::post(impl_->ioc, [s, bytes] { s->queue(nullptr, bytes); });
  return true;
}

std::optional<hybrid::Inbound> HybridEndpoint::receive(hybrid::Clock::time_point deadline) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  m.cv.wait_until(lock, deadline, [&] { return !m.inbox.empty(); });
  if (m.inbox.empty()) return std::nullopt;
  Impl::Event e = std::move(m.inbox.front());
  m.inbox.pop_front();
  const int c = e.in.client;
  e.from->unread -= static_cast<int64_t>(e.in.frame.size());
  if (e.in.back) m.routed[c] = e.from;
  // The engine has heard that this connection left: let it go (a run may
  // issue thousands of ids; their dead sessions and buffers are not kept).
  if (e.in.left) {
    if (m.routed[c] == e.from) m.routed[c].reset();
    if (m.admitted[c] == e.from) m.admitted[c].reset();
  }
  return std::move(e.in);
}

void HybridEndpoint::disconnect(int client) {
  close_client(client, "disconnected by the trainer", false);
}

void HybridEndpoint::expel(int client, const std::string& reason) {
  close_client(client, reason, true);
}

void HybridEndpoint::close_client(int client, const std::string& reason, bool quarantine) {
  std::shared_ptr<Connection> known, newest;
  {
    std::lock_guard lock(impl_->mu);
    if (client < 0 || client >= static_cast<int>(impl_->admitted.size())) return;
    if (quarantine) impl_->identities.quarantine(client, reason);
    // Both: the identity may have come back on a new link since the engine
    // judged the old one.
    known = impl_->routed[client];
    newest = impl_->admitted[client];
  }
  asio::post(impl_->ioc, [known, newest, reason] {
    for (const auto& s : {known, newest})
      if (s) s->expel(reason);
  });
}

size_t HybridEndpoint::identities() const {
  std::lock_guard lock(impl_->mu);
  return impl_->identities.size();
}

void HybridEndpoint::shutdown(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  if (!m.io.joinable()) return;
  const auto until = hybrid::Clock::now() + grace;
  while (m.queued > 0 && hybrid::Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<std::shared_ptr<Connection>> all;
  {
    std::lock_guard lock(m.mu);
    all = m.admitted;
  }
  asio::post(m.ioc, [&m, all] {
    m.stopping = true;
    beast::error_code ec;
    m.acceptor.close(ec);
    for (const auto& s : all)
      if (s) s->finish();
  });
  // The closing handshakes, briefly; then whatever is left is dropped.
  const auto close_until = hybrid::Clock::now() + std::min(grace, std::chrono::milliseconds(1000));
  while (hybrid::Clock::now() < close_until) {
    bool open = false;
    for (const auto& s : all) open |= s && !s->gone;
    if (!open) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  m.ioc.stop();
  m.io.join();
  std::lock_guard lock(m.mu);
  m.admitted.clear();  // the sessions refer to m
  m.routed.clear();
  m.inbox.clear();
}

}  // namespace dnnlab::hybrid_net
