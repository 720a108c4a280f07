// Session<tcp_stream>: ws:// and http://, in a translation unit of its own
// (endpoint_session.hpp is heavy on templates).
#include "hybrid_net/endpoint_session.hpp"

namespace dnnlab::hybrid_net {

void start_plain_session(boost::asio::ip::tcp::socket socket, HybridEndpoint::Impl& hub) {
  using session_detail::PlainStream;
  std::make_shared<session_detail::Session<PlainStream>>(hub, std::move(socket))->start();
}

}  // namespace dnnlab::hybrid_net
