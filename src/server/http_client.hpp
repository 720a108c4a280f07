// A small synchronous HTTP/1.1 client (Beast, OpenSSL for https://) for
// `dnnlab submit` and tests: one request per connection, JSON in and out.
//   auto r = http_request("https://lab:8080", "GET", "/api/stats", {}, {}, "ca.pem");
#pragma once
#include <string>

namespace dnnlab::server {

struct HttpReply {
  unsigned status = 0;
  std::string content_type;
  std::string body;
};

// base_url: "http://HOST:PORT" or "https://HOST:PORT" (a trailing path is a
// prefix). For https the server's certificate must chain to `cacert` (a PEM
// file) or, when that is empty, to the system's CAs, and name HOST (TLS 1.2+).
// Throws std::runtime_error when the server cannot be reached, its
// certificate is refused, or the URL is bad.
HttpReply http_request(const std::string& base_url, const std::string& method,
                       const std::string& target, const std::string& body = {},
                       const std::string& bearer_token = {}, const std::string& cacert = {});

}  // namespace dnnlab::server
