// The bearer token that guards writes: made once from /dev/urandom, kept in a
// file only its owner can read, and reused by every later start.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace dnnlab::server {

struct LoadedToken {
  std::string token;
  bool created = false;  // this call made it
};

// Tokens read from a file must be at least this long (made ones have 64).
inline constexpr std::size_t kMinTokenChars = 32;

// Reads the token from `path`, or makes one (64 hex characters) and writes it
// with mode 0600. Throws std::runtime_error when the file cannot be written,
// holds no token or one shorter than kMinTokenChars, or is open to group or
// others (any of mode 077).
LoadedToken load_or_create_token(const std::string& path);

// Where the token lives by default: beside an sqlite store, else ./dnnlab.token.
std::string default_token_file(std::string_view store_url);

// `bytes` random bytes from /dev/urandom, as lower-case hex.
std::string random_hex(std::size_t bytes);

// The credentials of an Authorization header of the Bearer scheme, or none.
// The scheme is case-insensitive and followed by one or more spaces (RFC 7235).
std::optional<std::string_view> bearer_credentials(std::string_view authorization);

// Constant-time comparison of an Authorization header's bearer credentials
// against the token.
bool bearer_matches(std::string_view authorization, std::string_view token);

}  // namespace dnnlab::server
