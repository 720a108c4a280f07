// The REST tests run on every store backend, like the store suite: an SQLite
// file, and a fresh database on the test process's PostgreSQL server
// (tests/store/pg_server.hpp). A PostgreSQL store takes an SQLite queue
// beside it (the server's queue defaults to the store URL, which must then
// be a queue URL).
//
//   INSTANTIATE_TEST_SUITE_P(Stores, ApiTest, DNNLAB_STORE_BACKENDS, store_backend_name);
//   url_ = store_url(GetParam(), dir_);  DNNLAB_REQUIRE_STORE(url_);
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "server_fixture.hpp"
#include "store/pg_server.hpp"

namespace dnnlab::server::testing {

#define DNNLAB_STORE_BACKENDS ::testing::Values(std::string("sqlite"), std::string("postgres"))

inline std::string store_backend_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// "" when PostgreSQL cannot run here.
inline std::string store_url(const std::string& backend, const TempDir& dir) {
  if (backend == "sqlite") return "sqlite:" + dir.file("dnnlab.db");
  if (auto* pg = dnnlab::testing::PgServer::shared()) return pg->new_database();
  return {};
}

// The queue a server over `store` uses.
inline std::string broker_url(const std::string& store, const TempDir& dir) {
  return store.rfind("sqlite:", 0) == 0 ? store : "sqlite:" + dir.file("queue.db");
}

// No server for the backend: skipped, saying why, and a failure under CI.
#define DNNLAB_REQUIRE_STORE(url)                                                \
  do {                                                                           \
    if ((url).empty()) {                                                         \
      if (std::getenv("CI")) FAIL() << dnnlab::testing::PgServer::why_missing(); \
      GTEST_SKIP() << dnnlab::testing::PgServer::why_missing();                  \
    }                                                                            \
  } while (0)

}  // namespace dnnlab::server::testing
