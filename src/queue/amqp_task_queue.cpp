// AmqpTaskQueue: the TaskQueue contract on RabbitMQ (see the header for the
// mapping): the connection, publish, lease, extend, ack and nack. What the
// broker sends is read in amqp_pump.cpp, cancels in amqp_cancel.cpp and the
// consumers in amqp_consumers.cpp.
#include "queue/amqp_task_queue.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <utility>

#include "db/backend_url.hpp"
#include "queue/amqp_task_queue_parts.hpp"

namespace dnnlab::queue {
namespace {

using amqp_parts::as_bytes;
using amqp_parts::consumer_tag;
using amqp_parts::require;

using Clock = std::chrono::steady_clock;

// How long lease() waits for the broker to push a message it reports ready.
constexpr double kLeaseWaitSeconds = 2.0;
// How long lease() first waits for a push before asking the broker.
constexpr int kPushWaitMs = 2;

void require_seconds(double v, std::string_view field) {
  require(std::isfinite(v) && v > 0, field,
          "must be a positive number of seconds, got " + std::to_string(v));
}

std::string joined(std::string a, std::string_view b) {
  if (b.empty()) return a;
  if (!a.empty()) a += "; ";
  a += b;
  return a;
}

}  // namespace

AmqpTaskQueue::AmqpTaskQueue(std::string_view url, TaskQueueOptions options)
    : url_(url), shown_url_(backend_url::redact(url)), options_(std::move(options)) {
  require(options_.max_attempts >= 1, "max_attempts",
          "must be at least 1, got " + std::to_string(options_.max_attempts));
  require_seconds(options_.busy_timeout_seconds, "busy_timeout_seconds");
  try {
    const AmqpUrl parsed = AmqpUrl::parse(url);
    prefetch_ = parsed.prefetch;
    prefetch_max_ = parsed.prefetch_max;
    std::random_device rd;
    object_tag_ = static_cast<std::int64_t>(rd() & 0x7fffffffu) | 1;
    next_handle_ = object_tag_ << 32;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("task queue URL '" + shown_url_ + "': " + e.what());
  }
  connect_with_backoff();
}

// A closed connection returns its unacked deliveries to their queues, and a
// quorum queue counts each return in x-delivery-count, an attempt: those
// pushed here and never leased go back first, at the attempt they came
// with. Leased ones stay: their holder's attempt ends with it.
AmqpTaskQueue::~AmqpTaskQueue() {
  if (!conn_ || !conn_->healthy() || !conn_->opened_here()) return;
  try {
    give_back_all_inboxes();
  } catch (const std::exception&) {
    // The broker is gone: it returns them itself, counted.
  }
}

int AmqpTaskQueue::connections_opened() const {
  return connections_opened_;
}

double AmqpTaskQueue::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void AmqpTaskQueue::connect_with_backoff() {
  const AmqpUrl url = AmqpUrl::parse(url_);
  const auto give_up = Clock::now() + std::chrono::duration<double>(options_.busy_timeout_seconds);
  auto delay = std::chrono::milliseconds(50);
  for (;;) {
    try {
      conn_ = std::make_unique<AmqpConnection>(url, options_.busy_timeout_seconds);
      break;
    } catch (const AmqpConnectionLost& e) {
      if (Clock::now() + delay > give_up)
        throw std::runtime_error("task queue " + shown_url_ + ": broker unreachable for " +
                                 std::to_string(options_.busy_timeout_seconds) + " s: " + e.what());
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, std::chrono::milliseconds(2000));
    }
  }
  ++connections_opened_;
  next_seq_ = 1;
}

AmqpConnection& AmqpTaskQueue::conn() {
  if (conn_ && !conn_->opened_here())
    throw std::logic_error("task queue " + shown_url_ +
                           ": used in a child process; open one per process after fork()");
  if (conn_ && !conn_->healthy()) lost();
  if (!conn_) connect_with_backoff();
  return *conn_;
}

