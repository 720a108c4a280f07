// JoinSession<TlsStream> and EventSession<TlsStream>: their own translation
// unit (server_impl.hpp says why).
#include "server/ws_sessions.hpp"

namespace dnnlab::server {

void start_join_session(TlsStream&& stream, std::shared_ptr<Server::Impl> impl, Upgraded up) {
  auto s = std::make_shared<JoinSession<TlsStream>>(std::move(stream), std::move(up.read_ahead),
                                                    std::move(impl));
  s->hold(std::move(up.slot));
  s->run(std::move(up.req));
}

void start_event_session(TlsStream&& stream, std::shared_ptr<Server::Impl> impl, Upgraded up,
                         std::int64_t after, bool private_fields) {
  auto s = std::make_shared<EventSession<TlsStream>>(std::move(stream), std::move(up.read_ahead),
                                                     std::move(impl), after, private_fields);
  s->hold(std::move(up.slot));
  s->run(std::move(up.req));
}

}  // namespace dnnlab::server
