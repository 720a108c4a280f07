// SQLite connection, statements, transactions and migrations (see sqlite_db.hpp).
#include "db/sqlite_db.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

namespace dnnlab::sqlite {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

namespace {
// getpid() is a system call (glibc no longer caches it), and check_process()
// runs for every statement: keep the pid, renewed in each fork()ed child.
std::atomic<pid_t> g_pid{0};
void renew_pid() {
  g_pid.store(getpid(), std::memory_order_relaxed);
}
pid_t current_pid() {
  static const bool registered = [] { return pthread_atfork(nullptr, nullptr, &renew_pid) == 0; }();
  pid_t pid = registered ? g_pid.load(std::memory_order_relaxed) : 0;
  if (pid == 0) {
    pid = getpid();
    if (registered) g_pid.store(pid, std::memory_order_relaxed);
  }
  return pid;
}
}  // namespace

// ---- Statement ----

Statement& Statement::bind_int(int i, std::int64_t v) {
  if (int rc = sqlite3_bind_int64(stmt_, i, v); rc != SQLITE_OK) db_->fail(rc, "bind");
  return *this;
}
Statement& Statement::bind_double(int i, double v) {
  if (int rc = sqlite3_bind_double(stmt_, i, v); rc != SQLITE_OK) db_->fail(rc, "bind");
  return *this;
}
Statement& Statement::bind_opt_double(int i, const std::optional<double>& v) {
  return v && std::isfinite(*v) ? bind_double(i, *v) : bind_null(i);
}
// An empty string_view may have a null data(), which SQLite would store as NULL.
static const char* non_null(std::string_view v) {
  return v.data() ? v.data() : "";
}

Statement& Statement::bind_text(int i, std::string_view v) {
  int rc = sqlite3_bind_text64(stmt_, i, non_null(v), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) db_->fail(rc, "bind");
  return *this;
}
Statement& Statement::bind_blob(int i, std::string_view v) {
  int rc = sqlite3_bind_blob64(stmt_, i, non_null(v), v.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) db_->fail(rc, "bind");
  return *this;
}
Statement& Statement::bind_null(int i) {
  if (int rc = sqlite3_bind_null(stmt_, i); rc != SQLITE_OK) db_->fail(rc, "bind");
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_->fail(rc, sqlite3_sql(stmt_));
}

void Statement::run() {
  while (step()) {
  }
}

std::optional<double> Statement::column_opt_double(int col) const {
  if (is_null(col)) return std::nullopt;
  return column_double(col);
}
std::optional<std::int64_t> Statement::column_opt_int(int col) const {
  if (is_null(col)) return std::nullopt;
  return column_int(col);
}
std::string Statement::column_text(int col) const {
  // Works for TEXT and BLOB columns alike (payloads are stored as BLOBs).
  const void* data = sqlite3_column_blob(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  if (data == nullptr || n <= 0) return {};
  return std::string(static_cast<const char*>(data), static_cast<std::size_t>(n));
}

// ---- Database ----

// SQLite's own busy handler sleeps 1, 2, 5, 10 ... ms between tries, far longer
// than our write transactions (tens of microseconds), so processes contending
// for the write lock would mostly sleep. Retry quickly with a little jitter.
int Database::on_busy(void* self, int tries) {
  auto* db = static_cast<Database*>(self);
  const double now = unix_now();
  if (tries == 0) db->busy_since_ = now;
  if (now - db->busy_since_ > db->busy_timeout_seconds_) return 0;  // give up: SQLITE_BUSY
  if (tries < 4) {
    std::this_thread::yield();
  } else {
    const int cap_us = tries < 40 ? 50 + 10 * tries : 2000;
    std::this_thread::sleep_for(std::chrono::microseconds(cap_us / 2 + (tries * 7919) % cap_us));
  }
  return 1;
}

Database::Database(const std::string& path, const DatabaseOptions& options)
    : path_(path), owner_pid_(getpid()) {
  if (path.empty()) throw std::invalid_argument("database path is empty");
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  db_.reset(raw);  // sqlite3_open_v2 hands back a handle even on failure
  if (rc != SQLITE_OK) fail(rc, "open");
  sqlite3_extended_result_codes(db_.get(), 1);
  busy_timeout_seconds_ = options.busy_timeout_seconds;
  sqlite3_busy_handler(db_.get(), &Database::on_busy, this);

  // Switching to WAL needs a brief exclusive lock; the busy handler does not
  // cover every case, so retry while other processes are opening the file.
  for (int tries = 0;; ++tries) {
    try {
      auto stmt = prepare("PRAGMA journal_mode=WAL");
      std::string mode = stmt.step() ? stmt.column_text(0) : "";
      if (mode != "wal" && mode != "memory")
        throw Error("database '" + path_ + "': cannot use WAL journal mode (got '" + mode + "')",
                    SQLITE_ERROR);
      break;
    } catch (const Error& e) {
      if ((e.code() & 0xff) != SQLITE_BUSY || tries > 200) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // NORMAL: in WAL mode a commit survives a crash of the process; only an OS
  // crash can lose the last commits. It saves an fsync per commit.
  // temp_store=MEMORY keeps statement journals and savepoints in memory:
  // inside a multi-statement transaction every trigger-firing UPDATE opens a
  // statement journal, and past 64 KiB SQLite spills it to a temp file, one
  // pwrite per page (30 of the 60 pwrites per trivial trial before).
  exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;");
}

Database::~Database() {
  if (getpid() != owner_pid_) {
    // A forked child must not close its parent's connection: closing can
    // checkpoint or remove the WAL under the parent. Leak it instead.
    for (auto& [sql, stmt] : cache_) static_cast<void>(stmt.release());
    static_cast<void>(db_.release());
  }
}

void Database::check_process() const {
  if (current_pid() != owner_pid_)
    throw std::logic_error("database '" + path_ + "' was opened in process " +
                           std::to_string(owner_pid_) + " and used in process " +
                           std::to_string(getpid()) + "; open it after fork()");
}

void Database::fail(int rc, std::string_view what) const {
  std::string msg = "sqlite '" + path_ + "': " + std::string(what) + ": ";
  msg += db_ ? sqlite3_errmsg(db_.get()) : sqlite3_errstr(rc);
  throw Error(msg, rc);
}

Statement Database::prepare(std::string_view sql) {
  check_process();
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    StatementPtr stmt(raw);
    if (rc != SQLITE_OK) fail(rc, "prepare: " + std::string(sql));
    it = cache_.emplace(std::string(sql), std::move(stmt)).first;
  }
  return Statement(it->second.get(), *this);
}

void Database::exec(const std::string& sql) {
  check_process();
  char* err = nullptr;
  int rc = sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw Error("sqlite '" + path_ + "': " + msg, rc);
  }
}

// ---- WriteTransaction ----

WriteTransaction::WriteTransaction(Database& db) : db_(db), nested_(db.in_transaction()) {
  db_.prepare(nested_ ? "SAVEPOINT dnnlab_nested" : "BEGIN IMMEDIATE").run();
}

WriteTransaction::~WriteTransaction() {
  if (!open_) return;
  try {
    if (nested_) {
      db_.prepare("ROLLBACK TO dnnlab_nested").run();
      db_.prepare("RELEASE dnnlab_nested").run();
    } else {
      db_.prepare("ROLLBACK").run();
    }
  } catch (...) {
    // The transaction may already be gone (SQLite rolls back on some errors).
  }
}

void WriteTransaction::commit() {
  db_.prepare(nested_ ? "RELEASE dnnlab_nested" : "COMMIT").run();
  open_ = false;
}

// ---- migrations ----

namespace {
void ensure_version_table(Database& db) {
  db.prepare(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        "component TEXT PRIMARY KEY, version INTEGER NOT NULL, applied_at REAL NOT NULL)")
      .run();
}
int read_version(Database& db, std::string_view component) {
  auto stmt = db.prepare("SELECT version FROM schema_version WHERE component = ?1");
  stmt.bind_text(1, component);
  return stmt.step() ? static_cast<int>(stmt.column_int(0)) : 0;
}
}  // namespace

int schema_version(Database& db, std::string_view component) {
  auto probe = db.prepare(
      "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_version'");
  if (!probe.step() || probe.column_int(0) == 0) return 0;
  return read_version(db, component);
}

void migrate(Database& db, std::string_view component, std::span<const Migration> migrations) {
  const int latest = migrations.empty() ? 0 : migrations.back().version;
  WriteTransaction tx(db);
  ensure_version_table(db);
  const int current = read_version(db, component);
  if (current > latest)
    throw SchemaVersionError(
        "database '" + db.path() + "' has " + std::string(component) + " schema version " +
        std::to_string(current) + ", but this dnnlab build only knows versions up to " +
        std::to_string(latest) + "; open it with a newer dnnlab (the file was not changed)");
  if (current == latest) return;  // rollback of an empty transaction: a no-op
  for (const Migration& m : migrations) {
    if (m.version <= current) continue;
    db.exec(std::string(m.sql));
  }
  auto stmt = db.prepare(
      "INSERT INTO schema_version (component, version, applied_at) VALUES (?1, ?2, ?3) "
      "ON CONFLICT(component) DO UPDATE SET version = excluded.version, "
      "applied_at = excluded.applied_at");
  stmt.bind_text(1, component).bind_int(2, latest).bind_double(3, unix_now());
  stmt.run();
  tx.commit();
}

}  // namespace dnnlab::sqlite