void AmqpTaskQueue::lost() {
  // Everything tied to the old connection goes: the broker requeues its
  // unacked deliveries, so our leases of it are no longer ours.
  if (conn_) conn_->mark_broken();
  conn_.reset();
  declared_.clear();
  consuming_.clear();
  extra_.clear();
  control_ = false;
  inbox_.clear();
  held_.clear();
  confirms_.clear();
}

void AmqpTaskQueue::ensure_queue(const std::string& queue) {
  if (declared_.count(queue)) return;
  conn().declare_queue(queue);
  declared_.insert(queue);
}

std::int64_t AmqpTaskQueue::publish(std::string_view queue, std::string_view payload) {
  return publish_batch(queue, {std::string(payload)}).front();
}

std::vector<std::int64_t> AmqpTaskQueue::publish_batch(std::string_view queue_name,
                                                       const std::vector<std::string>& payloads) {
  require(!queue_name.empty(), "queue", "must not be empty");
  const std::string queue(queue_name);
  std::vector<std::int64_t> ids(payloads.size());
  for (auto& id : ids) id = ++next_handle_;
  std::vector<bool> confirmed(payloads.size(), false);
  const auto give_up = Clock::now() + std::chrono::duration<double>(options_.busy_timeout_seconds);
  for (;;) {
    std::map<std::uint64_t, std::size_t> sent;  // publish seq -> payload index
    try {
      ensure_queue(queue);
      AmqpConnection& c = conn();
      amqp_basic_properties_t props{};
      props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
      props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        if (confirmed[i]) continue;
        c.check(amqp_basic_publish(c.get(), AmqpConnection::kPublish, amqp_empty_bytes,
                                   as_bytes(queue), 0, 0, &props, as_bytes(payloads[i])),
                "basic.publish to '" + queue + "'");
        confirms_[next_seq_] = 0;
        sent[next_seq_++] = i;
      }
      // Wait until the broker confirmed (or refused) every message.
      bool refused = false;
      for (auto it = sent.begin(); it != sent.end();) {
        const int outcome = confirms_[it->first];
        if (outcome == 0) {
          if (Clock::now() > give_up)
            throw std::runtime_error("task queue " + shown_url_ + ": no publisher confirm from '" +
                                     queue + "' within " +
                                     std::to_string(options_.busy_timeout_seconds) + " s");
          pump(100);
          continue;
        }
        // A nack: the broker did not take the message (a quorum queue
        // whose leader is still being elected refuses publishes for a
        // moment after it is declared). It is published again below.
        if (outcome < 0)
          refused = true;
        else
          confirmed[it->second] = true;
        confirms_.erase(it->first);
        it = sent.erase(it);
      }
      if (refused) {
        if (Clock::now() > give_up)
          throw AmqpError("task queue " + shown_url_ + ": the broker refused a message to '" +
                          queue + "' (basic.nack) for " +
                          std::to_string(options_.busy_timeout_seconds) + " s");
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      return ids;
    } catch (const AmqpConnectionLost&) {
      // Publish what was not confirmed again on a new connection; a message
      // that reached the queue but not its confirm is then there twice,
      // which the contract allows (consumers make it harmless).
      for (auto& [seq, i] : sent)
        if (auto it = confirms_.find(seq); it != confirms_.end() && it->second > 0)
          confirmed[i] = true;
      lost();
      if (Clock::now() > give_up) throw;
    }
  }
}

