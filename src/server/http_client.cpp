// Synchronous Beast client: resolve, connect, one request, read the reply.
#include "server/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <stdexcept>

namespace dnnlab::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

HttpReply http_request(const std::string& base_url, const std::string& method,
                       const std::string& target, const std::string& body,
                       const std::string& bearer_token) {
  constexpr std::string_view kHttp = "http://";
  if (base_url.rfind(kHttp, 0) != 0)
    throw std::runtime_error("server URL must start with http://, got '" + base_url + "'");
  std::string rest = base_url.substr(kHttp.size());
  std::string prefix;
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
  }
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  std::string host = rest, port = "80";
  if (auto colon = rest.rfind(':'); colon != std::string::npos && rest.back() != ']') {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);

  try {
    asio::io_context io;
    tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.connect(resolver.resolve(host, port));
    http::request<http::string_body> req{http::string_to_verb(method), prefix + target, 11};
    if (req.method() == http::verb::unknown) req.method_string(method);
    req.set(http::field::host, rest);
    req.set(http::field::user_agent, "dnnlab");
    if (!bearer_token.empty()) req.set(http::field::authorization, "Bearer " + bearer_token);
    if (!body.empty() || method == "POST") {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(256 * 1024 * 1024);
    http::read(stream, buffer, parser);
    auto res = parser.release();
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return {res.result_int(), std::string(res[http::field::content_type]), std::move(res.body())};
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("cannot reach " + base_url + ": " + e.what());
  }
}

}  // namespace dnnlab::server
