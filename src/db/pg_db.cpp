// PostgreSQL connection, statements, transactions and migrations (see pg_db.hpp).
#include "db/pg_db.hpp"

#include <charconv>
#include <cstdio>

#include "db/backend_url.hpp"

namespace dnnlab::pg {

namespace {

// One element of an array literal: quoted, with " and \ escaped.
void append_element(std::string& out, std::string_view v) {
  out += '"';
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  out += '"';
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

Params& Params::add(double v) {
  // %.17g round-trips a double exactly.
  return put(number_text(v));
}

Params& Params::add_array(const std::vector<std::optional<std::string>>& elements) {
  std::string s = "{";
  for (std::size_t i = 0; i < elements.size(); ++i) {
    if (i) s += ',';
    if (elements[i])
      append_element(s, *elements[i]);
    else
      s += "NULL";
  }
  s += '}';
  return put(std::move(s));
}

Params& Params::add_array(const std::vector<std::int64_t>& v) {
  std::vector<std::optional<std::string>> e;
  e.reserve(v.size());
  for (std::int64_t x : v) e.emplace_back(std::to_string(x));
  return add_array(e);
}

Params& Params::add_array(const std::vector<double>& v) {
  std::vector<std::optional<std::string>> e;
  e.reserve(v.size());
  for (double x : v) e.emplace_back(number_text(x));
  return add_array(e);
}

Params& Params::add_array(const std::vector<std::optional<double>>& v) {
  std::vector<std::optional<std::string>> e;
  e.reserve(v.size());
  for (const auto& x : v)
    e.push_back(x ? std::optional<std::string>(number_text(*x)) : std::nullopt);
  return add_array(e);
}

Params& Params::add_array(const std::vector<std::string>& v) {
  return add_array(std::vector<std::optional<std::string>>(v.begin(), v.end()));
}

std::vector<const char*> Params::pointers() const {
  std::vector<const char*> p;
  p.reserve(values_.size());
  for (std::size_t i = 0; i < values_.size(); ++i)
    p.push_back(null_[i] ? nullptr : values_[i].c_str());
  return p;
}

std::int64_t Result::affected() const {
  const char* n = PQcmdTuples(r_.get());
  return n && *n ? std::stoll(n) : 0;
}

std::int64_t Result::integer(int row, int col) const {
  const char* v = PQgetvalue(r_.get(), row, col);
  std::int64_t out = 0;
  std::from_chars(v, v + PQgetlength(r_.get(), row, col), out);
  return out;
}

double Result::real(int row, int col) const {
  return is_null(row, col) ? 0.0 : std::strtod(PQgetvalue(r_.get(), row, col), nullptr);
}

std::optional<double> Result::opt_real(int row, int col) const {
  if (is_null(row, col)) return std::nullopt;
  return real(row, col);
}

std::optional<std::int64_t> Result::opt_integer(int row, int col) const {
  if (is_null(row, col)) return std::nullopt;
  return integer(row, col);
}

std::string Result::text(int row, int col) const {
  if (is_null(row, col)) return {};
  return std::string(PQgetvalue(r_.get(), row, col), PQgetlength(r_.get(), row, col));
}

bool Result::boolean(int row, int col) const {
  const char* v = PQgetvalue(r_.get(), row, col);
  return v && (*v == 't' || *v == '1');
}

Connection::Connection(const std::string& url) : shown_(backend_url::redact(url)) {
  conn_.reset(PQconnectdb(url.c_str()));
  if (!conn_ || PQstatus(conn_.get()) != CONNECTION_OK)
    throw Error("postgres '" + shown_ + "': cannot connect: " +
                    (conn_ ? std::string(PQerrorMessage(conn_.get())) : "out of memory"),
                "08001");
  // Notices ("relation already exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(
      conn_.get(), [](void*, const char*) {}, nullptr);
  configure_session();
}

// Every statement dnnlab sends touches a few rows by key or a small batch,
// but the planner's estimate can still pass jit_above_cost: the event
// sequencer's join with its one-row cursor, never analyzed, was estimated at
// 1.5 M rows (cost 347,000), and the server compiled it with LLVM at every
// call (43 ms instead of ~10; 0.3 ms of PostgreSQL time per trial in
// bench/cluster_bench.sh). JIT never pays for statements this small.
void Connection::configure_session() {
  ResultPtr r(PQexec(conn_.get(), "SET jit = off"));
  if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) fail(r.get(), "SET jit = off");
}

void Connection::reconnect() {
  prepared_.clear();
  depth_ = 0;
  PQreset(conn_.get());
  if (PQstatus(conn_.get()) != CONNECTION_OK)
    throw Error("postgres '" + shown_ + "': cannot reconnect: " + PQerrorMessage(conn_.get()),
                "08001");
  configure_session();
}

void Connection::fail(const PGresult* r, std::string_view what) const {
  std::string state;
  if (r) {
    const char* s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    if (s) state = s;
  }
  // libpq's own errors carry no SQLSTATE; a dead socket is a lost connection.
  if (state.empty() && PQstatus(conn_.get()) == CONNECTION_BAD) state = "08006";
  std::string message = PQerrorMessage(conn_.get());
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  throw Error("postgres '" + shown_ + "': " + std::string(what) + ": " + message, state);
}

Result Connection::query(std::string_view sql, const Params& params) {
  auto it = prepared_.find(std::string(sql));
  if (it == prepared_.end()) {
    std::string name = "s" + std::to_string(prepared_.size() + 1);
    ++round_trips_;
    ResultPtr p(PQprepare(conn_.get(), name.c_str(), std::string(sql).c_str(), 0, nullptr));
    if (!p || PQresultStatus(p.get()) != PGRES_COMMAND_OK)
      fail(p.get(), "prepare '" + std::string(sql.substr(0, 60)) + "'");
    it = prepared_.emplace(std::string(sql), std::move(name)).first;
  }
  const auto values = params.pointers();
  ++round_trips_;
  ResultPtr r(PQexecPrepared(conn_.get(), it->second.c_str(), static_cast<int>(values.size()),
                             values.data(), nullptr, nullptr, 0));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
    fail(r.get(), std::string(sql.substr(0, 60)));
  return Result(std::move(r));
}

void Connection::exec(const std::string& sql) {
  ++round_trips_;
  ResultPtr r(PQexec(conn_.get(), sql.c_str()));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) fail(r.get(), sql.substr(0, 60));
}

