// Host and Origin checks (see request_guard.hpp).
#include "server/request_guard.hpp"

#include <boost/asio/ip/address.hpp>
#include <cctype>

namespace dnnlab::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "name:port", "[v6]:port", "name" -> name (lower case, brackets kept for v6)
// and the port text ("" when none). False when malformed.
bool split_host(std::string_view host, std::string& name, std::string_view& port) {
  if (host.empty()) return false;
  std::size_t end = 0;
  if (host[0] == '[') {
    end = host.find(']');
    if (end == std::string_view::npos) return false;
    ++end;
  } else {
    end = host.find(':');
    if (end == std::string_view::npos) end = host.size();
  }
  name = lower(host.substr(0, end));
  if (end == host.size()) {
    port = {};
    return !name.empty();
  }
  if (host[end] != ':') return false;
  port = host.substr(end + 1);
  if (port.empty() || port.size() > 5) return false;
  for (char c : port)
    if (c < '0' || c > '9') return false;
  return !name.empty();
}

}  // namespace

std::string framing_problem(const std::vector<std::string_view>& transfer_encodings,
                            bool has_content_length) {
  if (transfer_encodings.empty()) return {};
  if (transfer_encodings.size() > 1)
    return "Transfer-Encoding appears " + std::to_string(transfer_encodings.size()) +
           " times; only one 'Transfer-Encoding: chunked' is accepted";
  std::string_view v = transfer_encodings.front();
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  if (lower(v) != "chunked")
    return "Transfer-Encoding '" + std::string(v.substr(0, 100)) +
           "' is not accepted; only 'chunked' is";
  if (has_content_length) return "Transfer-Encoding and Content-Length together are not accepted";
  return {};
}

bool is_loopback_address(std::string_view address) {
  std::string a(address);
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  boost::system::error_code ec;
  auto ip = boost::asio::ip::make_address(a, ec);
  if (ec) return false;
  if (ip.is_v6() && ip.to_v6().is_v4_mapped())
    return ip.to_v6().to_v4().is_loopback();  // ::ffff:127.0.0.1
  return ip.is_loopback();
}

RequestGuard::RequestGuard(GuardConfig config) : config_(std::move(config)) {
  check_host_ = is_loopback_address(config_.listen_host) || !config_.allow_hosts.empty();
  names_ = {"localhost", "127.0.0.1", "[::1]"};
  std::string listen = lower(config_.listen_host);
  if (listen.find(':') != std::string::npos) listen = "[" + listen + "]";
  if (listen != "0.0.0.0" && listen != "[::]") names_.push_back(listen);
  for (const auto& h : config_.allow_hosts) names_.push_back(lower(h));
}

bool RequestGuard::host_allowed(std::string_view host) const {
  if (!check_host_ || host.empty()) return true;
  std::string name;
  std::string_view port;
  if (!split_host(host, name, port)) return false;
  if (!port.empty() && port != std::to_string(config_.port)) return false;
  for (const auto& n : names_)
    if (n == name) return true;
  return false;
}

bool RequestGuard::origin_allowed(std::string_view origin, std::string_view host) const {
  if (origin.empty()) return true;
  const std::string o = lower(origin);
  for (const auto& a : config_.allow_origins)
    if (lower(a) == o) return true;
  if (host.empty()) return false;
  // The page came from this server, under the name the request used.
  std::string name;
  std::string_view port;
  if (!split_host(host, name, port)) return false;
  const std::string scheme = config_.tls ? "https://" : "http://";
  const std::string default_port = config_.tls ? "443" : "80";
  std::string self = scheme + name;
  if (!port.empty() && port != default_port) self += ":" + std::string(port);
  if (o == self) return true;
  // A browser leaves the default port out of Origin but may put it in Host.
  return port.empty() && o == self + ":" + default_port;
}

}  // namespace dnnlab::server
