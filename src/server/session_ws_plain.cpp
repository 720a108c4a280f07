// JoinSession<PlainStream> and EventSession<PlainStream>: their own translation
// unit (server_impl.hpp says why).
#include "server/ws_sessions.hpp"

namespace dnnlab::server {

void start_join_session(PlainStream&& stream, std::shared_ptr<Server::Impl> impl,
                        std::shared_ptr<ConnectionSlot> slot, Request req) {
  auto s = std::make_shared<JoinSession<PlainStream>>(std::move(stream), std::move(impl));
  s->hold(std::move(slot));
  s->run(std::move(req));
}

void start_event_session(PlainStream&& stream, std::shared_ptr<Server::Impl> impl,
                         std::shared_ptr<ConnectionSlot> slot, std::int64_t after, Request req) {
  auto s = std::make_shared<EventSession<PlainStream>>(std::move(stream), std::move(impl), after);
  s->hold(std::move(slot));
  s->run(std::move(req));
}

}  // namespace dnnlab::server
