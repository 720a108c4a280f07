// AmqpConnection: socket, login, channels and RPC error checking (see the header).
#include "queue/amqp_connection.hpp"

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

namespace dnnlab::queue {
namespace {

int parse_int(std::string_view key, std::string_view value, int lo, int hi) {
  int v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc{} || end != value.data() + value.size() || v < lo || v > hi)
    throw std::invalid_argument("amqp URL parameter '" + std::string(key) +
                                "' must be an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + std::string(value) + "'");
  return v;
}

timeval to_timeval(double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - std::floor(seconds)) * 1e6);
  return tv;
}

std::string bytes(amqp_bytes_t b) {
  return {static_cast<const char*>(b.bytes), b.len};
}

// The first reason OpenSSL gave while verifying the broker's chain on this
// thread (a connection opens on its caller's thread), for the error message:
// rabbitmq-c only says "peer cert verification failed".
thread_local std::string tls_verify_error;

int record_verify_error(int ok, X509_STORE_CTX* store) {
  if (!ok && tls_verify_error.empty()) {
    tls_verify_error = X509_verify_cert_error_string(X509_STORE_CTX_get_error(store));
    if (X509* cert = X509_STORE_CTX_get_current_cert(store)) {
      char subject[256];
      X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof subject);
      tls_verify_error += std::string(" (certificate ") + subject + ")";
    }
  }
  return ok;
}

// rabbitmq-c 0.11 (Debian 12) matches the host only against the
// certificate's DNS names and CN, so a certificate for an IP address (an IP
// SAN, as RFC 6125 wants it) never matched; and without cacert it trusted
// nothing, not even the system's CAs. So OpenSSL checks both here, inside the
// chain verification whose result rabbitmq-c reads after the handshake: the
// system's CAs unless cacert is given, and the host as an IP address or a DNS
// name (no partial wildcards).
void set_up_tls(amqp_socket_t* socket, const AmqpUrl& url) {
  auto* ctx = static_cast<SSL_CTX*>(amqp_ssl_socket_get_context(socket));
  if (url.cacert.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1)
      throw AmqpError("amqp: cannot load the system's CA certificates (give cacert=PATH)");
  } else if (amqp_ssl_socket_set_cacert(socket, url.cacert.c_str()) != AMQP_STATUS_OK) {
    throw std::invalid_argument("amqp URL parameter 'cacert': cannot read '" + url.cacert + "'");
  }
  amqp_ssl_socket_set_verify_peer(socket, 1);
  amqp_ssl_socket_set_verify_hostname(socket, 0);  // OpenSSL's check below instead
  std::string host = url.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx);
  unsigned char addr[sizeof(in6_addr)];
  const bool is_ip =
      inet_pton(AF_INET, host.c_str(), addr) == 1 || inet_pton(AF_INET6, host.c_str(), addr) == 1;
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  const int set = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                        : X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  if (set != 1) throw std::invalid_argument("amqp URL host '" + host + "' is not a valid TLS name");
  SSL_CTX_set_verify(ctx, SSL_CTX_get_verify_mode(ctx), record_verify_error);
}

// Why opening the socket failed, as the exception the caller's retry loop
// expects: a certificate that does not verify, or a port that does not speak
// TLS, will not get better by retrying (AmqpError); anything else might
// (AmqpConnectionLost).
[[noreturn]] void throw_open_failure(int status, const AmqpUrl& url) {
  const std::string where = url.host + ":" + std::to_string(url.port);
  if (url.tls && (status == AMQP_STATUS_SSL_PEER_VERIFY_FAILED ||
                  status == AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED)) {
    const std::string trusted =
        url.cacert.empty() ? "the system's CA certificates" : "cacert '" + url.cacert + "'";
    throw AmqpError("amqp: TLS certificate verification of " + where + " failed: " +
                    (tls_verify_error.empty() ? amqp_error_string2(status) : tls_verify_error) +
                    "; trusted: " + trusted);
  }
  if (url.tls && status == AMQP_STATUS_SSL_CONNECTION_FAILED) {
    const unsigned long err = ERR_peek_last_error();
    ERR_clear_error();
    if (ERR_GET_LIB(err) == ERR_LIB_SSL && ERR_GET_REASON(err) == SSL_R_WRONG_VERSION_NUMBER)
      throw AmqpError("amqp: TLS handshake with " + where +
                      " failed: the port does not speak TLS (a plain AMQP port? amqps:// needs "
                      "the broker's listeners.ssl port, 5671 by default)");
    const char* reason = err ? ERR_reason_error_string(err) : nullptr;
    throw AmqpConnectionLost("amqp: TLS handshake with " + where + " failed" +
                             (reason ? std::string(": ") + reason : std::string()));
  }
  throw AmqpConnectionLost("amqp: cannot connect to " + where + ": " + amqp_error_string2(status));
}

}  // namespace

