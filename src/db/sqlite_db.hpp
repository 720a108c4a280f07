// The embedded SQLite connection shared by the queue and store backends: RAII
// handles, a per-connection statement cache, write transactions and versioned
// migrations. Internal to src/queue and src/store; nothing else may include it.
#pragma once

#include <sqlite3.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>

namespace dnnlab::sqlite {

// An SQLite call failed (I/O, corruption, a lock held past the busy timeout).
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int code) : std::runtime_error(message), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// The file was written by a newer dnnlab whose schema this build does not know.
class SchemaVersionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ConnectionDeleter {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct StatementDeleter {
  void operator()(sqlite3_stmt* stmt) const noexcept { sqlite3_finalize(stmt); }
};
using ConnectionPtr = std::unique_ptr<sqlite3, ConnectionDeleter>;
using StatementPtr = std::unique_ptr<sqlite3_stmt, StatementDeleter>;

class Database;

// A cached prepared statement in use. Binding indexes are 1-based like SQLite's;
// column indexes are 0-based. The destructor resets the statement for reuse.
class Statement {
 public:
  Statement(sqlite3_stmt* stmt, Database& db) : stmt_(stmt), db_(&db) {}
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  Statement& bind_int(int i, std::int64_t v);
  Statement& bind_double(int i, double v);
  Statement& bind_opt_double(int i, const std::optional<double>& v);
  Statement& bind_text(int i, std::string_view v);
  Statement& bind_blob(int i, std::string_view v);
  Statement& bind_null(int i);

  // Steps once: true when a row is available, false when the statement is done.
  bool step();
  // Runs a statement that returns no rows (or whose rows are ignored).
  void run();

  bool is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::int64_t column_int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double column_double(int col) const { return sqlite3_column_double(stmt_, col); }
  std::optional<double> column_opt_double(int col) const;
  std::optional<std::int64_t> column_opt_int(int col) const;
  std::string column_text(int col) const;  // NULL reads as ""

 private:
  sqlite3_stmt* stmt_;
  Database* db_;
};

struct DatabaseOptions {
  // How long a writer waits for another process's write transaction.
  double busy_timeout_seconds = 30.0;
};

// One connection to one database file. Not thread-safe: one per thread. Open it
// in the process that uses it (after fork()); a connection used from another
// process than the one that opened it throws std::logic_error.
class Database {
 public:
  Database(const std::string& path, const DatabaseOptions& options = {});
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Returns the cached prepared statement for `sql`, preparing it on first use.
  Statement prepare(std::string_view sql);
  // Runs one or more statements without caching (schema changes, pragmas).
  void exec(const std::string& sql);

  std::int64_t changes() const { return sqlite3_changes64(db_.get()); }
  // True inside BEGIN ... COMMIT on this connection.
  bool in_transaction() const { return sqlite3_get_autocommit(db_.get()) == 0; }
  std::int64_t last_insert_rowid() const { return sqlite3_last_insert_rowid(db_.get()); }
  const std::string& path() const { return path_; }

  [[noreturn]] void fail(int rc, std::string_view what) const;
  void check_process() const;

 private:
  static int on_busy(void* self, int tries);

  // Declared before the cache so statements are finalized before the close.
  ConnectionPtr db_;
  // Transparent hash: looking a statement up by string_view allocates nothing.
  struct SqlHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view sql) const noexcept {
      return std::hash<std::string_view>{}(sql);
    }
  };
  std::unordered_map<std::string, StatementPtr, SqlHash, std::equal_to<>> cache_;
  std::string path_;
  pid_t owner_pid_;
  double busy_timeout_seconds_ = 30.0;
  double busy_since_ = 0.0;
};

// BEGIN IMMEDIATE ... COMMIT: takes the write lock up front so that a
// read-then-write transaction never fails half way with SQLITE_BUSY.
// Rolls back unless commit() was called. Inside another transaction on the
// same connection (a queue and a store sharing one file, written together)
// it is a savepoint: commit() releases it into the outer transaction, and
// without commit() only its own writes are undone.
class WriteTransaction {
 public:
  explicit WriteTransaction(Database& db);
  ~WriteTransaction();
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;
  void commit();

 private:
  Database& db_;
  bool nested_ = false;
  bool open_ = true;
};

struct Migration {
  int version;           // 1, 2, 3 ... in order
  std::string_view sql;  // statements that take the schema from version-1 to version
};

// Brings `component`'s schema to the last migration's version in one write
// transaction. Several components share one file, so versions are kept per
// component in the schema_version table. Throws SchemaVersionError when the
// file holds a newer version than `migrations` knows.
void migrate(Database& db, std::string_view component, std::span<const Migration> migrations);
int schema_version(Database& db, std::string_view component);

// Seconds since the Unix epoch.
double unix_now();

}  // namespace dnnlab::sqlite
