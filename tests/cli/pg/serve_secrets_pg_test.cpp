// Issue 24, item 6, against a real PostgreSQL server: `dnnlab serve` and
// `dnnlab run` start with a store URL that carries a password (the test
// server trusts loopback, so any password connects) and print their start
// lines (the store among them) without it.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "../cli_util.hpp"
#include "store/pg_server.hpp"

namespace dnnlab::cli_test {
namespace {

using namespace std::chrono_literals;

// Starts `dnnlab ARGS` in `dir`, waits until `line` is in its output (stdout
// or stderr), stops it with SIGINT and returns everything it printed.
std::string output_of_start(const TempDir& dir, const std::vector<std::string>& args,
                            const std::string& line) {
  pid_t pid = spawn(dir.path, args);
  std::string printed;
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < give_up) {
    printed = slurp(dir.path / "out.txt") + slurp(dir.path / "log.txt");
    if (printed.find(line) != std::string::npos) break;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return printed + "\n(exited)";
    std::this_thread::sleep_for(50ms);
  }
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  return slurp(dir.path / "out.txt") + slurp(dir.path / "log.txt");
}

TEST(ServeSecretsPg, StartLinesPrintNoPassword) {
  auto* pg = testing::PgServer::shared();
  if (!pg) {
    if (std::getenv("CI")) FAIL() << testing::PgServer::why_missing();
    GTEST_SKIP() << testing::PgServer::why_missing();
  }
  // "postgres://postgres@127.0.0.1:PORT/NAME" with a password put in each
  // form libpq reads.
  const std::string url = pg->new_database();
  const auto at = url.find('@');
  const std::string userinfo = url.substr(0, at) + ":pw-userinfo-1" + url.substr(at);
  const std::string query = url + "?password=pw-query-2";
  for (const auto& [store, secret] : {std::pair{userinfo, std::string("pw-userinfo-1")},
                                      std::pair{query, std::string("pw-query-2")}}) {
    TempDir dir;
    const std::string q = "sqlite:" + (dir.path / "q.db").string();
    std::string out =
        output_of_start(dir, {"serve", "--listen", "127.0.0.1:0", "--store", store, "--broker", q},
                        "browsers join at");
    EXPECT_NE(out.find("dnnlab serving"), std::string::npos) << out;
    EXPECT_EQ(out.find(secret), std::string::npos) << "`dnnlab serve` printed the password:\n"
                                                   << out;
    EXPECT_NE(out.find("***"), std::string::npos) << out;

    dir.write("sweep.yaml", R"(name: secrets
template:
  data: {dataset: synthetic, limit_train: 200, validation: 32}
  model:
    layers: [{dense: 8, activation: relu}, {dense: 10}]
  train: {epochs: 1, batch_size: 32, optimizer: {type: sgd, lr: ${lr}}}
search:
  method: grid
  parameters: {lr: [0.1]}
)");
    out = output_of_start(dir,
                          {"run", "-w", "1", "--listen", "127.0.0.1:0", "--store", store,
                           "--broker", q, "sweep.yaml"},
                          "browsers join at");
    EXPECT_NE(out.find("store postgres://"), std::string::npos) << out;
    EXPECT_EQ(out.find(secret), std::string::npos) << "`dnnlab run` printed the password:\n" << out;
  }
}

}  // namespace
}  // namespace dnnlab::cli_test