AmqpUrl AmqpUrl::parse(std::string_view url) {
  AmqpUrl out;
  std::string_view base = url, query;
  if (auto q = url.find('?'); q != std::string_view::npos) {
    base = url.substr(0, q);
    query = url.substr(q + 1);
  }
  std::vector<char> buf(base.begin(), base.end());
  buf.push_back('\0');
  amqp_connection_info info{};
  amqp_default_connection_info(&info);
  if (amqp_parse_url(buf.data(), &info) != AMQP_STATUS_OK)
    throw std::invalid_argument(
        "amqp URL is malformed: expected amqp[s]://[user[:pass]@]host[:port]/[vhost]");
  out.user = info.user;
  out.password = info.password;
  out.host = info.host;
  out.vhost = info.vhost;
  out.port = info.port;
  out.tls = info.ssl != 0;
  if (out.host.empty()) throw std::invalid_argument("amqp URL has no host");
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    auto eq = item.find('=');
    std::string_view key = item.substr(0, eq);
    std::string_view value =
        eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1);
    if (key == "prefetch")
      out.prefetch = parse_int(key, value, 1, 65535);
    else if (key == "prefetch_max")
      out.prefetch_max = parse_int(key, value, 1, 65535);
    else if (key == "heartbeat")
      out.heartbeat = parse_int(key, value, 0, 3600);
    else if (key == "cacert")
      out.cacert = std::string(value);
    else
      throw std::invalid_argument("amqp URL parameter '" + std::string(key) +
                                  "' is unknown (prefetch, prefetch_max, heartbeat, cacert)");
  }
  if (out.prefetch_max == 0) out.prefetch_max = std::max(out.prefetch, 32);
  if (out.prefetch_max < out.prefetch)
    throw std::invalid_argument("amqp URL parameter 'prefetch_max' must be at least prefetch (" +
                                std::to_string(out.prefetch) + "), got " +
                                std::to_string(out.prefetch_max));
  return out;
}

AmqpConnection::AmqpConnection(const AmqpUrl& url, double rpc_timeout_seconds)
    : state_(amqp_new_connection()), pid_(getpid()) {
  if (!state_) throw std::bad_alloc();
  amqp_socket_t* socket = url.tls ? amqp_ssl_socket_new(get()) : amqp_tcp_socket_new(get());
  if (!socket) throw AmqpConnectionLost("amqp: cannot create a socket");
  if (url.tls) set_up_tls(socket, url);
  timeval tv = to_timeval(rpc_timeout_seconds);
  amqp_set_handshake_timeout(get(), &tv);
  amqp_set_rpc_timeout(get(), &tv);
  tls_verify_error.clear();
  ERR_clear_error();
  if (int s = amqp_socket_open_noblock(socket, url.host.c_str(), url.port, &tv);
      s != AMQP_STATUS_OK)
    throw_open_failure(s, url);
  amqp_rpc_reply_t r = amqp_login(get(), url.vhost.c_str(), 0, 131072, url.heartbeat,
                                  AMQP_SASL_METHOD_PLAIN, url.user.c_str(), url.password.c_str());
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
      r.library_error == AMQP_STATUS_CONNECTION_CLOSED)
    throw AmqpError("amqp: " + url.host + ":" + std::to_string(url.port) + " refused user '" +
                    url.user + "' on vhost '" + url.vhost + "' (wrong credentials or vhost)");
  check_reply(
      r, "login to " + url.host + ":" + std::to_string(url.port) + " vhost '" + url.vhost + "'");
  logged_in_ = true;
  for (amqp_channel_t ch : {kConsume, kPublish}) {
    amqp_channel_open(get(), ch);
    check_rpc("channel.open");
  }
  amqp_tx_select(get(), kConsume);
  check_rpc("tx.select");
  amqp_confirm_select(get(), kPublish);
  check_rpc("confirm.select");
  set_prefetch(url.prefetch);
}

void AmqpConnection::set_prefetch(int prefetch) {
  if (prefetch == prefetch_) return;
  amqp_basic_qos(get(), kConsume, 0, static_cast<uint16_t>(prefetch), 0);
  check_rpc("basic.qos");
  prefetch_ = prefetch;
}

AmqpConnection::~AmqpConnection() {
  // A clean close only on a live connection: on a dead one it would wait
  // for the RPC timeout.
  // Not from a forked child either: that would close the parent's connection.
  if (healthy_ && logged_in_ && opened_here()) amqp_connection_close(get(), AMQP_REPLY_SUCCESS);
}

bool AmqpConnection::opened_here() const {
  return getpid() == pid_;
}

void AmqpConnection::check_rpc(const std::string& what) {
  check_reply(amqp_get_rpc_reply(get()), what);
}

void AmqpConnection::check_reply(const amqp_rpc_reply_t& r, const std::string& what) {
  switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return;
    case AMQP_RESPONSE_NONE:
      healthy_ = false;
      throw AmqpConnectionLost("amqp: " + what + ": no reply");
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      healthy_ = false;
      throw AmqpConnectionLost("amqp: " + what + ": " + amqp_error_string2(r.library_error));
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      healthy_ = false;
      if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        auto* m = static_cast<amqp_channel_close_t*>(r.reply.decoded);
        // No close-ok: the owner drops the whole connection, which frees
        // the channel on the broker too.
        throw AmqpError("amqp: " + what + ": broker refused: " + std::to_string(m->reply_code) +
                        " " + bytes(m->reply_text));
      }
      if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        auto* m = static_cast<amqp_connection_close_t*>(r.reply.decoded);
        throw AmqpConnectionLost("amqp: " + what + ": broker closed the connection: " +
                                 std::to_string(m->reply_code) + " " + bytes(m->reply_text));
      }
      throw AmqpConnectionLost("amqp: " + what + ": unexpected reply from the broker");
  }
}

void AmqpConnection::check(int status, const std::string& what) {
  if (status == AMQP_STATUS_OK) return;
  healthy_ = false;
  throw AmqpConnectionLost("amqp: " + what + ": " + amqp_error_string2(status));
}

std::int64_t AmqpConnection::declare_queue(const std::string& queue) {
  amqp_table_entry_t arg{};
  arg.key = amqp_cstring_bytes("x-queue-type");
  arg.value.kind = AMQP_FIELD_KIND_UTF8;
  arg.value.value.bytes = amqp_cstring_bytes("quorum");
  amqp_table_t args{1, &arg};
  auto* ok =
      amqp_queue_declare(get(), kConsume, amqp_cstring_bytes(queue.c_str()), 0, 1, 0, 0, args);
  check_rpc("queue.declare '" + queue + "'");
  return ok->message_count;
}

}  // namespace dnnlab::queue
