// The server's TLS context (--tls-cert, --tls-key): TLS 1.2 and newer only,
// loaded once at start so that a bad certificate or key stops the server
// with the file named, before anything listens.
//
//   auto ctx = dnnlab::server::load_tls_context("lab.crt", "lab.key");
//   boost::beast::ssl_stream<boost::beast::tcp_stream> s(std::move(socket), *ctx);
#pragma once
#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

namespace dnnlab::server {

// Throws std::invalid_argument naming the flag and the file when either
// cannot be read, is not PEM, the key is open to group or others (any of
// mode 077), or the key does not belong to the certificate. Offers TLS 1.2
// with ECDHE and AES-GCM or ChaCha20-Poly1305 only, and TLS 1.3.
std::unique_ptr<boost::asio::ssl::context> load_tls_context(const std::string& cert_file,
                                                            const std::string& key_file);

}  // namespace dnnlab::server
