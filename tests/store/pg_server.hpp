// PostgreSQL for tests. Under ctest, one server per test run: the "postgres"
// fixture (scripts/postgres_test_server.sh, tests/CMakeLists.txt) starts it
// and names its directory in DNNLAB_TEST_POSTGRES_DIR; a test binary run by
// hand starts its own (initdb + pg_ctl in a temporary directory, 127.0.0.1,
// a free port, as the `postgres` user when run as root) and stops it at exit.
// Either way each call to new_database() makes a database of its own, with a
// name no other process uses, dropped when the process ends: tests stay
// independent and can run in parallel on one server.
//
//   PgServer* pg = PgServer::shared();          // the fixture's, or started on first use
//   if (!pg) { under CI: fail; else: skip, saying why (no server binaries) }
//   auto store = store::open_result_store(pg->new_database());
//
//   auto own = PgServer::start_private();       // outage tests: a server of
//   own->stop(); ...; own->start();             // their own to stop and restart
//
// The binaries come from DNNLAB_PG_BINDIR or /usr/lib/postgresql/15/bin
// (Debian's postgresql-15, installed by scripts/bootstrap.sh).
#pragma once

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dnnlab::testing {

class PgServer {
 public:
  // The process's server: the ctest fixture's when DNNLAB_TEST_POSTGRES_DIR
  // names a running one, else one started on first call. nullptr when the
  // server binaries are missing (why_missing() says so). Throws when they
  // exist but the server does not start (a real failure).
  static PgServer* shared() {
    static std::unique_ptr<PgServer> server;
    static bool tried = false;
    if (!tried) {
      tried = true;
      if (std::string url = fixture_url(); !url.empty())
        server.reset(new PgServer(url));
      else if (std::filesystem::exists(bindir() + "/initdb"))
        server.reset(new PgServer());
    }
    return server.get();
  }
  // A server of the caller's own, which it may stop and start (the fixture's
  // is shared by every test of the run); nullptr when the binaries are missing.
  static std::unique_ptr<PgServer> start_private() {
    if (!std::filesystem::exists(bindir() + "/initdb")) return nullptr;
    return std::unique_ptr<PgServer>(new PgServer());
  }
  static std::string why_missing() {
    return "PostgreSQL server binaries not found in " + bindir() +
           " (apt-get install postgresql, or set DNNLAB_PG_BINDIR)";
  }

  // Only the process that made the server (or the databases) cleans up: a
  // forked child that exits normally must not take them with it.
  ~PgServer() {
    if (getpid() != owner_) return;
    if (!own_) {
      for (const std::string& name : databases_) {
        try {
          admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
        } catch (const std::exception&) {
          // The fixture's server is removed at the end of the run anyway.
        }
      }
      return;
    }
    run("pg_ctl -D " + data_ + " -m immediate -w stop >/dev/null 2>&1");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A fresh, empty database: its URL. The name holds the process id and the
  // time, so processes sharing the fixture's server never collide, even
  // when a process id comes back.
  std::string new_database() {
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    const std::string name =
        "t" + std::to_string(getpid()) + "_" +
        std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(now).count()) + "_" +
        std::to_string(databases_.size());
    admin("CREATE DATABASE " + name);
    databases_.push_back(name);
    return url(name);
  }
  std::string url(const std::string& database) const { return base_url_ + database; }

  // For outage tests, on a server from start_private(): it goes away and
  // comes back on the same port.
  void stop() {
    require_own("stop");
    run_or_throw("pg_ctl -D " + data_ + " -m fast -w stop >/dev/null 2>&1", "stop");
  }
  void start() {
    require_own("start");
    run_or_throw("pg_ctl -D " + data_ + " -l " + dir_ + "/server.log -w -o \"-F -h 127.0.0.1 -p " +
                     std::to_string(port_) + " -k " + dir_ + "\" start >/dev/null 2>&1",
                 "start");
  }

 private:
  static std::string bindir() {
    const char* d = std::getenv("DNNLAB_PG_BINDIR");
    return d && *d ? d : "/usr/lib/postgresql/15/bin";
  }

  // The fixture's admin URL (…/postgres) when its server answers; "" when
  // there is no fixture (a binary run by hand) or it left no URL (not
  // installed: then this process finds no binaries either).
  static std::string fixture_url() {
    const char* dir = std::getenv("DNNLAB_TEST_POSTGRES_DIR");
    if (!dir || !*dir) return {};
    std::ifstream in(std::string(dir) + "/url");
    std::string url;
    if (!std::getline(in, url) || url.empty()) return {};
    // A URL left by an interrupted run names a server that is gone.
    if (PQping(url.c_str()) != PQPING_OK) return {};
    return url;
  }

  // On the fixture's server.
  explicit PgServer(const std::string& admin_url)
      : base_url_(admin_url.substr(0, admin_url.rfind('/') + 1)), own_(false) {}

  // A server of this process's own.
  PgServer() : own_(true) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dnnlab-pg-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    data_ = dir_ + "/data";
    if (geteuid() == 0) {
      // PostgreSQL will not run as root: the directory belongs to `postgres`.
      const passwd* pw = getpwnam("postgres");
      if (!pw) throw std::runtime_error("running as root, but there is no 'postgres' user");
      if (chown(dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0)
        throw std::runtime_error("chown " + dir_ + " failed");
      as_user_ = "runuser -u postgres -- ";
    }
    run_or_throw("initdb -D " + data_ + " -U postgres -A trust --no-sync -E UTF8 > " + dir_ +
                     "/initdb.log 2>&1",
                 "initdb");
    port_ = free_port();
    base_url_ = "postgres://postgres@127.0.0.1:" + std::to_string(port_) + "/";
    start();
  }

  void require_own(const char* what) const {
    if (!own_)
      throw std::logic_error(std::string("PgServer::") + what +
                             ": the fixture's server is shared by every test of the run; "
                             "use PgServer::start_private()");
  }

  static int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("no free port on 127.0.0.1");
    close(fd);
    return ntohs(a.sin_port);
  }

  int run(const std::string& command) const {
    return std::system((as_user_ + bindir() + "/" + command).c_str());
  }
  void run_or_throw(const std::string& command, const char* what) const {
    if (run(command) != 0) {
      std::ifstream log(dir_ + "/server.log");
      std::ifstream initlog(dir_ + "/initdb.log");
      std::stringstream s;
      s << initlog.rdbuf() << log.rdbuf();
      throw std::runtime_error(std::string("PostgreSQL ") + what + " failed: " + s.str());
    }
  }

  void admin(const std::string& sql) {
    std::unique_ptr<PGconn, decltype(&PQfinish)> c(PQconnectdb(url("postgres").c_str()), &PQfinish);
    if (PQstatus(c.get()) != CONNECTION_OK)
      throw std::runtime_error(std::string("PostgreSQL admin connection: ") +
                               PQerrorMessage(c.get()));
    std::unique_ptr<PGresult, decltype(&PQclear)> r(PQexec(c.get(), sql.c_str()), &PQclear);
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK)
      throw std::runtime_error(sql + ": " + PQerrorMessage(c.get()));
  }

  std::string dir_, data_, as_user_, base_url_;
  bool own_;
  int port_ = 0;
  pid_t owner_ = getpid();
  std::vector<std::string> databases_;
};

}  // namespace dnnlab::testing
