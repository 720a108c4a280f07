// The two WebSocket sessions, templates on the stream (plain or TLS):
// /api/events readers and /join browser workers. Private to the server.
#pragma once
#include "server/gateway_wire.hpp"
#include "server/server_impl.hpp"

namespace dnnlab::server {

// The stream under a WebSocket session: it first yields the bytes the HTTP
// parser read past the upgrade request, then reads its socket. A client may
// send its first frame (a hello, {"after": ID}) in the same segment as the
// handshake; without this those bytes were dropped and the hello unanswered.
template <class Next>
class ReadAheadStream {
 public:
  using next_layer_type = Next;
  using executor_type = typename Next::executor_type;

  ReadAheadStream(Next&& next, beast::flat_buffer ahead)
      : next_(std::move(next)), ahead_(std::move(ahead)) {}

  executor_type get_executor() noexcept { return next_.get_executor(); }
  Next& next_layer() noexcept { return next_; }
  const Next& next_layer() const noexcept { return next_; }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    if (ahead_.size() == 0) return next_.async_read_some(buffers, std::forward<Token>(token));
    return asio::async_initiate<Token, void(beast::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          const std::size_t n = asio::buffer_copy(b, ahead_.data());
          ahead_.consume(n);
          // Completes later, never inside the initiating call (asio's rule).
          asio::post(next_.get_executor(),
                     beast::bind_front_handler(std::move(handler), beast::error_code{}, n));
        },
        token, buffers);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return next_.async_write_some(buffers, std::forward<Token>(token));
  }

 private:
  Next next_;
  beast::flat_buffer ahead_;
};

// The WebSocket closing handshake's teardown is the wrapped stream's.
template <class Next>
void teardown(beast::role_type role, ReadAheadStream<Next>& s, beast::error_code& ec) {
  using beast::websocket::teardown;
  teardown(role, s.next_layer(), ec);
}
template <class Next, class Handler>
void async_teardown(beast::role_type role, ReadAheadStream<Next>& s, Handler&& handler) {
  using beast::websocket::async_teardown;
  async_teardown(role, s.next_layer(), std::forward<Handler>(handler));
}

