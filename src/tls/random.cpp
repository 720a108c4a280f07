// Random tokens and hex (random.hpp).
#include "tls/random.hpp"

#include <openssl/rand.h>

#include <stdexcept>

namespace dnnlab::tls {

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1)
    throw std::runtime_error("RAND_bytes failed: no random token can be made");
  return hex(raw);
}

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

}  // namespace dnnlab::tls
