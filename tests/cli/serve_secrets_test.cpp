// Issue 24, item 6: `dnnlab serve` and `dnnlab run` never print a store's or
// a broker's password, in any form a URL or libpq connection string can
// carry it, also when opening the store fails (the error names the URL).
// tests/cli/pg/serve_secrets_pg_test.cpp does the same against a PostgreSQL
// server, where the start succeeds and the start lines are printed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "cli_util.hpp"

namespace dnnlab::cli_test {
namespace {

// `dnnlab serve` fails to reach its store or broker (nothing listens on port
// 1): the error names the URL, with its secrets hidden. (`dnnlab run` waits
// for a store server up to StoreOptions::reconnect_seconds, 300 s: its start
// lines are checked against a real server in the pg test. An unreachable
// AMQP broker is retried for 30 s: its URL's redaction is left to
// tests/store/backend_url_test.cpp.)
TEST(ServeSecrets, FailedStartsPrintNoPassword) {
  TempDir dir;
  const std::string q = "sqlite:" + (dir.path / "q.db").string();
  struct Case {
    std::string args, secret;
  };
  const std::vector<Case> cases = {
      {"serve --listen 127.0.0.1:0 --broker " + q +
           " --store 'postgres://alice:pw-userinfo-1@127.0.0.1:1/runs'",
       "pw-userinfo-1"},
      {"serve --listen 127.0.0.1:0 --broker " + q +
           " --store 'postgres://alice@127.0.0.1:1/runs?connect_timeout=2&password=pw-query-2'",
       "pw-query-2"},
      {"serve --listen 127.0.0.1:0 --broker " + q +
           " --store 'host=127.0.0.1 port=1 password=pw-keyword-3'",
       "pw-keyword-3"},
  };
  for (const auto& c : cases) {
    Result r = run(c.args);
    EXPECT_NE(r.code, 0) << c.args << "\n" << r.out << r.err;
    EXPECT_EQ((r.out + r.err).find(c.secret), std::string::npos)
        << "`dnnlab " << c.args << "` printed its password:\n"
        << r.out << r.err;
    EXPECT_NE((r.out + r.err).find("***"), std::string::npos)
        << "no redacted URL in the error of `dnnlab " << c.args << "`:\n"
        << r.out << r.err;
  }
}

// `serve` takes its URLs from the environment too (what dnnlab.service does),
// so that a password is not on its command line, which `ps` shows to everyone.
TEST(ServeSecrets, UrlsComeFromTheEnvironment) {
  TempDir dir;
  const std::string q = "sqlite:" + (dir.path / "env-queue.db").string();
  Result r = run("serve --listen 127.0.0.1:0",
                 "DNNLAB_STORE_URL='postgres://alice:pw-env-4@127.0.0.1:1/from-env' "
                 "DNNLAB_BROKER_URL=" +
                     q);
  EXPECT_NE(r.code, 0) << r.out << r.err;
  // It tried the store it was given: the error names it, without the password.
  EXPECT_NE((r.out + r.err).find("from-env"), std::string::npos) << r.out << r.err;
  EXPECT_EQ((r.out + r.err).find("pw-env-4"), std::string::npos) << r.out << r.err;
  // A flag still wins over the environment.
  const std::string store = "sqlite:" + (dir.path / "flag.db").string();
  setenv("DNNLAB_STORE_URL", "postgres://alice@127.0.0.1:1/not-this-one", 1);
  const pid_t pid = spawn(dir.path, {"serve", "--listen", "127.0.0.1:0", "--store", store});
  unsetenv("DNNLAB_STORE_URL");
  bool served = false;
  for (int i = 0; i < 200 && !served; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    served = slurp(dir.path / "out.txt").find("dnnlab serving") != std::string::npos;
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(served) << slurp(dir.path / "log.txt");
  EXPECT_TRUE(std::filesystem::exists(dir.path / "flag.db"));
}

// The store and broker URLs (which may hold passwords) reach a worker slot
// through its environment, readable by its user only, not its command line,
// which `ps` shows to everyone.
TEST(WorkerSecrets, SlotsGetTheUrlsOutsideTheirCommandLine) {
  TempDir dir;
  const std::string store = "sqlite:" + (dir.path / "secret-store-name.db").string();
  const pid_t parent = spawn(dir.path, {"worker", "--slots", "2", "--store", store, "--idle-exit",
                                        "30", "--id", "secrets-test"});
  // Find the slot: a process whose command line ends --exit-with-parent PARENT.
  std::string slot_cmdline, slot_environ;
  for (int i = 0; i < 200 && slot_cmdline.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string cmd = slurp(e.path() / "cmdline");
      if (cmd.find(std::string("--exit-with-parent") + '\0' + std::to_string(parent)) ==
          std::string::npos)
        continue;
      slot_cmdline = cmd;
      slot_environ = slurp(e.path() / "environ");
    }
  }
  kill(parent, SIGTERM);
  int status = 0;
  waitpid(parent, &status, 0);
  ASSERT_FALSE(slot_cmdline.empty()) << "no worker slot of " << parent << " found";
  EXPECT_EQ(slot_cmdline.find("secret-store-name"), std::string::npos) << slot_cmdline;
  EXPECT_NE(slot_environ.find("DNNLAB_STORE_URL=" + store), std::string::npos);
  EXPECT_NE(slot_cmdline.find("secrets-test-"), std::string::npos) << slot_cmdline;
}

}  // namespace
}  // namespace dnnlab::cli_test
