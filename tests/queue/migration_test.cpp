// Versioned migrations of the shared SQLite file: fresh, reopened, failed and
// newer-than-this-build databases.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>

#include "db/sqlite_db.hpp"
#include "queue/task_queue.hpp"
#include "test_support.hpp"

namespace dnnlab::sqlite {
namespace {

constexpr std::array<Migration, 2> kTwo{{
    {1, "CREATE TABLE a (x INTEGER);"},
    {2, "CREATE TABLE b (y INTEGER); INSERT INTO a VALUES (42);"},
}};

std::int64_t count_rows(Database& db, const std::string& table) {
  auto s = db.prepare("SELECT count(*) FROM " + table);
  s.step();
  return s.column_int(0);
}

TEST(Migrations, FreshDatabaseGetsTheLatestVersion) {
  testing::TempDir dir;
  Database db(dir.file("m.db"));
  EXPECT_EQ(schema_version(db, "demo"), 0);
  migrate(db, "demo", kTwo);
  EXPECT_EQ(schema_version(db, "demo"), 2);
  EXPECT_EQ(count_rows(db, "a"), 1);
  EXPECT_EQ(count_rows(db, "b"), 0);
}

TEST(Migrations, AppliesOnlyTheMissingSteps) {
  testing::TempDir dir;
  {
    Database db(dir.file("m.db"));
    migrate(db, "demo", std::span(kTwo).first(1));
    EXPECT_EQ(schema_version(db, "demo"), 1);
  }
  Database db(dir.file("m.db"));
  migrate(db, "demo", kTwo);
  EXPECT_EQ(schema_version(db, "demo"), 2);
  migrate(db, "demo", kTwo);  // reopening is a no-op
  EXPECT_EQ(count_rows(db, "a"), 1);
}

TEST(Migrations, ComponentsShareOneFile) {
  testing::TempDir dir;
  auto q = queue::open_task_queue(dir.url("shared.db"));
  Database db(dir.file("shared.db"));
  migrate(db, "demo", kTwo);
  EXPECT_EQ(schema_version(db, "queue"), 1);
  EXPECT_EQ(schema_version(db, "demo"), 2);
}

TEST(Migrations, AFailedMigrationChangesNothing) {
  testing::TempDir dir;
  Database db(dir.file("m.db"));
  constexpr std::array<Migration, 2> kBroken{{
      {1, "CREATE TABLE a (x INTEGER);"},
      {2, "CREATE TABLE c (z INTEGER); THIS IS NOT SQL;"},
  }};
  EXPECT_THROW(migrate(db, "demo", kBroken), Error);
  EXPECT_EQ(schema_version(db, "demo"), 0);
  auto s = db.prepare("SELECT count(*) FROM sqlite_schema WHERE name IN ('a', 'c')");
  s.step();
  EXPECT_EQ(s.column_int(0), 0);
}

TEST(Migrations, QueueReopenKeepsTasks) {
  testing::TempDir dir;
  queue::open_task_queue(dir.url("q.db"))->publish("exp", "kept");
  auto q = queue::open_task_queue(dir.url("q.db"));
  EXPECT_EQ(q->waiting("exp"), 1);
  Database db(dir.file("q.db"));
  EXPECT_EQ(schema_version(db, "queue"), 1);
  auto mode = db.prepare("PRAGMA journal_mode");
  mode.step();
  EXPECT_EQ(mode.column_text(0), "wal");
}

TEST(Migrations, NewerDatabaseIsRejectedClearly) {
  testing::TempDir dir;
  queue::open_task_queue(dir.url("q.db"))->publish("exp", "kept");
  {
    Database db(dir.file("q.db"));
    db.exec("UPDATE schema_version SET version = 99 WHERE component = 'queue'");
  }
  try {
    queue::open_task_queue(dir.url("q.db"));
    FAIL() << "a newer schema was accepted";
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("queue schema version 99"), std::string::npos) << msg;
    EXPECT_NE(msg.find("newer dnnlab"), std::string::npos) << msg;
    EXPECT_NE(msg.find("q.db"), std::string::npos) << msg;
  }
  Database db(dir.file("q.db"));
  EXPECT_EQ(schema_version(db, "queue"), 99);
  EXPECT_EQ(count_rows(db, "queue_tasks"), 1);
}

TEST(Database, UsingAConnectionAcrossForkIsAnError) {
  testing::TempDir dir;
  auto q = queue::open_task_queue(dir.url("q.db"));
  auto codes = testing::run_in_children(1, [&](int) {
    try {
      q->publish("exp", "from child");
    } catch (const std::logic_error& e) {
      return std::string(e.what()).find("after fork") != std::string::npos ? 0 : 2;
    }
    return 1;
  });
  EXPECT_EQ(codes.at(0), 0);
  EXPECT_EQ(q->waiting("exp"), 0);
}

TEST(Database, UnopenablePathNamesIt) {
  try {
    Database db("/nonexistent-dir/x/y.db");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x/y.db"), std::string::npos);
  }
}

}  // namespace
}  // namespace dnnlab::sqlite
