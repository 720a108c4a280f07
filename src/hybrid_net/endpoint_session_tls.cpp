// Session<ssl_stream<tcp_stream>>: wss:// and https://, in a translation unit
// of its own (endpoint_session.hpp is heavy on templates).
#include "hybrid_net/endpoint_session.hpp"

namespace dnnlab::hybrid_net {

void start_tls_session(boost::asio::ip::tcp::socket socket, HybridEndpoint::Impl& hub) {
  using session_detail::TlsStream;
  std::make_shared<session_detail::Session<TlsStream>>(hub, std::move(socket), *hub.opt.tls)
      ->start();
}

}  // namespace dnnlab::hybrid_net