std::optional<TaskLease> AmqpTaskQueue::take(const std::string& queue, std::string_view worker_id,
                                             double lease_seconds) {
  auto& box = inbox_[queue];
  while (!box.empty()) {
    Delivery d = std::move(box.front());
    box.pop_front();
    const int attempt = d.attempts_before + 1;
    if (attempt > options_.max_attempts) {
      // Its holders died max_attempts times (killed workers, lost
      // connections): dead, and the next one comes instead.
      std::string why =
          joined(d.error, "holder lost on attempt " + std::to_string(attempt - 1) +
                              " of max_attempts " + std::to_string(options_.max_attempts));
      republish_and_ack(dead_letter_queue(queue), d.payload, 0, why, d.tag);
      continue;
    }
    Held h{d.tag, d.consumer, queue, d.payload, attempt, d.error};
    const std::int64_t handle = ++next_handle_;
    TaskLease lease;
    lease.task_id = handle;
    lease.queue = queue;
    lease.payload = std::move(d.payload);
    lease.worker_id = std::string(worker_id);
    lease.attempt = attempt;
    lease.deadline = now() + lease_seconds;
    lease.error = d.error;
    held_.emplace(handle, std::move(h));
    return lease;
  }
  return std::nullopt;
}

std::optional<TaskLease> AmqpTaskQueue::lease(std::string_view queue_name,
                                              std::string_view worker_id, double lease_seconds) {
  require(!queue_name.empty(), "queue", "must not be empty");
  require(!worker_id.empty(), "worker_id", "must not be empty");
  require_seconds(lease_seconds, "lease_seconds");
  const std::string queue(queue_name);
  const auto give_up = Clock::now() + std::chrono::duration<double>(options_.busy_timeout_seconds);
  for (;;) {
    try {
      // Subscribed before the first lease: a cancel announced after it reaches us.
      ensure_control();
      ensure_consumer(queue);
      const auto wait_until = Clock::now() + std::chrono::duration<double>(kLeaseWaitSeconds);
      // The broker pushes the next message right after an ack: waiting a
      // moment for it first saves asking (a round trip) in the common case.
      int wait_ms = kPushWaitMs;
      for (;;) {
        process_cancels();
        if (auto l = take(queue, worker_id, lease_seconds)) return l;
        if (pump(std::exchange(wait_ms, 0))) continue;
        // At prefetch, the broker pushes nothing more until we ack.
        std::int64_t mine = 0;
        for (const auto& [handle, h] : held_) mine += h.queue == queue;
        if (mine >= consumer_prefetch(queue)) return std::nullopt;
        // Nothing here: is anything ready for us on the broker?
        if (conn().declare_queue(queue) == 0) {
          while (pump(0)) {
          }
          if (auto l = take(queue, worker_id, lease_seconds)) return l;
          return std::nullopt;
        }
        if (Clock::now() > wait_until) return std::nullopt;
        pump(20);
      }
    } catch (const AmqpConnectionLost&) {
      lost();
      if (Clock::now() > give_up) throw;
    }
  }
}

bool AmqpTaskQueue::extend(TaskLease& lease, double seconds) {
  require_seconds(seconds, "seconds");
  if (another_objects(lease)) {
    // The worker's lease keeper runs on its own connection: the broker keeps
    // the lease as long as the holder's connection lives, and the holder's
    // ack tells the truth. Nothing to move here.
    lease.deadline = now() + seconds;
    return true;
  }
  if (!held_.count(lease.task_id) || !keep_alive(lease)) return false;
  lease.deadline = now() + seconds;
  return true;
}

bool AmqpTaskQueue::keep_alive(const TaskLease& lease) {
  if (another_objects(lease)) return true;  // not held on this connection
  try {
    while (pump(0)) {  // sends a heartbeat when one is due, notices a closed channel
    }
  } catch (const AmqpConnectionLost&) {
    lost();
    return false;
  }
  return held_.count(lease.task_id) > 0;
}

bool AmqpTaskQueue::ack(const TaskLease& lease) {
  return ack_all({&lease}).front();
}

std::vector<bool> AmqpTaskQueue::ack_batch(const std::vector<TaskLease>& leases) {
  std::vector<const TaskLease*> all;
  all.reserve(leases.size());
  for (const TaskLease& l : leases) all.push_back(&l);
  return ack_all(all);
}

