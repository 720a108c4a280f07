// Checks on who may talk to the server at all, before any route runs: the
// Host header (DNS rebinding) and the Origin of WebSocket upgrades (a page on
// another site opening /api/events or /join in a visitor's browser).
//
//   RequestGuard g({"127.0.0.1", 8080, false, {"dnnlab.lan"}, {"https://lab.example"}});
//   g.host_allowed("localhost:8080");                 // true
//   g.host_allowed("evil.example:8080");              // false: answer 421
//   g.origin_allowed("http://evil.example", "localhost:8080");  // false: answer 403
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dnnlab::server {

struct GuardConfig {
  std::string listen_host;  // the address the server is bound to ("127.0.0.1", "::1", "0.0.0.0")
  unsigned short port = 0;
  bool tls = false;                        // the server's own origins are https://
  std::vector<std::string> allow_hosts;    // --allow-host: more names the Host header may carry
  std::vector<std::string> allow_origins;  // --allow-origin: more origins for WebSocket upgrades
};

class RequestGuard {
 public:
  explicit RequestGuard(GuardConfig config);

  // Whether the Host header is checked at all: on a loopback listener (where
  // a rebinding page is the threat), or wherever --allow-host names were given.
  bool checks_host() const { return check_host_; }
  // True when `host` (the Host header, "name[:port]") may be served. An empty
  // header (HTTP/1.0, non-browser clients) is allowed: browsers always send one.
  bool host_allowed(std::string_view host) const;
  // True when a WebSocket upgrade with this Origin header may proceed: none
  // (a non-browser client), the server's own origin (scheme://Host as the
  // request named it, once the Host passed host_allowed), or --allow-origin.
  // "null" (sandboxed frames, file: pages) is refused.
  bool origin_allowed(std::string_view origin, std::string_view host) const;

 private:
  GuardConfig config_;
  bool check_host_ = false;
  std::vector<std::string> names_;  // lower case, without port
};

// Why a request's framing is refused (answered 400), or "" when it is
// fine: Transfer-Encoding, when present, must be one header holding exactly
// "chunked" (any case), and never beside Content-Length. Anything else
// ("gzip, chunked", "chunked, gzip", "identity", the header twice) is a body
// a proxy in front and this server could delimit differently (request
// smuggling), and no client of dnnlab needs it.
std::string framing_problem(const std::vector<std::string_view>& transfer_encodings,
                            bool has_content_length);

// True for 127.0.0.0/8, ::1 and ::ffff:127.x.
bool is_loopback_address(std::string_view address);

}  // namespace dnnlab::server
