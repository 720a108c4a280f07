// A throwaway PostgreSQL server for tests: initdb + pg_ctl in a temporary
// directory, listening on 127.0.0.1 on a free port, run as the unprivileged
// `postgres` user when the tests run as root (the server refuses root), and
// stopped and removed when the test process ends. Each test gets a database
// of its own.
//
//   PgServer* pg = PgServer::shared();          // started on first use
//   if (!pg) { under CI: fail; else: skip, saying why (no server binaries) }
//   auto store = store::open_result_store(pg->new_database());
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

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dnnlab::testing {

class PgServer {
 public:
  // The process's server, started on first call; nullptr when the server
  // binaries are missing (why() says so). Throws when they exist but the
  // server does not start (a real failure).
  static PgServer* shared() {
    static std::unique_ptr<PgServer> server;
    static bool tried = false;
    if (!tried) {
      tried = true;
      if (std::filesystem::exists(bindir() + "/initdb")) server.reset(new PgServer());
    }
    return server.get();
  }
  static std::string why_missing() {
    return "PostgreSQL server binaries not found in " + bindir() +
           " (apt-get install postgresql, or set DNNLAB_PG_BINDIR)";
  }

  ~PgServer() {
    run("pg_ctl -D " + data_ + " -m immediate -w stop >/dev/null 2>&1");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A fresh, empty database: its URL.
  std::string new_database() {
    const std::string name = "t" + std::to_string(++databases_);
    admin("CREATE DATABASE " + name);
    return url(name);
  }
  std::string url(const std::string& database) const {
    return "postgres://postgres@127.0.0.1:" + std::to_string(port_) + "/" + database;
  }
  // For outage tests: the server goes away and comes back on the same port.
  void stop() { run_or_throw("pg_ctl -D " + data_ + " -m fast -w stop >/dev/null 2>&1", "stop"); }
  void start() {
    run_or_throw("pg_ctl -D " + data_ + " -l " + dir_ + "/server.log -w -o \"-F -h 127.0.0.1 -p " +
                     std::to_string(port_) + " -k " + dir_ + "\" start >/dev/null 2>&1",
                 "start");
  }

 private:
  static std::string bindir() {
    const char* d = std::getenv("DNNLAB_PG_BINDIR");
    return d && *d ? d : "/usr/lib/postgresql/15/bin";
  }

  PgServer() {
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
    start();
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

  std::string dir_, data_, as_user_;
  int port_ = 0;
  int databases_ = 0;
};

}  // namespace dnnlab::testing
