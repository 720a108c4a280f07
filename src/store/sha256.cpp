// SHA-256 by OpenSSL's EVP, as src/data hashes dataset files: one
// implementation of the digest in the tree, not a hand-written second one.
#include "store/sha256.hpp"

#include <openssl/evp.h>

#include <stdexcept>

namespace dnnlab::store {

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1 || len != 32)
    throw std::runtime_error("sha256: OpenSSL's EVP_Digest failed");
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    hex[2 * i] = kDigits[md[i] >> 4];
    hex[2 * i + 1] = kDigits[md[i] & 15];
  }
  return hex;
}

}  // namespace dnnlab::store
