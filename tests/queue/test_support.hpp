// Shared by the queue and store tests: a temporary directory removed at the end,
// and a helper to run a function in forked child processes.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dnnlab::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dnnlab-qs-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string url(const std::string& name) const { return "sqlite:" + file(name); }

 private:
  std::filesystem::path path_;
};

// A fresh queue's URL on `backend` (the parameter of the queue suites).
inline std::string queue_url(const std::string& backend, const TempDir& dir) {
  if (backend == "sqlite") return dir.url("q.db");
  throw std::invalid_argument("no test URL for queue backend '" + backend + "'");
}

// Runs body(i) in `n` forked children (each must open its own connections)
// and returns their exit codes. A child that throws exits with 99.
inline std::vector<int> run_in_children(int n, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 99;
      try {
        rc = body(i);
      } catch (...) {
      }
      _exit(rc);  // no destructors, no gtest teardown in the child
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

}  // namespace dnnlab::testing
