// Runs the dnnlab binary and captures its exit code and output, or starts it
// in the background; and reads a store's trials.
#pragma once
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "store/result_store.hpp"

extern char** environ;

namespace dnnlab::cli_test {

struct Result {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> n{0};
    path = std::filesystem::temp_directory_path() /
           ("dnnlab-cli-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return path / name;
  }
};

// Runs `dnnlab ARGS` through the shell (arguments are trusted test strings).
inline Result run(const std::string& args, const std::string& env = "") {
  TempDir tmp;
  const std::string cmd = env + " " + DNNLAB_BINARY + " " + args + " >" +
                          (tmp.path / "out").string() + " 2>" + (tmp.path / "err").string();
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(tmp.path / "out");
  r.err = slurp(tmp.path / "err");
  return r;
}

// Starts `dnnlab ARGS...` in `dir` without waiting; its stderr is appended
// to dir/log.txt and its stdout to dir/out.txt.
inline pid_t spawn(const std::filesystem::path& dir, std::vector<std::string> args) {
  std::vector<std::string> all = {
      "/bin/sh", "-c",
      "cd '" + dir.string() + "' && exec " + DNNLAB_BINARY + " \"$@\" 2>>log.txt >>out.txt", "sh"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv.data(), environ), 0);
  return pid;
}

// Every trial of experiment `exp`, unpaged.
inline std::vector<store::TrialRecord> all_trials(store::ResultStore& s, int64_t exp) {
  store::TrialQuery q;
  q.limit = 0;
  return s.trials(exp, q);
}

inline bool have_fashion_mnist() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

// Skips a test that needs the real data set on a machine without it, but
// fails it under CI (CI set): a skipped test would count as passed there.
#define DNNLAB_NEED_FASHION_MNIST()                                              \
  do {                                                                           \
    if (!::dnnlab::cli_test::have_fashion_mnist()) {                             \
      if (std::getenv("CI")) FAIL() << "dataset-fashion-mnist is not installed"; \
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";                  \
    }                                                                            \
  } while (0)

}  // namespace dnnlab::cli_test
