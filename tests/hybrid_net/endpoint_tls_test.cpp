// The endpoint over TLS (EndpointOptions::tls, `--tls-cert/--tls-key`) with
// a certificate the test makes: a client that trusts it joins over wss://
// and frames travel both ways; one that does not (no --tls-ca, another
// certificate, a certificate naming another host) is refused with the
// reason, as are plain ws:// on the TLS port, a TLS handshake on a plain port
// and a connection that says nothing; the endpoint goes on admitting, and
// serves its pages over https.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <mutex>
#include <utility>

#include "cli_util.hpp"
#include "hybrid_net/client_link.hpp"
#include "hybrid_net/endpoint.hpp"
#include "tls/tls.hpp"
#include "tls_cert.hpp"

namespace dnnlab::hybrid_net {
namespace endpoint_tls_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using cli_test::TempDir;

// The endpoint's log lines, kept.
struct Log {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) {
      std::lock_guard lock(mu);
      lines.push_back(l);
    };
  }
  bool has(const std::string& part) {
    std::lock_guard lock(mu);
    for (const auto& l : lines)
      if (l.find(part) != std::string::npos) return true;
    return false;
  }
  std::string all() {
    std::lock_guard lock(mu);
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

// What ClientLink::join threw ("joined" when it did not).
std::string join_error(const std::string& url, const std::string& token,
                       const std::string& ca = "") {
  try {
    ClientLink::join(url, token, ca);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "joined";
}

std::string file(const TempDir& d, const std::string& name) {
  return (d.path / name).string();
}

TEST(EndpointTls, TrustedClientsJoinOverWssTheOthersAreRefused) {
  TempDir dir;
  DNNLAB_NEED_CERT(dir.path, "srv");
  DNNLAB_NEED_CERT(dir.path, "other");
  Log log;
  EndpointOptions eo;
  eo.token = std::string(64, 't');
  eo.tls = tls::server_context(file(dir, "srv.crt"), file(dir, "srv.key"));
  eo.hello_timeout = std::chrono::milliseconds(500);
  eo.files["/hybrid/join"] = {"text/html",
                              std::make_shared<const std::string>("<p>the join page</p>")};
  eo.log = log.sink();
  HybridEndpoint ep("127.0.0.1:0", eo);
  const std::string url = ep.url();
  ASSERT_EQ(url.rfind("wss://127.0.0.1:", 0), 0u) << url;
  const std::string ca = file(dir, "srv.crt");

  // Not told to trust the certificate: this system's CAs did not sign it.
  std::string e = join_error(url, eo.token);
  EXPECT_NE(e.find("the certificate of 127.0.0.1:"), std::string::npos) << e;
  EXPECT_NE(e.find("failed verification: self"), std::string::npos) << e;  // self-signed
  EXPECT_NE(e.find("--tls-ca"), std::string::npos) << e;
  // Told to trust another certificate.
  e = join_error(url, eo.token, file(dir, "other.crt"));
  EXPECT_NE(e.find("failed verification"), std::string::npos) << e;
  // A CA file that is not there, or not PEM.
  e = join_error(url, eo.token, file(dir, "missing.pem"));
  EXPECT_NE(e.find("--tls-ca " + file(dir, "missing.pem") + ": no such file"), std::string::npos)
      << e;
  e = join_error(url, eo.token, file(dir, "srv.key"));
  EXPECT_NE(e.find("not a PEM certificate"), std::string::npos) << e;
  // Plain ws:// on the TLS port: the clear-text 400 reaches the client.
  std::string plain = url;
  plain.replace(0, 3, "ws");
  e = join_error(plain, eo.token);
  EXPECT_NE(e.find("(400): this port speaks TLS only"), std::string::npos) << e;
  EXPECT_TRUE(log.has("refused: plain HTTP on a TLS port")) << log.all();
  // A connection that says nothing (not even a ClientHello) is closed at the
  // hello timeout.
  {
    asio::io_context ioc;
    asio::ip::tcp::socket s(ioc);
    s.connect({asio::ip::make_address("127.0.0.1"), ep.port()});
    const auto start = std::chrono::steady_clock::now();
    char c;
    boost::system::error_code ec;
    s.read_some(asio::buffer(&c, 1), ec);
    EXPECT_TRUE(ec);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  }
  EXPECT_TRUE(log.has("closed: no hello within 500 ms")) << log.all();
  // The refused ones left no trace among the clients.
  EXPECT_EQ(ep.clients(), 0);

  // Trusting it (by IP address, and by the other name in it): admitted.
  auto a = ClientLink::join(url, eo.token, ca);
  const std::string by_name = "wss://localhost:" + std::to_string(ep.port()) + "/hybrid";
  auto b = ClientLink::join(by_name, eo.token, ca);
  EXPECT_EQ(a->welcome().client, 0);
  EXPECT_EQ(b->welcome().client, 1);
  EXPECT_EQ(ep.clients(), 2);
  // Frames both ways, through TLS.
  const hybrid::Bytes down(100000, 0x42), up = {1, 2, 3, 4, 5};
  ASSERT_TRUE(ep.send(1, down));
  const auto got = b->receive(hybrid::Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, down);
  ASSERT_TRUE(a->send(up));
  const auto in = ep.receive(hybrid::Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->client, 0);
  EXPECT_EQ(in->frame, up);

  // The page over https, from a client that verifies the certificate.
  {
    asio::io_context ioc;
    const auto ctx = tls::client_context(ca, "--tls-ca");
    beast::ssl_stream<beast::tcp_stream> s(ioc, *ctx);
    tls::expect_host(s.native_handle(), "127.0.0.1");
    beast::get_lowest_layer(s).expires_after(std::chrono::seconds(10));
    beast::get_lowest_layer(s).connect({asio::ip::make_address("127.0.0.1"), ep.port()});
    s.handshake(asio::ssl::stream_base::client);
    http::request<http::empty_body> req(http::verb::get, "/hybrid/join", 11);
    req.set(http::field::host, "127.0.0.1");
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    EXPECT_EQ(res.result(), http::status::ok);
    EXPECT_EQ(res.body(), "<p>the join page</p>");
  }

  // The end of the run reaches them as a normal close.
  ep.shutdown();
  const auto until = hybrid::Clock::now() + std::chrono::seconds(5);
  while (!(a->closed() && b->closed()) && hybrid::Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(a->closed());
  EXPECT_EQ(a->close_reason(), "");
  EXPECT_EQ(b->close_reason(), "");
}

TEST(EndpointTls, TheCertificateMustNameTheHost) {
  TempDir dir;
  DNNLAB_NEED_CERT(dir.path, "named", "DNS:localhost");  // no IP address in it
  EndpointOptions eo;
  eo.token = std::string(64, 'n');
  eo.tls = tls::server_context(file(dir, "named.crt"), file(dir, "named.key"));
  HybridEndpoint ep("127.0.0.1:0", eo);
  const std::string ca = file(dir, "named.crt");
  const std::string e = join_error(ep.url(), eo.token, ca);
  EXPECT_NE(e.find("the certificate of 127.0.0.1:"), std::string::npos) << e;
  EXPECT_NE(e.find("mismatch"), std::string::npos) << e;  // "IP address mismatch"
  EXPECT_EQ(ep.clients(), 0);
  EXPECT_EQ(join_error("wss://localhost:" + std::to_string(ep.port()) + "/hybrid", eo.token, ca),
            "joined");
  EXPECT_EQ(ep.clients(), 1);
}

TEST(EndpointTls, ATlsHandshakeOnAPlainPortIsRefused) {
  TempDir dir;
  DNNLAB_NEED_CERT(dir.path, "srv");
  Log log;
  EndpointOptions eo;
  eo.token = std::string(64, 'p');
  eo.log = log.sink();
  HybridEndpoint ep("127.0.0.1:0", eo);
  ASSERT_EQ(ep.url().rfind("ws://", 0), 0u);
  std::string tls_url = ep.url();
  tls_url.replace(0, 2, "wss");
  const std::string e = join_error(tls_url, eo.token, file(dir, "srv.crt"));
  EXPECT_NE(e.find("TLS handshake with 127.0.0.1:"), std::string::npos) << e;
  EXPECT_NE(e.find("serves ws://"), std::string::npos) << e;
  EXPECT_TRUE(log.has("refused: a TLS handshake on a plain port")) << log.all();
  // A CA is for wss:// only: never ignored.
  EXPECT_THROW(ClientLink::join(ep.url(), eo.token, file(dir, "srv.crt")), std::invalid_argument);
  EXPECT_EQ(join_error(ep.url(), eo.token), "joined");
  EXPECT_EQ(ep.clients(), 1);
}

}  // namespace endpoint_tls_test
}  // namespace dnnlab::hybrid_net
