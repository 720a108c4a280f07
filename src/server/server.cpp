// The network side of the server: the acceptor, the connection limits and the
// timers (event polling, coordinators), all on one io_context thread; the
// sessions are in http_session.hpp and ws_sessions.hpp (instantiated in
// session_*.cpp), Server::Impl in server_impl.hpp. Every handler catches everything: a malformed
// request ends its own connection at most, never the server.
#include "server/server.hpp"

#include "server/server_impl.hpp"

namespace dnnlab::server {

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

std::size_t max_event_streams(const ServerOptions& o) {
  return std::max<std::size_t>(1, o.max_connections / 2);
}

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
          start_http_session(TlsStream(std::move(socket), *self->tls), self, std::move(slot));
        else
          start_http_session(PlainStream(std::move(socket)), self, std::move(slot));
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

Lane::Lane(std::string name)
    : name_(std::move(name)), guard_(asio::make_work_guard(ctx_)), thread_([this] {
        for (;;) {
          try {
            ctx_.run();
            return;
          } catch (const std::exception& e) {
            log_error(name_, e.what());  // a handler threw: the lane goes on
          }
        }
      }) {}

void Lane::shutdown(bool drain) {
  if (!thread_.joinable()) return;
  closing_ = true;
  guard_.reset();
  if (!drain) ctx_.stop();
  thread_.join();
  // What is still queued only drops what it holds (it sees closing()).
  ctx_.restart();
  ctx_.poll();
}

std::int64_t Server::Impl::newest_event_id(store::ResultStore& st) {
  std::int64_t id = 0;
  for (;;) {
    auto events = st.events_since(id, 10000);
    if (events.empty()) return id;
    id = events.back().id;
  }
}

void Server::Impl::broadcast(const std::string& frame, const std::string& public_frame,
                             std::int64_t id) {
  if (id > 0) last_event_id = std::max(last_event_id, id);
  std::vector<std::shared_ptr<EventSink>> live;
  for (auto& [p, w] : event_sessions)
    if (auto s = w.lock()) live.push_back(std::move(s));
  for (auto& s : live) s->deliver(s->private_fields() ? frame : public_frame, id);
}

// On the events lane: reads with its own store, hands the frames to the io thread.
void Server::Impl::on_event_poll() {
  if (events_lane->closing()) return;
  auto pause = std::chrono::duration_cast<Clock::duration>(kTickPeriod);
  try {
    struct Out {
      std::string frame, public_frame;
      std::int64_t id;
    };
    std::vector<Out> out;
    for (;;) {
      auto events = events_store->events_since(polled_event_id, 1000);
      for (const auto& e : events) {
        polled_event_id = e.id;
        if (event_readers == 0) continue;
        std::string frame = Api::event_json(e, true).dump();
        std::string pub =
            Api::event_has_private_fields(e) ? Api::event_json(e, false).dump() : frame;
        out.push_back({std::move(frame), std::move(pub), e.id});
      }
      if (events.size() < 1000) break;
    }
    auto now = Clock::now();
    if (now - last_throughput >= std::chrono::seconds(1)) {
      last_throughput = now;
      if (event_readers > 0 && api->anything_running(*events_store)) {
        const std::string frame = json{{"id", nullptr},
                                       {"time", unix_now()},
                                       {"type", "throughput"},
                                       {"data", api->throughput(*events_store)}}
                                      .dump();
        out.push_back({frame, frame, 0});
      }
    }
    const std::int64_t newest = polled_event_id;
    // Nothing new: nothing for the io thread (an idle server wakes it never).
    if (!out.empty() || newest != handed_event_id) {
      handed_event_id = newest;
      asio::post(io, [this, out = std::move(out), newest] {
        if (stopped) return;
        last_event_id = std::max(last_event_id, newest);
        for (const auto& o : out) broadcast(o.frame, o.public_frame, o.id);
      });
    }
  } catch (const std::exception& e) {
    log_error("event poll", e.what());
    if (dynamic_cast<const store::StoreUnavailableError*>(&e)) pause = kStoreDownPause;
  }
  event_timer->expires_after(pause);
  event_timer->async_wait([this](beast::error_code ec) {
    if (!ec) on_event_poll();
  });
}

// On the runner lane.
void Server::Impl::on_tick() {
  if (runner_lane->closing()) return;
  auto pause = std::chrono::duration_cast<Clock::duration>(kTickPeriod);
  try {
    runner->tick();
  } catch (const std::exception& e) {
    log_error("coordinators", e.what());
    if (dynamic_cast<const store::StoreUnavailableError*>(&e)) pause = kStoreDownPause;
  }
  tick_timer->expires_after(pause);
  tick_timer->async_wait([this](beast::error_code ec) {
    if (!ec) on_tick();
  });
}

// On the gateway lane: what poll() decided goes to the sessions on the io thread.
void Server::Impl::on_gateway_poll() {
  if (gateway_lane->closing()) return;
  auto pause = std::chrono::duration_cast<Clock::duration>(kTickPeriod);
  try {
    auto out = gateway->poll();
    if (!out.empty())
      asio::post(io, [this, out = std::move(out)]() mutable {
        for (auto& [id, reply] : out) {
          auto it = join_sessions.find(id);
          if (it != join_sessions.end())
            if (auto js = it->second.lock()) js->apply(std::move(reply));
        }
      });
  } catch (const std::exception& e) {
    log_error("gateway", e.what());
    if (dynamic_cast<const store::StoreUnavailableError*>(&e)) pause = kStoreDownPause;
  }
  gateway_timer->expires_after(pause);
  gateway_timer->async_wait([this](beast::error_code ec) {
    if (!ec) on_gateway_poll();
  });
}

void Server::Impl::stop_lanes() {
  // The gateway's queued work runs (closed connections give their tickets
  // back); its timer sees closing() and stops re-arming.
  if (gateway_lane) {
    gateway_lane->post([this] { gateway_timer->cancel(); });
    gateway_lane->shutdown(/*drain=*/true);
  }
  if (runner_lane) runner_lane->shutdown();
  if (events_lane) events_lane->shutdown();
}

Server::Server(asio::io_context& io, ServerOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {
  Impl& s = *impl_;
  if (s.opt.store_url.empty()) throw std::invalid_argument("store: a store URL is needed");
  if (s.opt.broker_url.empty()) s.opt.broker_url = s.opt.store_url;
  auto [host, port] = parse_listen(s.opt.listen);
  s.host = host;
  store::StoreOptions store_options;
  store_options.reconnect_seconds = s.opt.store_wait_seconds;
  // Connections per thread that uses them (one shared connection where
  // queue and store are the same embedded file).
  db::Connections io_shared, runner_shared, events_shared, gateway_shared;
  s.store = store::open_result_store(s.opt.store_url, &io_shared, store_options);
  s.runner_queue = queue::open_task_queue(s.opt.broker_url, {}, &runner_shared);
  s.runner_store = store::open_result_store(s.opt.store_url, &runner_shared, store_options);
  s.events_store = store::open_result_store(s.opt.store_url, &events_shared, store_options);
  s.gateway_queue = queue::open_task_queue(s.opt.broker_url, {}, &gateway_shared);
  s.gateway_store = store::open_result_store(s.opt.store_url, &gateway_shared, store_options);
  s.runner =
      std::make_unique<ExperimentRunner>(*s.runner_store, *s.runner_queue, s.opt.run_coordinators);
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
  ac.data_root = s.opt.data_dir;
  ac.gateway_file = [&s](std::string_view path) -> std::optional<ServedFile> {
    if (!s.gateway) return std::nullopt;
    auto f = s.gateway->asset(path);
    if (!f) return std::nullopt;
    return ServedFile{f->content_type, f->body};
  };
  ac.worker_backends = [&s]() -> nlohmann::json {
    return s.gateway ? s.gateway->worker_backends() : nlohmann::json::object();
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
  s.gateway = std::make_unique<Gateway>(*s.gateway_store, *s.gateway_queue, go);

  // Before binding: a bad certificate or key stops the start, naming the file.
  if (!s.opt.tls_cert.empty() || !s.opt.tls_key.empty()) {
    if (s.opt.tls_cert.empty()) throw std::invalid_argument("--tls-key needs --tls-cert too");
    if (s.opt.tls_key.empty()) throw std::invalid_argument("--tls-cert needs --tls-key too");
    s.tls = tls::server_context(s.opt.tls_cert, s.opt.tls_key);
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
  if (!impl_) return;
  if (!impl_->stopped) {
    impl_->stopped = true;
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->accept_timer.cancel();
  }
  // Reader jobs hand their sessions back to the io thread; none is left here.
  if (impl_->pool) impl_->pool->join();
  if (impl_->work_pool) impl_->work_pool->join();
  impl_->stop_lanes();
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
  s.last_event_id = s.polled_event_id = s.handed_event_id = s.newest_event_id(*s.events_store);
  s.runner->resume_running();
  s.accept();
  s.runner_lane = std::make_unique<Lane>("runner");
  s.events_lane = std::make_unique<Lane>("events");
  s.gateway_lane = std::make_unique<Lane>("gateway");
  s.tick_timer = std::make_unique<asio::steady_timer>(s.runner_lane->context());
  s.event_timer = std::make_unique<asio::steady_timer>(s.events_lane->context());
  s.gateway_timer = std::make_unique<asio::steady_timer>(s.gateway_lane->context());
  Impl* p = &s;
  // The runner ticks without coordinators too: it samples the figures.
  s.runner_lane->post([p] { p->on_tick(); });
  s.events_lane->post([p] { p->on_event_poll(); });
  s.gateway_lane->post([p] { p->on_gateway_poll(); });
}

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  beast::error_code ec;
  s.acceptor.close(ec);
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