// One WebSocket client of /api/events: store events (and throughput) as text
// frames. A client catching up (?after= or {"after": ID}) is fed from the
// store a page at a time as its socket drains; live events are queued, up to
// max_send_queue bytes, past which the client is too slow and is closed.
template <class Stream>
class EventSession final : public EventSink,
                           public std::enable_shared_from_this<EventSession<Stream>> {
 public:
  // after >= 0: replay the events after that id first (the URL's ?after=).
  EventSession(Stream stream, beast::flat_buffer read_ahead, std::shared_ptr<Server::Impl> impl,
               std::int64_t after, bool private_fields)
      : ws_(std::move(stream), std::move(read_ahead)),
        impl_(std::move(impl)),
        cursor_(impl_->last_event_id),
        private_fields_(private_fields) {
    if (after >= 0) {
      cursor_ = after;
      catching_up_ = true;
    }
  }

  void hold(std::shared_ptr<ConnectionSlot> slot) { slot_ = std::move(slot); }

  void run(http::request<http::string_body> req) {
    impl_->event_sessions[this] = this->weak_from_this();
    impl_->event_readers = impl_->event_sessions.size();
    // A ping at half the idle time; a stream that sends nothing back (no
    // pong) for the whole of it is closed and its slot freed.
    auto timeout = websocket::stream_base::timeout::suggested(beast::role_type::server);
    timeout.idle_timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(impl_->opt.event_idle_seconds));
    timeout.keep_alive_pings = true;
    ws_.set_option(timeout);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "dnnlab"); }));
    ws_.read_message_max(kMaxEventFrameBytes);
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
    if (catching_up_) {
      // The page being read may have been read before this event was
      // written: catching up ends only past it.
      skipped_ = std::max(skipped_, id);
      return;
    }
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

  bool private_fields() const override { return private_fields_; }

  ~EventSession() { finish(); }

 private:
  void finish() {
    if (impl_) {
      auto it = impl_->event_sessions.find(this);
      if (it != impl_->event_sessions.end()) impl_->event_sessions.erase(it);
      impl_->event_readers = impl_->event_sessions.size();
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
  // Read on the events lane (its store), queued back here.
  void next_page() {
    fetching_ = true;
    Server::Impl* impl = impl_.get();
    impl->events_lane->post([self = this->shared_from_this(), impl, after = cursor_,
                             pf = private_fields_, ex = ws_.get_executor()] {
      if (impl->events_lane->closing()) return;
      std::vector<std::string> frames;
      std::int64_t last = after;
      std::string error;
      try {
        for (const auto& e : impl->events_store->events_since(after, kEventPage)) {
          frames.push_back(Api::event_json(e, pf).dump());
          last = e.id;
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      asio::post(ex, [self, frames = std::move(frames), last, error = std::move(error)]() mutable {
        self->fetching_ = false;
        if (!error.empty()) {
          log_error("events", error);
          return self->close();
        }
        if (self->closed_) return;
        if (last > self->cursor_) {  // a newer {"after"} since then asks again
          for (auto& f : frames) {
            self->queued_bytes_ += f.size();
            self->out_.push_back(std::move(f));
          }
          self->cursor_ = last;
        }
        if (frames.size() < kEventPage && self->skipped_ <= self->cursor_)
          self->catching_up_ = false;
        self->flush();
      });
    });
  }

  void flush() {
    if (!open_ || writing_ || closed_ || fetching_) return;
    if (out_.empty() && catching_up_) return next_page();
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

  websocket::stream<ReadAheadStream<Stream>> ws_;
  std::shared_ptr<Server::Impl> impl_;
  std::shared_ptr<ConnectionSlot> slot_;
  beast::flat_buffer in_;
  std::deque<std::string> out_;
  std::size_t queued_bytes_ = 0;
  std::int64_t cursor_;  // the newest event id queued (or skipped as already sent)
  bool private_fields_;  // the reader holds a token
  bool catching_up_ = false;
  bool fetching_ = false;     // a page is being read on the events lane
  std::int64_t skipped_ = 0;  // the newest live event skipped while catching up
  bool open_ = false, writing_ = false, closed_ = false;
};

// One browser worker on /join: frames go to the gateway on its lane, its
// replies come back here in order. The io thread never waits for the
// gateway: a heartbeat is answered at once (the gateway still checks and
// records it), and up to kMaxFramesInFlight frames may wait on the lane
// before the session stops reading.
template <class Stream>
class JoinSession final : public JoinSink,
                          public std::enable_shared_from_this<JoinSession<Stream>> {
 public:
  static constexpr int kMaxFramesInFlight = 8;

  JoinSession(Stream stream, beast::flat_buffer read_ahead, std::shared_ptr<Server::Impl> impl)
      : ws_(std::move(stream), std::move(read_ahead)), impl_(std::move(impl)) {}

  void hold(std::shared_ptr<ConnectionSlot> slot) { slot_ = std::move(slot); }

  void run(http::request<http::string_body> req) {
    beast::error_code ec;
    auto ep = beast::get_lowest_layer(ws_).socket().remote_endpoint(ec);
    id_ = impl_->next_join_id++;
    impl_->join_sessions[id_] = this->weak_from_this();
    max_frame_ = impl_->opt.gateway.max_hello_bytes;
    Server::Impl* impl = impl_.get();
    impl->gateway_lane->post(
        [impl, id = id_,
         remote = ec ? std::string("?")
                     : ep.address().to_string() + ":" + std::to_string(ep.port())]() mutable {
          impl->gateway->open(id, std::move(remote));
        });
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "dnnlab"); }));
    ws_.read_message_max(max_frame_);
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
    // After every frame already handed to the lane: its ticket goes back.
    Server::Impl* impl = impl_.get();
    if (impl->gateway_lane)
      impl->gateway_lane->post([impl, id = id_] { impl->gateway->close(id); });
  }

  // {"v":1,"type":"heartbeat",...}: answered here, checked on the lane.
  static bool is_heartbeat(const std::string& frame) {
    if (frame.size() > 512) return false;
    json msg = json::parse(frame, nullptr, false);
    if (msg.is_discarded() || !msg.is_object()) return false;
    auto v = msg.find("v"), type = msg.find("type");
    return v != msg.end() && *v == wire::kVersion && type != msg.end() && *type == "heartbeat";
  }

  void read() {
    ws_.read_message_max(max_frame_);
    reading_ = true;
    ws_.async_read(in_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      self->reading_ = false;
      if (ec == websocket::error::message_too_big) {
        // Beast has already sent close 1009; end the session.
        return self->finish();
      }
      if (ec) return self->abort();
      if (self->closing_ || self->finished_) return;
      try {
        self->hand_on();
      } catch (const std::exception& e) {
        log_error("join", e.what());
        return self->abort();
      }
      if (self->in_flight_ < kMaxFramesInFlight) self->read();
    });
  }

  // The frame just read goes to the gateway's lane; the reply comes back
  // to answered().
  void hand_on() {
    const bool binary = ws_.got_binary();
    std::string frame = beast::buffers_to_string(in_.data());
    in_.consume(in_.size());
    const bool answered_here = !binary && greeted_ && is_heartbeat(frame);
    if (answered_here) apply(GatewayReply{{wire::frame({{"type", "heartbeat"}})}});
    ++in_flight_;
    Server::Impl* impl = impl_.get();
    impl->gateway_lane->post([self = this->shared_from_this(), impl, id = id_, binary,
                              answered_here, ex = ws_.get_executor(),
                              frame = std::move(frame)]() mutable {
      if (impl->gateway_lane->closing()) return;
      GatewayReply r =
          binary ? impl->gateway->on_binary(id, frame) : impl->gateway->on_text(id, frame);
      // The heartbeat's echo was sent already; a close (the check failed) is not.
      if (answered_here && !r.close) r.frames.clear();
      const std::size_t max = impl->gateway->max_frame(id);
      const bool greeted = impl->gateway->greeted(id);
      asio::post(ex, [self = std::move(self), r = std::move(r), max, greeted]() mutable {
        self->answered(std::move(r), max, greeted);
      });
    });
  }

  void answered(GatewayReply r, std::size_t max_frame, bool greeted) {
    --in_flight_;
    max_frame_ = max_frame;
    greeted_ = greeted;
    apply(std::move(r));
    if (!reading_ && open_ && !closing_ && !finished_ && in_flight_ < kMaxFramesInFlight) read();
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

  websocket::stream<ReadAheadStream<Stream>> ws_;
  std::shared_ptr<Server::Impl> impl_;
  std::shared_ptr<ConnectionSlot> slot_;
  std::size_t queued_bytes_ = 0;
  Gateway::ClientId id_ = 0;
  std::size_t max_frame_ = 0;  // the gateway's limit for this client, as last heard
  bool greeted_ = false;       // the gateway accepted its hello
  int in_flight_ = 0;          // frames handed to the gateway lane, not answered yet
  bool reading_ = false;
  beast::flat_buffer in_;
  std::deque<std::string> out_;
  websocket::close_reason reason_;
  bool open_ = false, writing_ = false, closing_ = false, close_sent_ = false, finished_ = false;
};

}  // namespace dnnlab::server
