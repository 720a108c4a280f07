// Shared by the files of AmqpTaskQueue (amqp_task_queue.cpp: publish, lease,
// ack; amqp_pump.cpp: what the broker sends; amqp_cancel.cpp: cancels;
// amqp_consumers.cpp: consumers, prefetch, give-back): the wire helpers and
// the records of a delivery. Not a public header.
#pragma once

#include <amqp.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "queue/amqp_task_queue.hpp"

namespace dnnlab::queue {
namespace amqp_parts {

constexpr const char* kAttemptsHeader = "x-dnnlab-attempts";  // deliveries before this copy
constexpr const char* kErrorHeader = "x-dnnlab-error";        // why they ended, "; "-joined
// The fanout exchange that announces cancels, and this object's consumer of it.
constexpr const char* kControlExchange = "dnnlab.control";
constexpr const char* kControlTag = "dnnlab.control";

// "q/<queue>", then "q<n>/<queue>" for the queue's n-th consumer on this
// connection (want_prefetch() starts a new one).
inline std::string consumer_tag(const std::string& queue, int generation) {
  std::string tag = "q";
  if (generation) tag += std::to_string(generation);
  tag += '/';
  tag += queue;
  return tag;
}

// The queue of a task consumer's tag; nullopt for another tag.
inline std::optional<std::string> tag_queue(const std::string& tag) {
  if (!tag.starts_with("q")) return std::nullopt;
  const auto slash = tag.find('/');
  if (slash == std::string::npos) return std::nullopt;
  return tag.substr(slash + 1);
}

inline std::string bytes(amqp_bytes_t b) {
  return {static_cast<const char*>(b.bytes), b.len};
}

inline amqp_bytes_t as_bytes(std::string_view s) {
  return {s.size(), const_cast<char*>(s.data())};
}

inline void require(bool ok, std::string_view field, const std::string& why) {
  if (!ok) throw std::invalid_argument(std::string(field) + " " + why);
}

}  // namespace amqp_parts

// A message pushed to this object and not yet handed out by lease().
struct AmqpTaskQueue::Delivery {
  std::uint64_t tag = 0;
  std::string consumer;  // the consumer tag it came to
  std::string payload;
  int attempts_before = 0;  // x-dnnlab-attempts + x-delivery-count
  std::string error;
};

// A delivery handed out by lease(), until ack/nack or the connection's end.
struct AmqpTaskQueue::Held {
  std::uint64_t tag = 0;
  std::string consumer;
  std::string queue;
  std::string payload;
  int attempt = 0;
  std::string error;
};

}  // namespace dnnlab::queue
