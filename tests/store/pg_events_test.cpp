// The PostgreSQL store's events cursor and counts without a shared counter
// row (schema 8, trial_events.hpp): writers append to event_inbox and
// trial_count_deltas and never wait on each other; readers number the events.
// Raw libpq connections hold transactions open where the store's own calls
// would not: an event written by the first-started transaction, committed
// last, must still reach a reader whose cursor is already past the others.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>

#include "db/pg_db.hpp"
#include "store/pg_result_store.hpp"
#include "store/pg_server.hpp"
#include "store/result_store.hpp"

namespace dnnlab::store {
namespace {

#define REQUIRE_PG(pg)                                                 \
  if (!(pg)) {                                                         \
    if (std::getenv("CI")) FAIL() << testing::PgServer::why_missing(); \
    GTEST_SKIP() << testing::PgServer::why_missing();                  \
  }

// What the store's write_event does inside a trial write's transaction.
void write_inbox_event(pg::Connection& c, const std::string& type) {
  pg::Params p;
  p.add(1.0).add(type).add("{}");
  c.query("INSERT INTO event_inbox (time, type, data) VALUES ($1, $2, $3)", p);
}

std::int64_t fresh_experiment(ResultStore& s) {
  ExperimentRecord e;
  e.name = "events";
  e.spec_text = "x";
  return s.create_experiment(e);
}

TEST(PgEvents, AnEventCommittedLastByTheFirstStartedWriterIsNotSkipped) {
  auto* pg = testing::PgServer::shared();
  REQUIRE_PG(pg);
  const std::string url = pg->new_database();
  PgResultStore store(url);  // creates the schema
  pg::Connection first(url), second(url), aborted(url);

  // `first` starts first (the smaller xid, and with a naive sequence the
  // smaller id), `second` commits first; `aborted` never commits.
  first.exec("BEGIN");
  write_inbox_event(first, "test.first");
  aborted.exec("BEGIN");
  write_inbox_event(aborted, "test.aborted");
  second.exec("BEGIN");
  write_inbox_event(second, "test.second");
  second.exec("COMMIT");

  // The reader neither waits for the open transactions nor sees them.
  auto seen = store.events_since(0, 100);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].type, "test.second");
  const std::int64_t cursor = seen[0].id;

  first.exec("COMMIT");
  aborted.exec("ROLLBACK");
  seen = store.events_since(cursor, 100);
  ASSERT_EQ(seen.size(), 1u) << "the late commit's event was skipped by the cursor";
  EXPECT_EQ(seen[0].type, "test.first");
  EXPECT_EQ(seen[0].id, cursor + 1) << "ids are gap-free: the rolled-back event took none";

  // append_event numbers its event at once, after everything committed before.
  second.exec("BEGIN");
  write_inbox_event(second, "test.third");
  second.exec("COMMIT");
  EXPECT_EQ(store.append_event("test.appended", {{"k", 1}}), cursor + 3);
  seen = store.events_since(cursor + 1, 100);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].type, "test.third");
  EXPECT_EQ(seen[1].type, "test.appended");
  EXPECT_EQ(store.events_of_type("test.first").size(), 1u);
}

// Two workers' trial writes used to queue on event_cursor's and
// trial_counts' rows until the other committed (one fsync each).
TEST(PgEvents, ATrialWriteDoesNotWaitForAnotherWritersOpenTransaction) {
  auto* pg = testing::PgServer::shared();
  REQUIRE_PG(pg);
  const std::string url = pg->new_database();
  PgResultStore store(url);
  const auto exp = fresh_experiment(store);
  const auto ids = store.add_trials(exp, {{0, "{}", 1u}, {1, "{}", 2u}});
  ASSERT_TRUE(store.mark_running(ids[0], 1, "w1", nlohmann::json::object()));

  // Another worker mid-flush: its trial's row, an event and count deltas
  // written, not committed.
  pg::Connection other(url);
  other.exec("BEGIN");
  pg::Params key;
  key.add(ids[1]);
  other.query("UPDATE trials SET status = 'running', attempt = 1, worker = 'w2' WHERE id = $1",
              key);
  write_inbox_event(other, "trial.started");
  pg::Params d;
  d.add(exp);
  other.query("INSERT INTO trial_count_deltas VALUES ($1, 'queued', -1), ($1, 'running', 1)", d);

  auto write = std::async(std::launch::async, [&] {
    PgResultStore w1(url);
    ResultBatch b;
    b.ends.push_back({ids[0], 1, TrialStatus::finished, {}, ""});
    return w1.record_results(b).ends;
  });
  const bool done = write.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  other.exec("COMMIT");
  ASSERT_TRUE(done) << "record_results waited for another writer's commit";
  EXPECT_EQ(write.get(), std::vector<bool>{true});

  const TrialCounts c = store.trial_counts(exp);
  EXPECT_EQ(c.queued, 0);
  EXPECT_EQ(c.running, 1);
  EXPECT_EQ(c.finished, 1);
  // Folded by that read: the same answer from the table alone.
  EXPECT_EQ(store.trial_counts(exp).finished, 1);
  pg::Result left = other.query("SELECT count(*) FROM trial_count_deltas");
  EXPECT_EQ(left.integer(0, 0), 0);
}

// A database made by a schema-7 build (events numbered from event_cursor,
// counts in trial_counts) keeps its ids and counts when schema 8 is added.
TEST(PgEvents, MigratingASchema7DatabaseKeepsIdsAndCounts) {
  auto* pg = testing::PgServer::shared();
  REQUIRE_PG(pg);
  const std::string url = pg->new_database();
  std::int64_t exp = 0, last = 0;
  {
    PgResultStore store(url);
    exp = fresh_experiment(store);
    store.add_trials(exp, {{0, "{}", 1u}, {1, "{}", 2u}});
    last = store.append_event("test.old", {});
    store.trial_counts(exp);  // folds the deltas into trial_counts
  }
  pg::Connection c(url);
  c.exec(
      "DROP TABLE event_inbox, trial_count_deltas, trial_weights; "
      "ALTER TABLE trials DROP COLUMN pinned; "
      "UPDATE schema_version SET version = 7 WHERE component = 'store'");
  PgResultStore store(url);
  EXPECT_EQ(pg::schema_version(c, "store"), 9);
  EXPECT_EQ(store.trial_counts(exp).queued, 2);
  EXPECT_EQ(store.append_event("test.new", {}), last + 1);
}

}  // namespace
}  // namespace dnnlab::store
