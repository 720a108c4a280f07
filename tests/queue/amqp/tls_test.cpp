// amqps:// against a TLS broker of this process's own: a throwaway CA and a
// server certificate for 127.0.0.1 made with the openssl command, tasks
// published, leased and acked over TLS exactly once each, and the refusals
// that must come at once and name their cause: a broker signed by another CA,
// a host name the certificate does not carry, amqps:// to the plain port.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "queue/amqp_task_queue.hpp"
#include "rabbitmq_server.hpp"

namespace dnnlab::queue {
namespace {

using TlsClock = std::chrono::steady_clock;

// Runs `openssl ARGS` in `dir`; throws with its output when it fails.
void run_openssl(const std::filesystem::path& dir, const std::string& args) {
  const std::string log = (dir / "openssl.log").string();
  const std::string line = "cd '" + dir.string() + "' && openssl " + args + " >'" + log + "' 2>&1";
  const int status = std::system(line.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream in(log);
    std::stringstream out;
    out << in.rdbuf();
    throw std::runtime_error("openssl " + args + " failed: " + out.str());
  }
}

// A self-signed CA: NAME.pem and NAME.key in `dir`. EC keys: made in ms.
void make_ca(const std::filesystem::path& dir, const std::string& name) {
  const std::string files = "-keyout " + name + ".key -out " + name + ".pem";
  const std::string subject = "-subj '/CN=dnnlab test " + name + "'";
  run_openssl(dir, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -noenc -days 2 " +
                       files + " " + subject +
                       " -addext basicConstraints=critical,CA:TRUE"
                       " -addext keyUsage=critical,keyCertSign");
}

// The broker's certificates in `dir`: ca.pem signs server.pem, whose only
// name is IP 127.0.0.1 (so "localhost" must not match); other-ca.pem is a
// second CA that signed nothing here. Returns the directory.
std::string make_broker_certificates(const testing::TempDir& dir) {
  make_ca(dir.path(), "ca");
  make_ca(dir.path(), "other-ca");
  run_openssl(dir.path(),
              "req -x509 -CA ca.pem -CAkey ca.key -newkey ec -pkeyopt "
              "ec_paramgen_curve:prime256v1 -noenc -days 2 -keyout server.key -out server.pem "
              "-subj /CN=dnnlab-test-broker -addext subjectAltName=IP:127.0.0.1 "
              "-addext basicConstraints=CA:FALSE -addext extendedKeyUsage=serverAuth");
  return dir.path().string();
}

// One TLS broker for the tests of this process (ctest runs each test in a
// process of its own), stopped with its epmd at exit. Members are destroyed
// in reverse: the node stops before its certificates go.
struct TlsBroker {
  testing::TempDir certs;
  testing::RabbitMqServer server{make_broker_certificates(certs)};
};

TlsBroker& tls_broker() {
  static auto broker = std::make_unique<TlsBroker>();
  return *broker;
}

// SSL_CERT_FILE (OpenSSL's system CA file) set for one scope.
class ScopedCertFile {
 public:
  explicit ScopedCertFile(const std::string& path) { setenv("SSL_CERT_FILE", path.c_str(), 1); }
  ~ScopedCertFile() { unsetenv("SSL_CERT_FILE"); }
  ScopedCertFile(const ScopedCertFile&) = delete;
  ScopedCertFile& operator=(const ScopedCertFile&) = delete;
};

std::string tls_queue(const std::string& base) {
  return base + "." + std::to_string(getpid());
}

class AmqpTls : public ::testing::Test {
 protected:
  void SetUp() override {
    TlsBroker& b = tls_broker();
    DNNLAB_REQUIRE_RABBITMQ(b.server.installed() ? b.server.url() : std::string());
    ASSERT_NE(b.server.amqps_url(), "") << "the node was started without its TLS listener";
    amqps_ = b.server.amqps_url();
    plain_ = b.server.url();
    ca_ = b.certs.file("ca.pem");
    other_ca_ = b.certs.file("other-ca.pem");
  }

  // What opening `url` throws, and how long it took. A refusal that was
  // retried would take busy_timeout_seconds (6 s here; 30 by default).
  std::pair<std::string, double> refusal(const std::string& url) {
    TaskQueueOptions o;
    o.busy_timeout_seconds = 6;
    const auto start = TlsClock::now();
    std::string what = "(connected)";
    try {
      AmqpTaskQueue q(url, o);
    } catch (const std::exception& e) {
      what = e.what();
    }
    return {what, std::chrono::duration<double>(TlsClock::now() - start).count()};
  }

