// AmqpTaskQueue's consumers: started per queue, their prefetch moved while
// they consume (want_prefetch), and what they were pushed and never leased
// given back, when a prefetch is lowered and when the object ends.
#include <algorithm>

#include "queue/amqp_task_queue.hpp"
#include "queue/amqp_task_queue_parts.hpp"

namespace dnnlab::queue {

using amqp_parts::as_bytes;
using amqp_parts::consumer_tag;
using amqp_parts::kAttemptsHeader;
using amqp_parts::kErrorHeader;
using amqp_parts::require;

void AmqpTaskQueue::ensure_consumer(const std::string& queue) {
  if (consuming_.count(queue)) return;
  ensure_queue(queue);
  AmqpConnection& c = conn();
  extra_.erase(queue);
  c.set_prefetch(prefetch_);  // basic.qos holds for the consumers started after it
  amqp_basic_consume(c.get(), AmqpConnection::kConsume, as_bytes(queue),
                     as_bytes(consumer_tag(queue, 0)), 0, /*no_ack=*/0, 0, amqp_empty_table);
  c.check_rpc("basic.consume '" + queue + "'");
  consuming_.insert(queue);
  if (auto w = wanted_.find(queue); w != wanted_.end()) adjust_prefetch(queue, w->second);
}

int AmqpTaskQueue::consumer_prefetch(const std::string& queue) const {
  if (!consuming_.count(queue)) return 0;
  int total = prefetch_;
  if (auto it = extra_.find(queue); it != extra_.end())
    for (const Extra& e : it->second) total += e.prefetch;
  return total;
}

int AmqpTaskQueue::holding(const std::string& consumer) const {
  int n = 0;
  for (const auto& [handle, h] : held_) n += h.consumer == consumer;
  for (const auto& [queue, box] : inbox_)
    for (const Delivery& d : box) n += d.consumer == consumer;
  return n;
}

void AmqpTaskQueue::want_prefetch(std::string_view queue_name, int n) {
  require(!queue_name.empty(), "queue", "must not be empty");
  require(n >= 1, "prefetch", "must be at least 1, got " + std::to_string(n));
  const std::string queue(queue_name);
  const int want = std::clamp(n, prefetch_, prefetch_max_);
  wanted_[queue] = want;
  if (!consuming_.count(queue)) return;  // ensure_consumer() applies it
  try {
    adjust_prefetch(queue, want);
  } catch (const AmqpConnectionLost&) {
    lost();  // the next lease reconnects and consumes with `want`
  }
}

void AmqpTaskQueue::adjust_prefetch(const std::string& queue, int want) {
  AmqpConnection& c = conn();
  auto& extras = extra_[queue];
  // Lower: cancel extra consumers, newest first, while the rest still reach
  // `want`; only one that holds its whole prefetch (see the header: a
  // quorum queue returns, as a failed attempt, what is on its way to a
  // consumer cancelled meanwhile; one without credit has nothing on the
  // way). Otherwise a later call lowers it.
  while (!extras.empty() && consumer_prefetch(queue) - extras.back().prefetch >= want) {
    const Extra e = extras.back();
    while (pump(0)) {  // count what reached us
    }
    if (holding(e.tag) < e.prefetch) break;
    amqp_basic_cancel(c.get(), AmqpConnection::kConsume, as_bytes(e.tag));
    c.check_rpc("basic.cancel '" + queue + "'");
    extras.pop_back();
    // Its prefetched, unleased deliveries go back; leased ones stay ours
    // (the channel, not the consumer, holds unacked deliveries).
    give_back_inbox(queue, e.tag);
  }
  // Raise: basic.qos does not change a running consumer, so another
  // consumer on the queue takes the difference. Deliveries that arrive
  // during these RPCs are queued by rabbitmq-c (amqp_simple_rpc keeps every
  // frame that is not its reply) and reach the inbox through pump().
  if (const int more = want - consumer_prefetch(queue); more > 0) {
    const std::string tag = consumer_tag(queue, ++generation_);
    c.set_prefetch(more);
    amqp_basic_consume(c.get(), AmqpConnection::kConsume, as_bytes(queue), as_bytes(tag), 0,
                       /*no_ack=*/0, 0, amqp_empty_table);
    c.check_rpc("basic.consume '" + queue + "'");
    extras.push_back({tag, more});
  }
}

void AmqpTaskQueue::republish(const std::string& queue, const Delivery& d) {
  AmqpConnection& c = conn();
  amqp_table_entry_t entries[2]{};
  entries[0].key = amqp_cstring_bytes(kAttemptsHeader);
  entries[0].value.kind = AMQP_FIELD_KIND_I32;
  entries[0].value.value.i32 = d.attempts_before;
  entries[1].key = amqp_cstring_bytes(kErrorHeader);
  entries[1].value.kind = AMQP_FIELD_KIND_UTF8;
  entries[1].value.value.bytes = as_bytes(d.error);
  amqp_basic_properties_t props{};
  props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  props.headers = amqp_table_t{2, entries};
  c.check(amqp_basic_publish(c.get(), AmqpConnection::kConsume, amqp_empty_bytes, as_bytes(queue),
                             0, 0, &props, as_bytes(d.payload)),
          "basic.publish to '" + queue + "'");
  c.check(amqp_basic_ack(c.get(), AmqpConnection::kConsume, d.tag, 0), "basic.ack");
}

void AmqpTaskQueue::give_back_inbox(const std::string& queue, const std::string& consumer) {
  auto it = inbox_.find(queue);
  if (it == inbox_.end()) return;
  auto& box = it->second;
  const auto mine = [&](const Delivery& d) { return d.consumer == consumer; };
  if (std::none_of(box.begin(), box.end(), mine)) return;
  // To the queue's tail with the same attempt and error, in one
  // transaction: a task is neither lost nor doubled if the connection dies
  // meanwhile (the broker then requeues the originals, drops the copies).
  for (const Delivery& d : box)
    if (mine(d)) republish(queue, d);
  AmqpConnection& c = conn();
  amqp_tx_commit(c.get(), AmqpConnection::kConsume);
  c.check_rpc("tx.commit (give back to '" + queue + "')");
  box.erase(std::remove_if(box.begin(), box.end(), mine), box.end());
}

void AmqpTaskQueue::give_back_all_inboxes() {
  AmqpConnection& c = conn();
  for (const std::string& queue : consuming_) {
    std::vector<std::string> tags{consumer_tag(queue, 0)};
    if (auto it = extra_.find(queue); it != extra_.end())
      for (const Extra& e : it->second) tags.push_back(e.tag);
    for (const std::string& tag : tags) {
      amqp_basic_cancel(c.get(), AmqpConnection::kConsume, as_bytes(tag));
      c.check_rpc("basic.cancel '" + queue + "'");
    }
  }
  consuming_.clear();
  extra_.clear();
  // Pushes sent before a cancel-ok were queued by rabbitmq-c meanwhile.
  while (pump(0)) {
  }
  bool any = false;
  for (auto& [queue, box] : inbox_) {
    for (const Delivery& d : box) republish(queue, d);
    any = any || !box.empty();
    box.clear();
  }
  if (!any) return;
  amqp_tx_commit(c.get(), AmqpConnection::kConsume);
  c.check_rpc("tx.commit (give back at close)");
}

}  // namespace dnnlab::queue
