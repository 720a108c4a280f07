// Random tokens and secrets, and hex, on OpenSSL: the server's write and
// join tokens, the gateway's ids, the hybrid run's tokens and its clients'
// identity secrets.
//
//   std::string token = dnnlab::tls::random_hex(32);  // 64 hex digits
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace dnnlab::tls {

// `bytes` from OpenSSL's CSPRNG (RAND_bytes) as lower-case hex; throws
// std::runtime_error when it fails.
std::string random_hex(std::size_t bytes);

// Lower-case hex of a byte string.
std::string hex(std::string_view bytes);

}  // namespace dnnlab::tls
