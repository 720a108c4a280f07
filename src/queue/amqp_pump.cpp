// AmqpTaskQueue::pump: reads one thing the broker sent on the connection: a
// delivery (into the queue's inbox), a publisher confirm, a cancel announced
// on the control exchange, a consumer cancelled by the broker, or a close.
#include <string>

#include "queue/amqp_task_queue.hpp"
#include "queue/amqp_task_queue_parts.hpp"

namespace dnnlab::queue {
namespace {

using amqp_parts::bytes;
using amqp_parts::kAttemptsHeader;
using amqp_parts::kControlTag;
using amqp_parts::kErrorHeader;
using amqp_parts::tag_queue;

std::optional<std::int64_t> int_header(const amqp_table_t& t, std::string_view key) {
  for (int i = 0; i < t.num_entries; ++i) {
    const amqp_table_entry_t& e = t.entries[i];
    if (bytes(e.key) != key) continue;
    const amqp_field_value_t& v = e.value;
    switch (v.kind) {
      case AMQP_FIELD_KIND_I8:
        return v.value.i8;
      case AMQP_FIELD_KIND_U8:
        return v.value.u8;
      case AMQP_FIELD_KIND_I16:
        return v.value.i16;
      case AMQP_FIELD_KIND_U16:
        return v.value.u16;
      case AMQP_FIELD_KIND_I32:
        return v.value.i32;
      case AMQP_FIELD_KIND_U32:
        return v.value.u32;
      case AMQP_FIELD_KIND_I64:
        return v.value.i64;
      case AMQP_FIELD_KIND_U64:
        return static_cast<std::int64_t>(v.value.u64);
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

std::string string_header(const amqp_table_t& t, std::string_view key) {
  for (int i = 0; i < t.num_entries; ++i)
    if (bytes(t.entries[i].key) == key && (t.entries[i].value.kind == AMQP_FIELD_KIND_UTF8 ||
                                           t.entries[i].value.kind == AMQP_FIELD_KIND_BYTES))
      return bytes(t.entries[i].value.value.bytes);
  return {};
}
}  // namespace

bool AmqpTaskQueue::pump(int timeout_ms) {
  AmqpConnection& c = conn();
  amqp_maybe_release_buffers(c.get());
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  amqp_envelope_t env{};
  amqp_rpc_reply_t r = amqp_consume_message(c.get(), &env, &tv, 0);
  if (r.reply_type == AMQP_RESPONSE_NORMAL) {
    const std::string tag = bytes(env.consumer_tag);
    const amqp_basic_properties_t& p = env.message.properties;
    const amqp_table_t headers =
        (p._flags & AMQP_BASIC_HEADERS_FLAG) ? p.headers : amqp_table_t{0, nullptr};
    if (tag == kControlTag) {
      const std::string queue = bytes(env.message.body);
      cancelled_.insert(queue);
      cancelled_pending_.insert(queue);
    } else if (auto queue = tag_queue(tag)) {
      Delivery d;
      d.tag = env.delivery_tag;
      d.consumer = tag;
      d.payload = bytes(env.message.body);
      d.attempts_before = static_cast<int>(int_header(headers, kAttemptsHeader).value_or(0) +
                                           int_header(headers, "x-delivery-count").value_or(0));
      d.error = string_header(headers, kErrorHeader);
      inbox_[*queue].push_back(std::move(d));
    }
    amqp_destroy_envelope(&env);
    return true;
  }
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
    return false;
  if (r.reply_type != AMQP_RESPONSE_LIBRARY_EXCEPTION ||
      r.library_error != AMQP_STATUS_UNEXPECTED_STATE) {
    c.mark_broken();
    throw AmqpConnectionLost("amqp: reading from the broker: " +
                             std::string(r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                                             ? amqp_error_string2(r.library_error)
                                             : "unexpected reply"));
  }
  // A frame other than a delivery: a confirm, or the broker closing us.
  amqp_frame_t frame{};
  if (int s = amqp_simple_wait_frame(c.get(), &frame); s != AMQP_STATUS_OK) {
    c.mark_broken();
    throw AmqpConnectionLost(std::string("amqp: reading a frame: ") + amqp_error_string2(s));
  }
  if (frame.frame_type != AMQP_FRAME_METHOD) return true;
  switch (frame.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD:
    case AMQP_BASIC_NACK_METHOD: {
      const bool acked = frame.payload.method.id == AMQP_BASIC_ACK_METHOD;
      std::uint64_t tag = 0;
      bool multiple = false;
      if (acked) {
        auto* m = static_cast<amqp_basic_ack_t*>(frame.payload.method.decoded);
        tag = m->delivery_tag;
        multiple = m->multiple;
      } else {
        auto* m = static_cast<amqp_basic_nack_t*>(frame.payload.method.decoded);
        tag = m->delivery_tag;
        multiple = m->multiple;
      }
      for (auto it = multiple ? confirms_.begin() : confirms_.find(tag);
           it != confirms_.end() && it->first <= tag; ++it)
        if (it->second == 0) it->second = acked ? 1 : -1;
      return true;
    }
    case AMQP_BASIC_CANCEL_METHOD: {  // the broker cancelled a consumer (queue deleted)
      auto* m = static_cast<amqp_basic_cancel_t*>(frame.payload.method.decoded);
      const std::string tag = bytes(m->consumer_tag);
      if (auto queue = tag_queue(tag)) {
        consuming_.erase(*queue);  // lease() consumes again
        extra_.erase(*queue);
      }
      if (tag == kControlTag) control_ = false;
      return true;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
      // The consumer timeout, or a refused publish: the channel's
      // deliveries are requeued by the broker.
      auto* m = static_cast<amqp_channel_close_t*>(frame.payload.method.decoded);
      c.mark_broken();
      throw AmqpConnectionLost("amqp: the broker closed channel " + std::to_string(frame.channel) +
                               ": " + bytes(m->reply_text));
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
      auto* m = static_cast<amqp_connection_close_t*>(frame.payload.method.decoded);
      c.mark_broken();
      throw AmqpConnectionLost("amqp: the broker closed the connection: " + bytes(m->reply_text));
    }
    default:
      return true;
  }
}

}  // namespace dnnlab::queue
