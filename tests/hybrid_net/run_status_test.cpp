// The live status of a distributed run (GET /hybrid/status, the run page's
// data): polled during a real `train --distributed --listen` run with two
// `dnnlab join` processes, every snapshot must hold together (the clients'
// tickets sum to the run's, one row per client, the curve's epochs are the
// run's), and only the watch or join token reads it. status_json itself:
// bounded, never NaN, a client's free text never echoed.
#include "hybrid_net/run_status.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "cli_util.hpp"

namespace dnnlab::cli_test {
namespace run_status_test {

const std::string kSpec = R"(name: watched
data: {dataset: synthetic, validation: 64, limit_train: 384}
model:
  input: [1, 28, 28]
  parts:
    features:
      - {conv2d: 4, padding: 1}
      - batchnorm
      - relu
      - max_pool2d: 2
    classifier:
      - dense: 10
train:
  epochs: 3
  batch_size: 16
  seed: 5
  optimizer: {type: adam, lr: 0.003}
)";

struct Http {
  int status = 0;
  std::string body;
};

// One GET over a fresh connection (the endpoint closes after each answer).
Http get(int port, const std::string& path, const std::string& bearer) {
  Http r;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return r;
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!bearer.empty()) req += "Authorization: Bearer " + bearer + "\r\n";
  req += "\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return r;
  }
  std::string all;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
  close(fd);
  if (all.rfind("HTTP/1.1 ", 0) != 0) return r;
  r.status = std::stoi(all.substr(9, 3));
  const size_t body = all.find("\r\n\r\n");
  if (body != std::string::npos) r.body = all.substr(body + 4);
  return r;
}

std::string wait_for(const std::filesystem::path& log, const std::regex& re, int group) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::smatch m;
  while (std::chrono::steady_clock::now() < until) {
    const std::string text = slurp(log);
    if (std::regex_search(text, m, re)) return m[group];
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "no match in " << log << ":\n" << slurp(log);
  return "";
}

