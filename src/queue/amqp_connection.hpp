// One RabbitMQ connection (rabbitmq-c) owned as a handle, with the two
// channels AmqpTaskQueue uses: kConsume (transactional: leases, acks,
// republishing on nack) and kPublish (publisher confirms). Internal to
// src/queue.
//
//   AmqpConnection c(AmqpUrl::parse("amqp://guest:guest@127.0.0.1/%2f"), 1, 30);
//   c.declare_queue("exp-7");   // durable quorum queue, returns ready count
//   c.check(amqp_basic_ack(c.get(), kConsume, tag, 0), "ack");
#pragma once

#include <amqp.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace dnnlab::queue {

// The socket died, the broker went away or closed a channel: the
// connection is unusable, its deliveries will be redelivered.
class AmqpConnectionLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The broker refused a request (a queue declared elsewhere with other
// arguments, a missing vhost, wrong credentials), or amqps:// cannot trust it
// (a certificate that does not verify, a port that does not speak TLS):
// `what()` names the queue or the host (never the password) and the reason.
// Not worth retrying.
class AmqpError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The parts of
// amqp[s]://user:pass@host:port/vhost?prefetch=N&prefetch_max=M&heartbeat=S&cacert=PATH.
struct AmqpUrl {
  std::string user = "guest", password = "guest", host = "localhost", vhost = "/";
  int port = 5672;
  bool tls = false;
  int prefetch = 1;  // the consumer's prefetch, and the least want_prefetch() sets
  // The most want_prefetch() sets; 0 (not given): max(prefetch, 32).
  int prefetch_max = 0;
  int heartbeat = 0;
  std::string cacert;
  // Throws std::invalid_argument naming the part that is wrong.
  static AmqpUrl parse(std::string_view url);
};

class AmqpConnection {
 public:
  static constexpr amqp_channel_t kConsume = 1;
  static constexpr amqp_channel_t kPublish = 2;

  // Opens the socket, logs in, opens both channels, sets prefetch on kConsume.
  // Throws AmqpConnectionLost (unreachable) or AmqpError (refused: login,
  // vhost, TLS certificate or handshake). amqps:// trusts `cacert`, else the
  // system's CAs, and wants the URL's host (DNS name or IP address) in the
  // certificate.
  AmqpConnection(const AmqpUrl& url, double rpc_timeout_seconds);
  ~AmqpConnection();
  AmqpConnection(const AmqpConnection&) = delete;
  AmqpConnection& operator=(const AmqpConnection&) = delete;

  amqp_connection_state_t get() const { return state_.get(); }
  // False once an error was seen: the owner drops the connection.
  bool healthy() const { return healthy_; }
  // Whether this process opened it (false in a child after fork()).
  bool opened_here() const;
  void mark_broken() { healthy_ = false; }

  // Throws on a failed RPC (the last synchronous call): AmqpConnectionLost
  // for socket/timeout errors, AmqpError with the broker's reply otherwise.
  // Either way the connection is marked broken.
  void check_rpc(const std::string& what);
  // The same for a reply returned directly (amqp_login).
  void check_reply(const amqp_rpc_reply_t& reply, const std::string& what);
  // For the async calls that return a status (basic.publish, basic.ack).
  void check(int status, const std::string& what);

  // Sets basic.qos (per consumer: it applies to the consumers started after it).
  void set_prefetch(int prefetch);
  int prefetch() const { return prefetch_; }

  // Declares a durable quorum queue (idempotent); returns its ready count.
  std::int64_t declare_queue(const std::string& queue);

 private:
  struct StateDeleter {
    void operator()(amqp_connection_state_t s) const { amqp_destroy_connection(s); }
  };
  std::unique_ptr<std::remove_pointer_t<amqp_connection_state_t>, StateDeleter> state_;
  bool healthy_ = true;
  bool logged_in_ = false;
  int prefetch_ = 0;  // the channel's basic.qos for new consumers
  int pid_ = 0;       // the opener: a forked child must not speak on its socket
};

}  // namespace dnnlab::queue