Transaction::Transaction(Connection& c) : c_(c), level_(c.depth_) {
  c_.exec(level_ == 0 ? "BEGIN" : "SAVEPOINT sp" + std::to_string(level_));
  ++c_.depth_;
}

Transaction::~Transaction() {
  if (!open_) return;
  --c_.depth_;
  try {
    if (level_ == 0)
      c_.exec("ROLLBACK");
    else
      c_.exec("ROLLBACK TO SAVEPOINT sp" + std::to_string(level_) + "; RELEASE SAVEPOINT sp" +
              std::to_string(level_));
  } catch (const Error&) {
    // A lost connection rolled everything back already.
  }
}

void Transaction::commit() {
  open_ = false;
  --c_.depth_;
  if (level_ > 0) {
    c_.exec("RELEASE SAVEPOINT sp" + std::to_string(level_));
    return;
  }
  try {
    c_.exec("COMMIT");
  } catch (Error& e) {
    throw e.at_commit();
  }
}

namespace {

void ensure_version_table(Connection& c) {
  c.exec(
      "CREATE TABLE IF NOT EXISTS schema_version (component TEXT PRIMARY KEY, "
      "version INTEGER NOT NULL, applied_at DOUBLE PRECISION NOT NULL)");
}

int read_version(Connection& c, std::string_view component) {
  Params p;
  p.add(component);
  Result r = c.query("SELECT version FROM schema_version WHERE component = $1", p);
  return r.rows() ? static_cast<int>(r.integer(0, 0)) : 0;
}

}  // namespace

int schema_version(Connection& c, std::string_view component) {
  ensure_version_table(c);
  return read_version(c, component);
}

void migrate(Connection& c, std::string_view component, std::span<const Migration> migrations) {
  const int latest = migrations.empty() ? 0 : migrations.back().version;
  Transaction tx(c);
  // One migrating process at a time; the lock ends with the transaction.
  c.exec("SELECT pg_advisory_xact_lock(727274)");
  ensure_version_table(c);
  const int current = read_version(c, component);
  if (current > latest)
    throw SchemaVersionError("database '" + c.shown() + "' has " + std::string(component) +
                             " schema version " + std::to_string(current) +
                             ", but this dnnlab build only knows versions up to " +
                             std::to_string(latest) + "; open it with a newer dnnlab");
  if (current == latest) return;
  for (const Migration& m : migrations)
    if (m.version > current) c.exec(std::string(m.sql));
  Params p;
  p.add(component).add(latest);
  c.query(
      "INSERT INTO schema_version (component, version, applied_at) "
      "VALUES ($1, $2, extract(epoch FROM clock_timestamp())) "
      "ON CONFLICT (component) DO UPDATE SET version = excluded.version, "
      "applied_at = excluded.applied_at",
      p);
  tx.commit();
}

}  // namespace dnnlab::pg
