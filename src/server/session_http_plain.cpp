// HttpSession<PlainStream>: its own translation unit (server_impl.hpp says why).
#include "server/http_session.hpp"

namespace dnnlab::server {

void start_http_session(PlainStream stream, std::shared_ptr<Server::Impl> impl,
                        std::shared_ptr<ConnectionSlot> slot) {
  std::make_shared<HttpSession<PlainStream>>(std::move(stream), std::move(impl), std::move(slot))
      ->start();
}

}  // namespace dnnlab::server
