// SHA-256 (FIPS 180-4) of a byte string, as lower-case hex (OpenSSL's EVP).
// Used for spec hashes and the gateway's content-hashed file names.
#pragma once

#include <string>
#include <string_view>

namespace dnnlab::store {
std::string sha256_hex(std::string_view bytes);
}  // namespace dnnlab::store
