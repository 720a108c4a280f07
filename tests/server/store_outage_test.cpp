// The server over a PostgreSQL store that goes away: requests that need the
// store get 503 with Retry-After after ServerOptions::store_wait_seconds
// (not the workers' 300 s of reconnecting, which would hold the io thread),
// requests that do not (the dashboard's files) are still served, and when the
// database is back the same server answers from it again.
#include <chrono>

#include "server_fixture.hpp"
#include "store/pg_server.hpp"

namespace dnnlab::server::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST(StoreOutage, RequestsGet503WhilePostgresIsDownAndTheServerRecovers) {
  // A server of its own: this test stops and starts it.
  auto pg = dnnlab::testing::PgServer::start_private();
  if (!pg) {
    if (std::getenv("CI")) FAIL() << dnnlab::testing::PgServer::why_missing();
    GTEST_SKIP() << dnnlab::testing::PgServer::why_missing();
  }
  TempDir dir;
  const std::string url = pg->new_database();
  const std::int64_t exp = populate(*store::open_result_store(url), 20);
  ServerOptions o;
  o.store_url = url;
  o.broker_url = "sqlite:" + dir.file("queue.db");
  o.run_coordinators = false;
  o.store_wait_seconds = 1;
  RunningServer server(o);
  const std::string trial_list = "/api/experiments/" + std::to_string(exp) + "/trials";
  ASSERT_EQ(server.get(trial_list).status, 200u);

  pg->stop();
  for (const std::string& target :
       {std::string("/api/experiments"), trial_list, "/api/experiments/" + std::to_string(exp)}) {
    const auto t0 = Clock::now();
    HttpReply r = server.get(target);
    EXPECT_EQ(r.status, 503u) << target << ": " << r.body;
    EXPECT_NE(r.body.find("the result store is unreachable"), std::string::npos) << r.body;
    EXPECT_LT(Clock::now() - t0, 8s) << target << " waited for the store";
  }
  // What does not need the store is still served: the dashboard's page.
  EXPECT_EQ(server.get("/").status, 200u);

  pg->start();
  unsigned status = 0;
  for (auto give_up = Clock::now() + 30s; status != 200 && Clock::now() < give_up;) {
    status = server.get(trial_list).status;
    if (status != 200) std::this_thread::sleep_for(200ms);
  }
  ASSERT_EQ(status, 200u) << "the server did not answer from the store after it came back";
  json trials = parse(server.get(trial_list));
  EXPECT_EQ(trials["total"], 20);
  // The 503s were counted like any answer.
  EXPECT_NE(server.get("/metrics").body.find("code=\"503\""), std::string::npos);
}

}  // namespace
}  // namespace dnnlab::server::testing
