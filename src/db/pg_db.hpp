// The PostgreSQL connection the store's postgres:// backend uses: RAII for
// PGconn and PGresult, statements prepared once per connection, transactions
// (a savepoint when nested) and versioned migrations per component, like
// sqlite_db.hpp. Internal to src/store (and src/db); nothing else includes it.
//
//   pg::Connection c("postgres://dnnlab@127.0.0.1:5432/dnnlab");
//   pg::Params p;
//   p.add(std::int64_t{7}).add("w1");
//   pg::Result r = c.query("SELECT status FROM trials WHERE id = $1 AND worker = $2", p);
//   if (r.rows()) use(r.text(0, 0));
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dnnlab::pg {

// A PostgreSQL call failed; sqlstate() is the five-character SQLSTATE ("23505"
// unique violation, "08006" connection failure, "" when libpq had no answer).
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::string sqlstate)
      : std::runtime_error(message), sqlstate_(std::move(sqlstate)) {}
  const std::string& sqlstate() const noexcept { return sqlstate_; }
  // The connection is gone (server down, network): the call may be retried
  // on a new connection; nothing of the failed transaction was kept.
  bool connection_lost() const noexcept {
    return sqlstate_.empty() || sqlstate_.starts_with("08") || sqlstate_ == "57P01";
  }
  // The connection went while COMMIT was on its way: the transaction may
  // have been kept or not. Only an idempotent transaction may be run again.
  bool commit_unknown() const noexcept { return commit_unknown_; }
  Error& at_commit() noexcept {
    commit_unknown_ = connection_lost();
    return *this;
  }

 private:
  std::string sqlstate_;
  bool commit_unknown_ = false;
};

class SchemaVersionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ConnDeleter {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
struct ResultDeleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnDeleter>;
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// Parameters in text form ($1, $2, ... in order); null() is SQL NULL.
class Params {
 public:
  Params& add(std::int64_t v) { return put(std::to_string(v)); }
  Params& add(int v) { return put(std::to_string(v)); }
  Params& add(double v);
  Params& add(std::optional<double> v) { return v ? add(*v) : null(); }
  Params& add(std::string_view v) { return put(std::string(v)); }
  Params& add(const char* v) { return put(std::string(v)); }
  Params& add(const std::string& v) { return put(v); }
  Params& add(bool v) { return put(v ? "true" : "false"); }
  // A PostgreSQL array literal ("{1,NULL,\"a b\"}") for one $n of type
  // T[], so that one statement (INSERT ... SELECT FROM unnest($1, $2, ...))
  // carries a whole batch of rows: one round trip instead of one per row.
  Params& add_array(const std::vector<std::optional<std::string>>& elements);
  Params& add_array(const std::vector<std::int64_t>& v);
  Params& add_array(const std::vector<double>& v);
  Params& add_array(const std::vector<std::optional<double>>& v);
  Params& add_array(const std::vector<std::string>& v);
  Params& null() {
    values_.emplace_back();
    null_.push_back(true);
    return *this;
  }
  std::size_t size() const { return values_.size(); }
  std::vector<const char*> pointers() const;

 private:
  Params& put(std::string v) {
    values_.push_back(std::move(v));
    null_.push_back(false);
    return *this;
  }
  std::vector<std::string> values_;
  std::vector<bool> null_;
};

// The rows of one statement. Column values are read from their text form.
class Result {
 public:
  explicit Result(ResultPtr r) : r_(std::move(r)) {}
  int rows() const { return PQntuples(r_.get()); }
  std::int64_t affected() const;  // rows an INSERT/UPDATE/DELETE changed
  bool is_null(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
  std::int64_t integer(int row, int col) const;
  double real(int row, int col) const;
  std::optional<double> opt_real(int row, int col) const;
  std::optional<std::int64_t> opt_integer(int row, int col) const;
  std::string text(int row, int col) const;  // NULL reads as ""
  bool boolean(int row, int col) const;

 private:
  ResultPtr r_;
};

// One connection. Not thread-safe: one per thread, opened after fork().
class Connection {
 public:
  explicit Connection(const std::string& url);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs `sql` (prepared on first use on this connection) with `params`.
  Result query(std::string_view sql, const Params& params = {});
  // Runs one or more statements without parameters (schema, BEGIN, ...).
  void exec(const std::string& sql);
  // The URL without its password, for messages.
  const std::string& shown() const { return shown_; }
  // Opens the connection again (after connection_lost()): statements are
  // prepared anew on first use. Throws Error (connection_lost()) while the
  // server cannot be reached. No transaction may be open on it.
  void reconnect();
  // Statements sent since the connection opened (each one round trip):
  // what batching saves is measured with it.
  std::int64_t round_trips() const { return round_trips_; }
  int depth() const { return depth_; }

 private:
  friend class Transaction;
  [[noreturn]] void fail(const PGresult* r, std::string_view what) const;
  void configure_session();  // on every (re)connect

  ConnPtr conn_;
  std::string shown_;
  std::unordered_map<std::string, std::string> prepared_;  // sql -> statement name
  int depth_ = 0;                                          // open transactions
  std::int64_t round_trips_ = 0;
};

// BEGIN ... COMMIT, rolled back unless commit() was called; inside another
// transaction on the same connection it is a savepoint. A connection lost
// during COMMIT throws an Error whose commit_unknown() is true.
class Transaction {
 public:
  explicit Transaction(Connection& c);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Connection& c_;
  int level_;
  bool open_ = true;
};

struct Migration {
  int version;
  std::string_view sql;
};

// Brings `component`'s schema to the last migration's version in one
// transaction, under an advisory lock (several processes may open a fresh
// database at once). Throws SchemaVersionError for a newer database.
void migrate(Connection& c, std::string_view component, std::span<const Migration> migrations);
int schema_version(Connection& c, std::string_view component);

}  // namespace dnnlab::pg
