// Synchronous Beast client: resolve, connect (TLS handshake for https),
// one request, read the reply.
#include "server/http_client.hpp"

#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <stdexcept>

#include "tls/tls.hpp"

namespace dnnlab::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

template <class Stream>
HttpReply exchange(Stream& stream, http::request<http::string_body>& req) {
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 * 1024 * 1024);
  http::read(stream, buffer, parser);
  auto res = parser.release();
  return {res.result_int(), std::string(res[http::field::content_type]), std::move(res.body())};
}

}  // namespace

HttpReply http_request(const std::string& base_url, const std::string& method,
                       const std::string& target, const std::string& body,
                       const std::string& bearer_token, const std::string& cacert) {
  const bool tls = base_url.rfind("https://", 0) == 0;
  if (!tls && base_url.rfind("http://", 0) != 0)
    throw std::runtime_error("server URL must start with http:// or https://, got '" + base_url +
                             "'");
  std::string rest = base_url.substr(tls ? 8 : 7);
  std::string prefix;
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
  }
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  std::string host = rest, port = tls ? "443" : "80";
  if (auto colon = rest.rfind(':'); colon != std::string::npos && rest.back() != ']') {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);

  try {
    asio::io_context io;
    tcp::resolver resolver(io);
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
    if (!tls) {
      beast::tcp_stream stream(io);
      stream.connect(resolver.resolve(host, port));
      HttpReply r = exchange(stream, req);
      beast::error_code ec;
      stream.socket().shutdown(tcp::socket::shutdown_both, ec);
      return r;
    }
    const auto ctx = tls::client_context(cacert, "--cacert");
    beast::ssl_stream<beast::tcp_stream> stream(io, *ctx);
    // SNI (for servers behind a proxy that picks the certificate by name)
    // and the name the certificate must carry.
    tls::expect_host(stream.native_handle(), host);
    beast::get_lowest_layer(stream).connect(resolver.resolve(host, port));
    stream.handshake(ssl::stream_base::client);
    HttpReply r = exchange(stream, req);
    beast::error_code ec;
    stream.shutdown(ec);  // a peer that just closes is fine: the reply is read
    return r;
  } catch (const std::invalid_argument& e) {  // --cacert unreadable, a host TLS cannot check
    throw std::runtime_error(e.what());
  } catch (const boost::system::system_error& e) {
    std::string why = e.what();
    if (tls && why.find("certificate verify failed") != std::string::npos)
      why += cacert.empty() ? " (the server's certificate is not signed by a CA this system "
                              "trusts: pass --cacert FILE)"
                            : " (the server's certificate does not chain to " + cacert +
                                  " or does not name " + host + ")";
    throw std::runtime_error("cannot reach " + base_url + ": " + why);
  }
}

}  // namespace dnnlab::server
