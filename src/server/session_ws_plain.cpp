// JoinSession<PlainStream> and EventSession<PlainStream>: their own translation
// unit (server_impl.hpp says why).
#include "server/ws_sessions.hpp"

namespace dnnlab::server {

void start_join_session(PlainStream&& stream, std::shared_ptr<Server::Impl> impl, Upgraded up) {
  auto s = std::make_shared<JoinSession<PlainStream>>(std::move(stream), std::move(up.read_ahead),
                                                      std::move(impl));
  s->hold(std::move(up.slot));
  s->run(std::move(up.req));
}

void start_event_session(PlainStream&& stream, std::shared_ptr<Server::Impl> impl, Upgraded up,
                         std::int64_t after, bool private_fields) {
  auto s = std::make_shared<EventSession<PlainStream>>(std::move(stream), std::move(up.read_ahead),
                                                       std::move(impl), after, private_fields);
  s->hold(std::move(up.slot));
  s->run(std::move(up.req));
}

}  // namespace dnnlab::server
