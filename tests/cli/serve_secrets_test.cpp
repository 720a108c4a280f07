// Issue 24, item 6: `dnnlab serve` and `dnnlab run` never print a store's or
// a broker's password, in any form a URL or libpq connection string can
// carry it, also when opening the store fails (the error names the URL).
// tests/cli/pg/serve_secrets_pg_test.cpp does the same against a PostgreSQL
// server, where the start succeeds and the start lines are printed.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dnnlab::cli_test
