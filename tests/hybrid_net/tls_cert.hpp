// Throwaway self-signed certificates for the TLS tests, made with the openssl
// CLI in a temporary directory (the key mode 0600, as --tls-key demands).
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace dnnlab::tls_test {

// NAME.crt and NAME.key in `dir`: P-256, one day, subjectAltName `san`
// (e.g. "IP:127.0.0.1,DNS:localhost").
inline bool make_cert(const std::filesystem::path& dir, const std::string& name,
                      const std::string& san = "IP:127.0.0.1,DNS:localhost") {
  const std::string key = (dir / (name + ".key")).string();
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=dnnlab-test -addext subjectAltName=" +
      san + " -keyout '" + key + "' -out '" + (dir / (name + ".crt")).string() + "' 2>/dev/null";
  return std::system(cmd.c_str()) == 0 && ::chmod(key.c_str(), 0600) == 0;
}

}  // namespace dnnlab::tls_test

// Without the openssl CLI the test cannot run: a failure under CI, a skip
// elsewhere.
#define DNNLAB_NEED_CERT(dir, ...)                                                     \
  do {                                                                                 \
    if (!::dnnlab::tls_test::make_cert(dir, __VA_ARGS__)) {                            \
      if (std::getenv("CI")) FAIL() << "the openssl CLI could not make a certificate"; \
      GTEST_SKIP() << "no openssl CLI";                                                \
    }                                                                                  \
  } while (0)
