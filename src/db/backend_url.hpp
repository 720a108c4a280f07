// Parsing of the backend URLs the queue and store factories accept
// ("sqlite:PATH", "amqp://…", "postgres://…"), and their redaction for
// anything printed. Internal to src/db, src/queue, src/store and what prints URLs.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// The URL (or libpq "key=value" connection string) with its secrets
// replaced by "***", fit for error messages, logs and what a command prints
// at start: the password of the userinfo ("postgres://u:***@h/db"), and the
// value of every password, sslpassword, secret or token parameter, in a
// URL's query ("?password=***", also percent-encoded keys, as libpq decodes
// them) or as a keyword of a connection string ("host=h password=***",
// quoted values included).
inline std::string redact(std::string_view url) {
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
  };
  auto percent_decoded = [](std::string_view s) {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
        out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
        i += 2;
      } else {
        out += s[i];
      }
    }
    return out;
  };
  auto secret_key = [&](std::string_view key) {
    const std::string k = lower(percent_decoded(key));
    return k == "password" || k == "sslpassword" || k == "passwd" || k == "secret" || k == "token";
  };
  // Ranges [begin, end) of `url` to print as "***", in order.
  std::vector<std::pair<std::size_t, std::size_t>> hidden;
  const auto scheme_end = url.find("://");
  if (scheme_end != std::string_view::npos) {
    const std::size_t start = scheme_end + 3;
    std::size_t query = url.find_first_of("?#", start);
    if (query == std::string_view::npos) query = url.size();
    // The last '@' before the query: a password may hold '@' or '/' unescaped.
    const auto at = url.substr(0, query).rfind('@');
    if (at != std::string_view::npos && at >= start) {
      const auto colon = url.find(':', start);
      if (colon < at) hidden.emplace_back(colon + 1, at);
    }
    if (query < url.size() && url[query] == '?') {
      std::size_t i = query + 1;
      while (i < url.size() && url[i] != '#') {
        std::size_t end = url.find_first_of("&#", i);
        if (end == std::string_view::npos) end = url.size();
        const auto eq = url.find('=', i);
        if (eq < end && secret_key(url.substr(i, eq - i))) hidden.emplace_back(eq + 1, end);
        i = end < url.size() && url[end] == '&' ? end + 1 : end;
      }
    }
  } else {
    // libpq's keyword/value form: key = value, key='quoted \' value', ...
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    std::size_t i = 0;
    while (i < url.size()) {
      while (i < url.size() && space(url[i])) ++i;
      const std::size_t key = i;
      while (i < url.size() && !space(url[i]) && url[i] != '=') ++i;
      const std::string_view name = url.substr(key, i - key);
      std::size_t j = i;
      while (j < url.size() && space(url[j])) ++j;
      if (j >= url.size() || url[j] != '=') {
        if (i == key) ++i;  // a stray character: step over it
        continue;
      }
      ++j;
      while (j < url.size() && space(url[j])) ++j;
      const std::size_t value = j;
      if (j < url.size() && url[j] == '\'') {
        for (++j; j < url.size() && url[j] != '\''; ++j)
          if (url[j] == '\\') ++j;
        if (j < url.size()) ++j;  // the closing quote
      } else {
        for (; j < url.size() && !space(url[j]); ++j)
          if (url[j] == '\\') ++j;
      }
      j = std::min(j, url.size());
      if (secret_key(name) && j > value) hidden.emplace_back(value, j);
      i = j;
    }
  }
  std::string out;
  std::size_t from = 0;
  for (auto [b, e] : hidden) {
    out.append(url.substr(from, b - from));
    out += "***";
    from = e;
  }
  out.append(url.substr(from));
  return out;
}

}  // namespace dnnlab::backend_url