std::vector<bool> AmqpTaskQueue::ack_all(const std::vector<const TaskLease*>& leases) {
  std::vector<bool> acked(leases.size(), false);
  std::vector<std::int64_t> handles;  // ours, each once
  std::vector<std::uint64_t> tags;
  for (const TaskLease* l : leases) {
    auto it = held_.find(l->task_id);
    if (it == held_.end() || it->second.attempt != l->attempt) continue;
    if (std::find(handles.begin(), handles.end(), l->task_id) != handles.end()) continue;
    handles.push_back(l->task_id);
    tags.push_back(it->second.tag);
  }
  if (tags.empty()) return acked;
  if (!conn_ || !conn().healthy()) {  // conn(): refuses a forked child
    lost();
    return acked;
  }
  std::sort(tags.begin(), tags.end());
  // A multiple-ack takes every unacked delivery of the channel up to `top`:
  // only when none other lies below it, held (a trial still running) or
  // prefetched (in the inbox). Deliveries not read yet all come after `top`
  // (the broker numbers them in the order it sends them).
  const std::uint64_t top = tags.back();
  bool prefix = true;
  for (const auto& [handle, h] : held_)
    if (h.tag < top && !std::binary_search(tags.begin(), tags.end(), h.tag)) prefix = false;
  for (const auto& [queue, box] : inbox_)
    for (const Delivery& d : box)
      if (d.tag < top) prefix = false;
  try {
    AmqpConnection& c = *conn_;
    if (prefix) {
      c.check(amqp_basic_ack(c.get(), AmqpConnection::kConsume, top, /*multiple=*/1), "basic.ack");
    } else {
      for (std::uint64_t tag : tags)
        c.check(amqp_basic_ack(c.get(), AmqpConnection::kConsume, tag, 0), "basic.ack");
    }
    amqp_tx_commit(c.get(), AmqpConnection::kConsume);
    c.check_rpc("tx.commit (ack)");
  } catch (const AmqpConnectionLost&) {
    lost();
    return acked;
  }
  for (std::size_t i = 0; i < leases.size(); ++i) {
    auto it = held_.find(leases[i]->task_id);
    if (it == held_.end() || it->second.attempt != leases[i]->attempt) continue;
    held_.erase(it);
    acked[i] = true;
  }
  return acked;
}

bool AmqpTaskQueue::republish_and_ack(const std::string& queue, const std::string& payload,
                                      int attempts_before, const std::string& error,
                                      std::uint64_t tag) {
  ensure_queue(queue);
  Delivery d;
  d.tag = tag;
  d.payload = payload;
  d.attempts_before = attempts_before;
  d.error = error;
  republish(queue, d);
  AmqpConnection& c = conn();
  amqp_tx_commit(c.get(), AmqpConnection::kConsume);
  c.check_rpc("tx.commit (republish to '" + queue + "')");
  return true;
}

bool AmqpTaskQueue::nack(const TaskLease& lease, bool requeue, std::string_view error) {
  auto it = held_.find(lease.task_id);
  if (it == held_.end() || it->second.attempt != lease.attempt) return false;
  if (!conn_ || !conn().healthy()) {  // conn(): refuses a forked child
    lost();
    return false;
  }
  const Held h = it->second;
  std::string why = joined(h.error, error);
  try {
    if (requeue && h.attempt < options_.max_attempts) {
      republish_and_ack(h.queue, h.payload, h.attempt, why, h.tag);
    } else {
      if (requeue)
        why = joined(why, "max_attempts " + std::to_string(options_.max_attempts) + " reached");
      republish_and_ack(dead_letter_queue(h.queue), h.payload, 0, why, h.tag);
    }
  } catch (const AmqpConnectionLost&) {
    lost();
    return false;
  }
  held_.erase(lease.task_id);
  return true;
}

}  // namespace dnnlab::queue
