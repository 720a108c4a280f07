// The OpenSSL contexts: the server's certificate chain and key, and the
// verifying client.
#include "tls/tls.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <boost/asio/ip/address.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "tls/private_file.hpp"

namespace dnnlab::tls {

namespace {
namespace ssl = boost::asio::ssl;

// OpenSSL's reason for the last failure ("no start line", "key values
// mismatch"), which says more than asio's error_code message.
std::string openssl_reason(const boost::system::error_code& ec) {
  unsigned long e = ERR_peek_last_error();
  std::string why =
      e ? ERR_reason_error_string(e) ? ERR_reason_error_string(e) : ec.message() : ec.message();
  ERR_clear_error();
  return why;
}

bool is_pem_private_key(const std::string& file) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(file.c_str(), "r"), &BIO_free);
  if (!bio) return false;
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  ERR_clear_error();
  return key != nullptr;
}

void check_readable(const std::string& flag, const std::string& file) {
  if (file.empty()) throw std::invalid_argument(flag + ": a file is needed");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw std::invalid_argument(flag + " " + file + ": no such file");
  if (!std::ifstream(file)) throw std::invalid_argument(flag + " " + file + ": cannot be read");
}

// Mozilla's "intermediate" profile (v5.7) without DHE (no DH parameters are
// loaded): TLS 1.2 only with ECDHE and AEAD ciphers, no CBC or SHA-1 MACs.
// TLS 1.3's suites are all AEAD; the same three, said outright.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
constexpr const char* kTls13Suites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
}  // namespace

// A private key others can read is refused, as token files are: whoever
// reads it can pose as this server (or, an identity file, as this client).
void check_private(const std::string& flag, const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0)
    throw std::invalid_argument(flag + " " + file + ": cannot stat: " + std::strerror(errno));
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw std::invalid_argument(flag + " " + file + " has mode " + mode +
                                ": group and others must have no access to a private key "
                                "(chmod 600 " +
                                file + ")");
  }
}

std::unique_ptr<ssl::context> server_context(const std::string& cert_file,
                                             const std::string& key_file) {
  check_readable("--tls-cert", cert_file);
  check_readable("--tls-key", key_file);
  check_private("--tls-key", key_file);
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  // The options above leave the floor to the build; say it outright.
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  if (SSL_CTX_set_cipher_list(ctx->native_handle(), kTls12Ciphers) != 1 ||
      SSL_CTX_set_ciphersuites(ctx->native_handle(), kTls13Suites) != 1) {
    ERR_clear_error();
    throw std::runtime_error("this OpenSSL offers none of the TLS 1.2/1.3 AEAD cipher suites");
  }
  boost::system::error_code ec;
  ERR_clear_error();
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec)
    throw std::invalid_argument("--tls-cert " + cert_file + ": not a PEM certificate (" +
                                openssl_reason(ec) + ")");
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  // OpenSSL checks the key against the certificate as it loads it: a key
  // that parses on its own but does not load belongs to another certificate.
  const bool mismatch = ec && is_pem_private_key(key_file);
  if (ec && !mismatch)
    throw std::invalid_argument("--tls-key " + key_file + ": not a PEM private key (" +
                                openssl_reason(ec) + ")");
  if (mismatch || SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    throw std::invalid_argument("--tls-key " + key_file +
                                ": does not belong to the certificate in " + cert_file);
  }
  return ctx;
}

std::unique_ptr<ssl::context> client_context(const std::string& ca_file,
                                             const std::string& ca_flag) {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  boost::system::error_code ec;
  if (ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
    if (ec)
      throw std::invalid_argument("cannot load this system's CA certificates (" +
                                  openssl_reason(ec) + "): pass " + ca_flag + " FILE");
  } else {
    check_readable(ca_flag, ca_file);
    ERR_clear_error();
    ctx->load_verify_file(ca_file, ec);
    if (ec)
      throw std::invalid_argument(ca_flag + " " + ca_file + ": not a PEM certificate (" +
                                  openssl_reason(ec) + ")");
  }
  ctx->set_verify_mode(ssl::verify_peer);
  return ctx;
}

void expect_host(SSL* ssl, const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  const bool ip = !ec;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  // An IP address is never SNI (RFC 6066 section 3).
  const bool ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1
                     : X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size()) == 1 &&
                           SSL_set_tlsext_host_name(ssl, host.c_str()) == 1;
  if (!ok) {
    ERR_clear_error();
    throw std::invalid_argument("'" + host + "' is not a host name or IP address TLS can check");
  }
}

std::string verify_error(const SSL* ssl) {
  const long r = SSL_get_verify_result(ssl);
  if (r == X509_V_OK) return "";
  return X509_verify_cert_error_string(r);
}

}  // namespace dnnlab::tls
