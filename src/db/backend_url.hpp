// Parsing of the backend URLs the queue and store factories accept
// ("sqlite:PATH", "amqp://…", "postgres://…"). Internal to src/queue and src/store.
#pragma once

#include <string>
#include <string_view>

namespace dnnlab::backend_url {

// The scheme before the first ':' ("sqlite", "amqp", ...), lower-case; "" if none.
inline std::string scheme(std::string_view url) {
  auto colon = url.find(':');
  if (colon == std::string_view::npos || colon == 0) return {};
  std::string s;
  for (char c : url.substr(0, colon)) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '-' || c == '.';
    if (!ok) return {};
    s += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  return s;
}

// The file path of "sqlite:PATH" or "sqlite://PATH" ("sqlite:///abs" is "/abs").
inline std::string sqlite_path(std::string_view url) {
  std::string_view rest = url.substr(url.find(':') + 1);
  if (rest.starts_with("//")) rest.remove_prefix(2);
  return std::string(rest);
}

// The URL with any password replaced, fit for error messages and logs.
inline std::string redact(std::string_view url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  auto authority_start = scheme_end + 3;
  auto at = url.find('@', authority_start);
  auto slash = url.find('/', authority_start);
  if (at == std::string_view::npos || (slash != std::string_view::npos && slash < at))
    return std::string(url);
  auto colon = url.find(':', authority_start);
  if (colon == std::string_view::npos || colon > at) return std::string(url);
  return std::string(url.substr(0, colon + 1)) + "***" + std::string(url.substr(at));
}

}  // namespace dnnlab::backend_url
