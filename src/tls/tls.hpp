// The TLS contexts of dnnlab, both ends. The server side (--tls-cert,
// --tls-key) is loaded once at start, so that a bad certificate or key stops
// the server with the file named before anything listens; the client side
// verifies the peer (never silently skipped) against the system's CAs or a
// given file, and checks the name it connected to.
//
//   auto ctx = dnnlab::tls::server_context("lab.crt", "lab.key");
//   boost::beast::ssl_stream<boost::beast::tcp_stream> s(std::move(socket), *ctx);
//
//   auto cc = dnnlab::tls::client_context(ca_file, "--tls-ca");  // "": the system's CAs
//   boost::beast::ssl_stream<boost::beast::tcp_stream> c(ioc, *cc);
//   dnnlab::tls::expect_host(c.native_handle(), host);          // SNI + name check
//   c.handshake(ssl::stream_base::client, ec);
//   if (ec) ... dnnlab::tls::verify_error(c.native_handle()) ... // "self-signed certificate"
#pragma once
#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

namespace dnnlab::tls {

// Throws std::invalid_argument naming the flag and the file when either
// cannot be read, is not PEM, the key is open to group or others (any of
// mode 077), or the key does not belong to the certificate. Offers TLS 1.2
// with ECDHE and AES-GCM or ChaCha20-Poly1305 only, and TLS 1.3.
std::unique_ptr<boost::asio::ssl::context> server_context(const std::string& cert_file,
                                                          const std::string& key_file);

// A client context that verifies the server: against the PEM certificates
// in `ca_file` (a CA, or a self-signed server certificate itself), or the
// system's CAs when it is "". TLS 1.2 and newer. Throws
// std::invalid_argument naming `ca_flag` and the file when it cannot be
// loaded.
std::unique_ptr<boost::asio::ssl::context> client_context(const std::string& ca_file,
                                                          const std::string& ca_flag);

// Before the client handshake: sends `host` as SNI (when it is a name, not
// an IP address) and makes verification fail unless the certificate names
// it (a DNS name, wildcards only as a whole left-most label; or an IP
// address, which must be in its subjectAltName).
void expect_host(SSL* ssl, const std::string& host);

// After a failed handshake: why the peer's certificate was refused
// ("self-signed certificate", "hostname mismatch"), or "" when it was not
// (the handshake failed for another reason).
std::string verify_error(const SSL* ssl);

}  // namespace dnnlab::tls
