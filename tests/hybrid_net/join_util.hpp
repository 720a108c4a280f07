// `dnnlab train --distributed --listen` and `dnnlab join` as processes over
// loopback: start them, read the join line, wait for them to end.
#pragma once
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_util.hpp"

namespace dnnlab::cli_test {

// The run of the join tests: the generated `synthetic` set (512 training
// samples), batch 16, two epochs (64 batches), a conv-batchnorm-relu-pool
// features part.
inline const std::string kNetSpec = R"(name: net
data: {dataset: synthetic, validation: 64, limit_train: 512}
model:
  input: [1, 28, 28]
  parts:
    features:
      - {conv2d: 4, padding: 1}
      - batchnorm
      - relu
      - max_pool2d: 2
    classifier:
      - dropout: 0.2
      - dense: 10
train:
  epochs: 2
  batch_size: 16
  seed: 3
  optimizer: {type: adam, lr: 0.003}
  schedule: {type: cosine, min_lr: 0.001}
)";

// Waits for `pid` up to `seconds`; kills it past that. Its exit code, or
// 128 + signal.
inline int wait_exit(pid_t pid, int seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "process " << pid << " ran past " << seconds << " s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Join {
  std::string url, token;
};

// The URL and token from the server's "join with:" line.
inline Join read_join_line(const std::filesystem::path& log) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until) {
    const std::string text = slurp(log);
    const std::string key = "join with: dnnlab join ";
    const size_t at = text.find(key);
    const size_t eol = at == std::string::npos ? at : text.find('\n', at);
    if (eol != std::string::npos) {
      std::istringstream line(text.substr(at + key.size(), eol - at - key.size()));
      Join j;
      std::string flag;
      line >> j.url >> flag >> j.token;
      if (flag == "--token" && !j.token.empty()) return j;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "no join line in " << log << ":\n" << slurp(log);
  return {};
}

struct NetRun {
  int server = -1;
  std::vector<int> clients;
  nlohmann::json metrics;
  std::string log;
};

// `train --distributed --listen 127.0.0.1:0 --clients N` in `dir`, and N
// `join` processes (client i with extra flags extra[i]); `before_clients`
// (if any) is called with the join line before they start.
inline NetRun run_networked(const TempDir& dir, const std::filesystem::path& spec, int n,
                            const std::vector<std::vector<std::string>>& extra = {},
                            const std::vector<std::string>& server_flags = {},
                            const std::function<void(const Join&)>& before_clients = {}) {
  NetRun r;
  std::vector<std::string> args = {"train",         "-q",          spec.string(), "--distributed",
                                   "--listen",      "127.0.0.1:0", "--clients",   std::to_string(n),
                                   "--client-wait", "60",          "--out",       "."};
  args.insert(args.end(), server_flags.begin(), server_flags.end());
  const pid_t server = spawn(dir.path, args);
  const Join j = read_join_line(dir.path / "log.txt");
  if (before_clients) before_clients(j);
  std::vector<std::unique_ptr<TempDir>> client_dirs;
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    client_dirs.push_back(std::make_unique<TempDir>());
    std::vector<std::string> args = {"join", j.url, "--token", j.token, "-q"};
    if (i < static_cast<int>(extra.size()))
      args.insert(args.end(), extra[i].begin(), extra[i].end());
    pids.push_back(spawn(client_dirs.back()->path, args));
  }
  r.server = wait_exit(server, 120);
  for (size_t i = 0; i < pids.size(); ++i) {
    r.clients.push_back(wait_exit(pids[i], 30));
    r.log += "client " + std::to_string(i) + ": " + slurp(client_dirs[i]->path / "log.txt");
  }
  r.log += "server: " + slurp(dir.path / "log.txt");
  if (std::filesystem::exists(dir.path / "net.metrics.json"))
    r.metrics = nlohmann::json::parse(slurp(dir.path / "net.metrics.json"));
  return r;
}

}  // namespace dnnlab::cli_test
