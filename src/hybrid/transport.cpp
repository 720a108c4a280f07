// In-process transport: a mutex-guarded inbox for the server and one outbox
// per client, shared by the hub and the client ends (either may outlive the
// other while threads wind down).
#include "hybrid/transport.hpp"

#include <condition_variable>
#include <deque>

namespace dnnlab::hybrid {

struct InProcessHub::Shared {
  std::mutex mu;
  std::condition_variable server_cv;
  std::deque<Inbound> inbox;
  struct Link {
    std::condition_variable cv;
    std::deque<Bytes> outbox;
    bool closed = false;
  };
  std::vector<std::unique_ptr<Link>> links;

  void close_link(int client, bool tell_server) {
    // mu held by the caller.
    Link& l = *links[client];
    if (l.closed) return;
    l.closed = true;
    l.cv.notify_all();
    if (tell_server) {
      inbox.push_back(Inbound{client, {}, true});
      server_cv.notify_all();
    }
  }
};

namespace {

class InProcessClient : public ClientTransport {
 public:
  InProcessClient(std::shared_ptr<InProcessHub::Shared> s, int id) : s_(std::move(s)), id_(id) {}
  ~InProcessClient() override { close(); }

  bool send(Bytes frame) override {
    std::lock_guard lock(s_->mu);
    if (s_->links[id_]->closed) return false;
    s_->inbox.push_back(Inbound{id_, std::move(frame), false});
    s_->server_cv.notify_all();
    return true;
  }
  std::optional<Bytes> receive(Clock::time_point deadline) override {
    std::unique_lock lock(s_->mu);
    auto& l = *s_->links[id_];
    l.cv.wait_until(lock, deadline, [&] { return l.closed || !l.outbox.empty(); });
    if (l.outbox.empty() || l.closed) return std::nullopt;
    Bytes b = std::move(l.outbox.front());
    l.outbox.pop_front();
    return b;
  }
  bool closed() const override {
    std::lock_guard lock(s_->mu);
    return s_->links[id_]->closed;
  }
  void close() override {
    std::lock_guard lock(s_->mu);
    s_->close_link(id_, true);
  }

 private:
  std::shared_ptr<InProcessHub::Shared> s_;
  int id_;
};

}  // namespace

InProcessHub::InProcessHub() : shared_(std::make_shared<Shared>()) {}

InProcessHub::~InProcessHub() {
  std::lock_guard lock(shared_->mu);
  for (size_t i = 0; i < shared_->links.size(); ++i)
    shared_->close_link(static_cast<int>(i), false);
}

std::unique_ptr<ClientTransport> InProcessHub::connect() {
  std::lock_guard lock(shared_->mu);
  shared_->links.push_back(std::make_unique<Shared::Link>());
  return std::make_unique<InProcessClient>(shared_, static_cast<int>(shared_->links.size()) - 1);
}

int InProcessHub::clients() const {
  std::lock_guard lock(shared_->mu);
  return static_cast<int>(shared_->links.size());
}

bool InProcessHub::send(int client, Bytes frame) {
  std::lock_guard lock(shared_->mu);
  if (client < 0 || client >= static_cast<int>(shared_->links.size())) return false;
  auto& l = *shared_->links[client];
  if (l.closed) return false;
  l.outbox.push_back(std::move(frame));
  l.cv.notify_all();
  return true;
}

std::optional<Inbound> InProcessHub::receive(Clock::time_point deadline) {
  std::unique_lock lock(shared_->mu);
  shared_->server_cv.wait_until(lock, deadline, [&] { return !shared_->inbox.empty(); });
  if (shared_->inbox.empty()) return std::nullopt;
  Inbound in = std::move(shared_->inbox.front());
  shared_->inbox.pop_front();
  return in;
}

void InProcessHub::disconnect(int client) {
  std::lock_guard lock(shared_->mu);
  if (client >= 0 && client < static_cast<int>(shared_->links.size()))
    shared_->close_link(client, false);
}

}  // namespace dnnlab::hybrid
