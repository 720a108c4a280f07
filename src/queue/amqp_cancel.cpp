// AmqpTaskQueue's cancels: cancel() purges a queue and announces it on a
// fanout exchange that every AmqpTaskQueue subscribes to (ensure_control), so
// each drops what it was pushed of that queue and its workers stop the
// queue's trials; waiting() counts what is left.
#include <chrono>
#include <string>

#include "queue/amqp_task_queue.hpp"
#include "queue/amqp_task_queue_parts.hpp"

namespace dnnlab::queue {

using amqp_parts::as_bytes;
using amqp_parts::bytes;
using amqp_parts::kControlExchange;
using amqp_parts::kControlTag;
using amqp_parts::require;

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void AmqpTaskQueue::ensure_control() {
  if (control_) return;
  AmqpConnection& c = conn();
  amqp_exchange_declare(c.get(), AmqpConnection::kConsume, amqp_cstring_bytes(kControlExchange),
                        amqp_cstring_bytes("fanout"), 0, /*durable=*/1, 0, 0, amqp_empty_table);
  c.check_rpc(std::string("exchange.declare '") + kControlExchange + "'");
  // A private queue per connection: exclusive, gone with the connection.
  auto* ok = amqp_queue_declare(c.get(), AmqpConnection::kConsume, amqp_empty_bytes, 0, 0,
                                /*exclusive=*/1, /*auto_delete=*/1, amqp_empty_table);
  c.check_rpc("queue.declare (control)");
  const std::string name = bytes(ok->queue);
  amqp_queue_bind(c.get(), AmqpConnection::kConsume, as_bytes(name),
                  amqp_cstring_bytes(kControlExchange), amqp_empty_bytes, amqp_empty_table);
  c.check_rpc("queue.bind (control)");
  amqp_basic_consume(c.get(), AmqpConnection::kConsume, as_bytes(name),
                     amqp_cstring_bytes(kControlTag), 0, /*no_ack=*/1, 1, amqp_empty_table);
  c.check_rpc("basic.consume (control)");
  control_ = true;
}

std::int64_t AmqpTaskQueue::drop_inbox(const std::string& queue) {
  auto it = inbox_.find(queue);
  if (it == inbox_.end() || it->second.empty()) return 0;
  AmqpConnection& c = conn();
  const std::int64_t n = static_cast<std::int64_t>(it->second.size());
  for (const Delivery& d : it->second)
    c.check(amqp_basic_reject(c.get(), AmqpConnection::kConsume, d.tag, /*requeue=*/0),
            "basic.reject");
  it->second.clear();
  amqp_tx_commit(c.get(), AmqpConnection::kConsume);
  c.check_rpc("tx.commit (drop '" + queue + "')");
  return n;
}

void AmqpTaskQueue::process_cancels() {
  while (!cancelled_pending_.empty()) {
    const std::string queue = *cancelled_pending_.begin();
    cancelled_pending_.erase(cancelled_pending_.begin());
    drop_inbox(queue);
  }
}

std::int64_t AmqpTaskQueue::waiting(std::string_view queue_name) {
  require(!queue_name.empty(), "queue", "must not be empty");
  const std::string queue(queue_name);
  for (int tries = 0;; ++tries) {
    try {
      while (pump(0)) {
      }
      process_cancels();
      const std::int64_t n = conn().declare_queue(queue);
      declared_.insert(queue);
      auto it = inbox_.find(queue);
      return n + (it == inbox_.end() ? 0 : static_cast<std::int64_t>(it->second.size()));
    } catch (const AmqpConnectionLost&) {
      lost();
      if (tries > 0) throw;
    }
  }
}

std::int64_t AmqpTaskQueue::cancel(std::string_view queue_name) {
  require(!queue_name.empty(), "queue", "must not be empty");
  const std::string queue(queue_name);
  for (int tries = 0;; ++tries) {
    try {
      ensure_queue(queue);
      ensure_control();
      AmqpConnection& c = conn();
      auto* ok = amqp_queue_purge(c.get(), AmqpConnection::kConsume, as_bytes(queue));
      c.check_rpc("queue.purge '" + queue + "'");
      const std::int64_t dropped = ok->message_count + drop_inbox(queue);
      // Announce it, confirmed, so running workers stop the queue's trials.
      amqp_basic_properties_t props{};
      props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
      props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
      c.check(amqp_basic_publish(c.get(), AmqpConnection::kPublish,
                                 amqp_cstring_bytes(kControlExchange), amqp_empty_bytes, 0, 0,
                                 &props, as_bytes(queue)),
              "basic.publish to the control exchange");
      const std::uint64_t seq = next_seq_++;
      confirms_[seq] = 0;
      const auto give_up =
          Clock::now() + std::chrono::duration<double>(options_.busy_timeout_seconds);
      while (confirms_[seq] == 0) {
        if (Clock::now() > give_up)
          throw std::runtime_error("task queue " + shown_url_ + ": no confirm for the cancel of '" +
                                   queue + "'");
        pump(100);
      }
      confirms_.erase(seq);
      cancelled_.insert(queue);
      // Our own announcement comes back to us: its inbox is already empty.
      return dropped;
    } catch (const AmqpConnectionLost&) {
      lost();
      if (tries > 0) throw;
    }
  }
}

bool AmqpTaskQueue::cancelled(std::string_view queue) {
  try {
    ensure_control();
    while (pump(0)) {
    }
    process_cancels();
  } catch (const AmqpConnectionLost&) {
    lost();  // the next call reconnects; what we knew stays known
  }
  return cancelled_.count(std::string(queue)) > 0;
}

}  // namespace dnnlab::queue