TEST(RunStatus, SnapshotsOfARealRunHoldTogetherAndNeedAToken) {
  TempDir dir;
  const auto spec = dir.write("watched.yaml", kSpec);
  const pid_t server =
      spawn(dir.path, {"train", spec.string(), "--distributed", "--listen", "127.0.0.1:0",
                       "--clients", "2", "--client-wait", "60", "--out", "."});
  const std::filesystem::path log = dir.path / "log.txt";
  const int port =
      std::stoi(wait_for(log, std::regex(R"(listening on ws://127\.0\.0\.1:(\d+)/)"), 1));
  const std::string join = wait_for(log, std::regex(R"(--token ([0-9a-f]{64}))"), 1);
  // The page's URL when the web bundle is found, else the bare route.
  const std::string watch =
      wait_for(log, std::regex(R"((/hybrid/run#token=|Authorization: Bearer )([0-9a-f]{64}))"), 2);
  ASSERT_FALSE(watch.empty());
  ASSERT_NE(watch, join);

  // Before anyone joins: the waiting snapshot; no token or a wrong one: 401.
  Http w = get(port, "/hybrid/status", watch);
  ASSERT_EQ(w.status, 200) << w.body;
  EXPECT_EQ(nlohmann::json::parse(w.body)["state"], "waiting");
  EXPECT_EQ(get(port, "/hybrid/status", "").status, 401);
  EXPECT_EQ(get(port, "/hybrid/status", std::string(64, 'a')).status, 401);
  EXPECT_EQ(get(port, "/hybrid/status", join).status, 200);  // who may join may watch

  std::vector<TempDir> cdirs(2);
  std::vector<pid_t> clients;
  // Each answer held 15 ms (join's test pacing): the run lasts about 1.5 s
  // however fast the machine, long enough for the 20 ms polls to see it
  // train (without it, 0.15 s on an idle machine: 4 snapshots, not 5).
  for (auto& d : cdirs)
    clients.push_back(spawn(d.path, {"join", "ws://127.0.0.1:" + std::to_string(port) + "/hybrid",
                                     "--token", join, "-q", "--send-delay-ms", "15"}));

  std::vector<nlohmann::json> seen;
  int status = 0;
  while (waitpid(server, &status, WNOHANG) == 0) {
    const Http h = get(port, "/hybrid/status", watch);
    if (h.status == 200) seen.push_back(nlohmann::json::parse(h.body));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t c : clients) waitpid(c, nullptr, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(log);
  const auto metrics = nlohmann::json::parse(slurp(dir.path / "watched.metrics.json"));
  const auto& d = metrics["distributed"];

  int training = 0;
  size_t most_epochs = 0;
  for (const auto& s : seen) {
    ASSERT_EQ(s["v"], 1);
    if (s["state"] == "waiting") continue;
    ++training;
    ASSERT_EQ(s["clients"].size(), 2u) << s.dump();
    int64_t tickets = 0, done = 0;
    for (size_t c = 0; c < 2; ++c) {
      const auto& row = s["clients"][c];
      EXPECT_EQ(row["id"], c);
      EXPECT_EQ(row["kind"], "native") << row.dump();
      EXPECT_LE(row["done"].get<int64_t>(), row["tickets"].get<int64_t>());
      EXPECT_GE(row["forward_seconds"].get<double>(), 0);
      EXPECT_GE(row["wait_seconds"].get<double>(), 0);
      tickets += row["tickets"].get<int64_t>();
      done += row["done"].get<int64_t>();
    }
    EXPECT_EQ(tickets, s["tickets"].get<int64_t>()) << s.dump();
    EXPECT_LE(done, tickets);
    EXPECT_LE(s["grads_applied"].get<int64_t>(), done);
    EXPECT_LE(s["server"]["classifier_seconds"].get<double>(),
              s["server"]["compute_seconds"].get<double>() + 1e-9);
    // The curve: the run's own epochs, in order, as metrics.json has them.
    const auto& curve = s["curve"];
    EXPECT_GE(curve.size(), most_epochs);
    most_epochs = std::max(most_epochs, curve.size());
    for (size_t e = 0; e < curve.size(); ++e) {
      EXPECT_EQ(curve[e]["epoch"], e + 1);
      EXPECT_EQ(curve[e]["train_loss"], metrics["epochs"][e]["train_loss"]);
      EXPECT_EQ(curve[e]["val_acc"], metrics["epochs"][e]["val_acc"]);
    }
    if (s["state"] == "finished") {
      EXPECT_EQ(curve.size(), 3u);
      EXPECT_EQ(s["tickets"], d["tickets"]);
      EXPECT_EQ(s["clients"][0]["tickets"], d["tickets_by_client"][0]);
      EXPECT_EQ(s["clients"][1]["tickets"], d["tickets_by_client"][1]);
    }
  }
  // metrics.json keeps the last rows: each client's tickets as the run counts them.
  ASSERT_EQ(d["by_client"].size(), 2u) << d.dump();
  for (size_t c = 0; c < 2; ++c) {
    EXPECT_EQ(d["by_client"][c]["tickets"], d["tickets_by_client"][c]);
    EXPECT_EQ(d["by_client"][c]["kind"], "native");
    EXPECT_GT(d["by_client"][c]["forward_seconds"].get<double>(), 0);
    // The turnarounds split: the compute `dnnlab join` reported, the rest transfer.
    const auto& k = d["by_client"][c];
    const double busy = k["forward_seconds"].get<double>() + k["backward_seconds"].get<double>();
    EXPECT_GT(k["compute_seconds"].get<double>(), 0) << k.dump();
    EXPECT_LE(k["compute_seconds"].get<double>(), busy) << k.dump();
    EXPECT_NEAR(k["compute_seconds"].get<double>() + k["transfer_seconds"].get<double>(), busy,
                1e-9)
        << k.dump();
  }
  EXPECT_GE(training, 5) << seen.size() << " snapshots";
  EXPECT_GE(most_epochs, 2u) << "no snapshot between epochs";
  const auto& last = seen.back();
  EXPECT_GT(last["samples_per_second"]["features"].get<double>(), 0) << last.dump();
  EXPECT_GT(last["samples_per_second"]["classifier"].get<double>(), 0);
  EXPECT_GT(last["server"]["idle_seconds"].get<double>(), 0);
  RecordProperty("snapshots", static_cast<int>(seen.size()));
}

TEST(RunStatus, JsonIsBoundedFiniteAndNamesOnlyKnownKinds) {
  hybrid::HybridStats stats;
  stats.clients.resize(hybrid::kMaxClients + 5);
  stats.clients[0].forward_seconds = std::nan("");
  stats.server_seconds = INFINITY;
  std::vector<nn::EpochResult> curve(hybrid_net::kMaxCurve + 7);
  for (size_t i = 0; i < curve.size(); ++i) curve[i].epoch = static_cast<int>(i + 1);
  curve.back().train_loss = std::nan("");
  hybrid_net::RunStatusInput in;
  in.state = "training";
  in.stats = &stats;
  in.curve = &curve;
  in.agents = {"browser", "dnnlab", "<script>alert(1)</script>"};
  const nlohmann::json j = hybrid_net::status_json(in);
  const std::string text = j.dump();
  EXPECT_EQ(text.find("script"), std::string::npos);
  EXPECT_EQ(text.find("null,\"forward"), std::string::npos);
  EXPECT_EQ(j["clients"].size(), static_cast<size_t>(hybrid::kMaxClients));
  EXPECT_EQ(j["clients"][0]["kind"], "browser");
  EXPECT_EQ(j["clients"][1]["kind"], "native");
  EXPECT_EQ(j["clients"][2]["kind"], "other");
  EXPECT_EQ(j["clients"][3]["kind"], "other");
  EXPECT_EQ(j["clients"][0]["forward_seconds"], 0.0);
  EXPECT_EQ(j["server"]["compute_seconds"], 0.0);
  EXPECT_EQ(j["curve"].size(), hybrid_net::kMaxCurve);
  EXPECT_EQ(j["curve"].back()["epoch"], static_cast<int>(curve.size()));
  EXPECT_EQ(j["curve"].back()["train_loss"], 0.0);
  EXPECT_LT(text.size(), 400u * 1024);
}

}  // namespace run_status_test
}  // namespace dnnlab::cli_test
