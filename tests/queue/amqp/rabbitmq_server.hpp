// A private RabbitMQ for tests, on 127.0.0.1 in a temporary directory, run
// by scripts/rabbitmq_test_server.sh and stopped (its epmd too) at the end.
//
//   // one broker for the whole ctest run (the "rabbitmq" ctest fixture), or,
//   // when the binary runs on its own, one for this process:
//   std::string url = dnnlab::testing::shared_rabbitmq_url();
//   DNNLAB_REQUIRE_RABBITMQ(url);   // skips, or fails under CI, when not installed
//
//   dnnlab::testing::RabbitMqServer own;   // a broker of one's own, to restart
//   own.stop(); own.start();               // same port and data: durable queues survive
//   dnnlab::testing::RabbitMqServer tls(certs);  // also TLS: certs/{ca,server}.pem, server.key
//   tls.amqps_url();                             // amqps://guest:guest@127.0.0.1:PORT/%2f
//   rabbitmq_ctl(shared_rabbitmq_dir(), "set_policy ...");   // rabbitmqctl on a node
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace dnnlab::testing {

inline std::filesystem::path rabbitmq_script() {
  const char* src = std::getenv("DNNLAB_SOURCE_DIR");
  std::filesystem::path root = src ? src : DNNLAB_SOURCE_DIR_FALLBACK;
  return root / "scripts" / "rabbitmq_test_server.sh";
}

class RabbitMqServer {
 public:
  // Starts a node in a fresh temporary directory. installed() is false when
  // rabbitmq-server is missing (the script's exit 77); other failures throw.
  // With `tls_dir`, the node also listens for TLS with the certificates there
  // (DNNLAB_TEST_RABBITMQ_TLS_DIR in scripts/rabbitmq_test_server.sh).
  explicit RabbitMqServer(std::string tls_dir = "") : tls_dir_(std::move(tls_dir)) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dnnlab-rmq-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    start();
  }
  ~RabbitMqServer() {
    run("stop", " --rm");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    std::filesystem::remove(dir_ + ".log", ec);
  }
  RabbitMqServer(const RabbitMqServer&) = delete;
  RabbitMqServer& operator=(const RabbitMqServer&) = delete;

  bool installed() const { return installed_; }
  const std::string& url() const { return url_; }
  // "" unless started with a tls_dir.
  const std::string& amqps_url() const { return amqps_url_; }

  void start() {
    int rc = run("start", "");
    if (rc == 77) {
      installed_ = false;
      return;
    }
    if (rc != 0) throw std::runtime_error("rabbitmq_test_server.sh start failed (" + dir_ + ")");
    std::ifstream in(dir_ + "/url");
    std::getline(in, url_);
    std::ifstream tls(dir_ + "/amqps_url");
    if (tls) std::getline(tls, amqps_url_);
  }
  void stop() { run("stop", ""); }
  const std::string& dir() const { return dir_; }

 private:
  int run(const std::string& cmd, const std::string& extra) {
    const std::string env =
        tls_dir_.empty() ? "" : "DNNLAB_TEST_RABBITMQ_TLS_DIR='" + tls_dir_ + "' ";
    std::string line = env + "'" + rabbitmq_script().string() + "' " + cmd + " '" + dir_ + "'" +
                       extra + " >/dev/null 2>>'" + dir_ + ".log'";
    int status = std::system(line.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }

  std::string tls_dir_;
  std::string dir_;
  std::string url_;
  std::string amqps_url_;
  bool installed_ = true;
};

// The directory of the ctest fixture's broker (DNNLAB_TEST_RABBITMQ_DIR),
// else of one started for this process and stopped at its exit; "" when
// rabbitmq-server is not installed.
inline std::string shared_rabbitmq_dir() {
  if (const char* dir = std::getenv("DNNLAB_TEST_RABBITMQ_DIR")) {
    std::ifstream in(std::string(dir) + "/url");
    std::string url;
    if (std::getline(in, url) && !url.empty()) return dir;
  }
  static std::unique_ptr<RabbitMqServer> own = std::make_unique<RabbitMqServer>();
  return own->installed() ? own->dir() : std::string();
}

// Its amqp:// URL; "" when not installed.
inline std::string shared_rabbitmq_url() {
  const std::string dir = shared_rabbitmq_dir();
  if (dir.empty()) return "";
  std::ifstream in(dir + "/url");
  std::string url;
  std::getline(in, url);
  return url;
}

// rabbitmqctl ARGS (quoted for sh) on the node in `dir`; its exit status.
inline int rabbitmq_ctl(const std::string& dir, const std::string& args) {
  const std::string line = "'" + rabbitmq_script().string() + "' ctl '" + dir + "' " + args +
                           " >/dev/null 2>>'" + dir + ".log'";
  const int status = std::system(line.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace dnnlab::testing

// In a test body or SetUp(): no broker is a skip, but a failure under CI.
#define DNNLAB_REQUIRE_RABBITMQ(url)                                             \
  do {                                                                           \
    if ((url).empty()) {                                                         \
      if (std::getenv("CI"))                                                     \
        FAIL() << "rabbitmq-server is not installed (under CI this "             \
                  "test may not skip; run scripts/bootstrap.sh)";                \
      GTEST_SKIP() << "rabbitmq-server is not installed (scripts/bootstrap.sh)"; \
    }                                                                            \
  } while (0)