  std::string amqps_, plain_, ca_, other_ca_;
};

// A producer that trusts the system's CAs (SSL_CERT_FILE names our CA: with
// rabbitmq-c alone, amqps:// without cacert trusted nothing) and two workers
// given cacert= share the tasks; the certificate names 127.0.0.1 as an IP
// address, which rabbitmq-c alone did not match.
TEST_F(AmqpTls, TasksArriveExactlyOnceOverTls) {
  const std::string queue = tls_queue("tls");
  constexpr int kTasks = 60;
  std::vector<std::string> first, second;
  for (int i = 0; i < kTasks / 2; ++i) first.push_back("t" + std::to_string(i));
  for (int i = kTasks / 2; i < kTasks; ++i) second.push_back("t" + std::to_string(i));
  {
    ScopedCertFile system_ca(ca_);
    AmqpTaskQueue producer(amqps_, {});
    producer.publish_batch(queue, first);
    for (const auto& t : second) producer.publish(queue, t);
  }
  AmqpTaskQueue w1(amqps_ + "?cacert=" + ca_ + "&prefetch=4", {});
  AmqpTaskQueue w2(amqps_ + "?cacert=" + ca_, {});
  std::map<std::string, int> acked;
  const auto give_up = TlsClock::now() + std::chrono::seconds(10);
  int idle = 0;
  while (idle < 3 && TlsClock::now() < give_up) {
    bool any = false;
    for (AmqpTaskQueue* w : {&w1, &w2}) {
      if (auto lease = w->lease(queue, "w", 60)) {
        any = true;
        EXPECT_EQ(lease->attempt, 1) << lease->payload;
        EXPECT_TRUE(w->ack(*lease)) << lease->payload;
        ++acked[lease->payload];
      }
    }
    idle = any ? 0 : idle + 1;
  }
  EXPECT_EQ(acked.size(), static_cast<size_t>(kTasks)) << "tasks lost";
  for (const auto& [payload, n] : acked) EXPECT_EQ(n, 1) << payload << " leased twice";
  EXPECT_EQ(w1.waiting(queue), 0);
}

// Each refusal is an exception naming TLS and its cause, at once: none of
// them would get better by retrying.
TEST_F(AmqpTls, UntrustedWrongNameAndPlainPortAreRefusedAtOnceAndByName) {
  struct Case {
    std::string what, url;
    std::vector<std::string> expect;  // in the message
  };
  const std::string port = amqps_.substr(amqps_.rfind(':'));  // ":PORT/%2f"
  const std::string plain_port = plain_.substr(plain_.rfind(':'));
  // The broker sends its CA with its certificate, so an untrusted chain ends
  // in a self-signed certificate ("self signed" before OpenSSL 3).
  for (const Case& c : std::vector<Case>{
           {"another CA",
            amqps_ + "?cacert=" + other_ca_,
            {"TLS certificate verification of 127.0.0.1", "certificate chain", "/CN=dnnlab test ca",
             "trusted: cacert '" + other_ca_ + "'"}},
           {"the system's CAs",
            amqps_,
            {"TLS certificate verification of 127.0.0.1", "certificate chain",
             "trusted: the system's CA certificates"}},
           {"a name not in the certificate",
            "amqps://guest:guest@localhost" + port + "?cacert=" + ca_,
            {"TLS certificate verification of localhost", "hostname mismatch"}},
           {"the plain port",
            "amqps://guest:guest@127.0.0.1" + plain_port + "?cacert=" + ca_,
            {"TLS handshake with 127.0.0.1", "does not speak TLS", "plain AMQP port"}},
       }) {
    SCOPED_TRACE(c.what);
    const auto [what, seconds] = refusal(c.url);
    for (const auto& part : c.expect) EXPECT_NE(what.find(part), std::string::npos) << what;
    EXPECT_EQ(what.find("guest:guest"), std::string::npos) << "the password shows: " << what;
    EXPECT_LT(seconds, 5.0) << what;
  }
  // A CA file that is not there is the URL's fault, named by its parameter.
  const auto [missing, seconds] = refusal(amqps_ + "?cacert=" + ca_ + ".missing");
  EXPECT_NE(missing.find("'cacert'"), std::string::npos) << missing;
  EXPECT_LT(seconds, 5.0);
  // And the trusted broker still answers on that port.
  AmqpTaskQueue ok(amqps_ + "?cacert=" + ca_, {});
  EXPECT_EQ(ok.waiting(tls_queue("tls.refusals")), 0);
}

}  // namespace
}  // namespace dnnlab::queue
