// A small synchronous HTTP/1.1 client (Beast) for `dnnlab submit` and tests:
// one request per connection, JSON in and out.
#pragma once
#include <string>

namespace dnnlab::server {

struct HttpReply {
  unsigned status = 0;
  std::string content_type;
  std::string body;
};

// base_url: "http://HOST:PORT" (a trailing path is a prefix). Throws
// std::runtime_error when the server cannot be reached or the URL is bad.
HttpReply http_request(const std::string& base_url, const std::string& method,
                       const std::string& target, const std::string& body = {},
                       const std::string& bearer_token = {});

}  // namespace dnnlab::server
