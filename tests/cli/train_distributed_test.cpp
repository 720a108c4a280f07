// `dnnlab train --distributed`: the hybrid trainer through the binary. One
// client at staleness 0 writes the very files standalone training does;
// specs and flags it cannot use are refused with the field or flag named.
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli_util.hpp"

namespace dnnlab::cli_test {
namespace train_distributed_test {

const std::string kPartsSpec = R"(name: parts
data: {dataset: synthetic, validation: 64, limit_train: 256}
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
  batch_size: 32
  seed: 3
  optimizer: {type: adam, lr: 0.01}
  schedule: {type: cosine, min_lr: 0.001}
)";

TEST(TrainDistributed, OneClientWritesWhatStandaloneWrites) {
  TempDir a, b;
  const auto spec = a.write("parts.yaml", kPartsSpec);
  const Result alone = run("train -q " + spec.string() + " --out " + a.path.string());
  const Result dist =
      run("train -q " + spec.string() + " --distributed --clients 1 --out " + b.path.string());
  ASSERT_EQ(alone.code, 0) << alone.err;
  ASSERT_EQ(dist.code, 0) << dist.err;
  EXPECT_EQ(alone.out, dist.out);  // validation and test accuracy lines
  const std::string wa = slurp(a.path / "parts.safetensors"),
                    wb = slurp(b.path / "parts.safetensors");
  EXPECT_GT(wa.size(), 1000u);
  EXPECT_EQ(wa, wb) << "the distributed run's weights differ";
  const auto ma = nlohmann::json::parse(slurp(a.path / "parts.metrics.json"));
  const auto mb = nlohmann::json::parse(slurp(b.path / "parts.metrics.json"));
  ASSERT_EQ(ma["epochs"].size(), 2u);
  ASSERT_EQ(mb["epochs"].size(), 2u);
  for (size_t e = 0; e < 2; ++e)
    for (const char* k : {"train_loss", "train_acc", "val_loss", "val_acc", "lr"})
      EXPECT_EQ(ma["epochs"][e][k], mb["epochs"][e][k]) << "epoch " << e + 1 << " " << k;
  EXPECT_EQ(ma["test_acc"], mb["test_acc"]);
  EXPECT_EQ(ma["spec"], mb["spec"]);
  EXPECT_FALSE(ma.contains("distributed"));
  EXPECT_EQ(mb["distributed"]["clients"], 1);
  EXPECT_EQ(mb["distributed"]["versions"], 16);  // 8 batches an epoch, one version each
  EXPECT_EQ(mb["distributed"]["quarantined"].size(), 0u);
}

TEST(TrainDistributed, SeveralClientsWithStalenessTrain) {
  TempDir dir;
  const auto spec = dir.write("parts.yaml", kPartsSpec);
  const Result r = run("train -q " + spec.string() +
                       " --distributed --clients 3 --staleness 1 --out " + dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto m = nlohmann::json::parse(slurp(dir.path / "parts.metrics.json"));
  EXPECT_EQ(m["distributed"]["clients"], 3);
  EXPECT_EQ(m["distributed"]["staleness"], 1);
  EXPECT_EQ(m["distributed"]["tickets"], 16);
  EXPECT_GT(m["distributed"]["grads_stale"].get<int>(), 0);
  EXPECT_EQ(m["epochs"].size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(dir.path / "parts.safetensors"));
}

TEST(TrainDistributed, Int8WireWithErrorFeedbackTrainsAndSaysSo) {
  TempDir dir;
  const auto spec = dir.write("parts.yaml", kPartsSpec);
  const Result r = run("train -q " + spec.string() +
                       " --distributed --clients 2 --wire int8 --error-feedback grads --out " +
                       dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto m = nlohmann::json::parse(slurp(dir.path / "parts.metrics.json"));
  EXPECT_EQ(m["distributed"]["wire"], "int8");
  EXPECT_EQ(m["distributed"]["error_feedback"], "grads");
  EXPECT_EQ(m["distributed"]["quarantined"].size(), 0u);
  ASSERT_EQ(m["epochs"].size(), 2u);
  EXPECT_LT(m["epochs"][1]["train_loss"].get<double>(), m["epochs"][0]["train_loss"].get<double>());
}

// `classifier: []` is data-parallel training through the same machinery;
// with staleness every layer may be stale, and the run says so (once, not
// under -q) without refusing it.
TEST(TrainDistributed, AnEmptyClassifierWithStalenessIsWarnedAbout) {
  TempDir dir;
  std::string dp = kPartsSpec;
  const std::string cls = "    classifier:\n      - dropout: 0.2\n      - dense: 10\n";
  ASSERT_NE(dp.find(cls), std::string::npos);
  dp.replace(dp.find(cls), cls.size(), "      - dense: 10\n    classifier: []\n");
  const auto spec = dir.write("dp.yaml", dp);
  const std::string warning = "with `classifier: []` (data-parallel) and --staleness 1";
  const Result stale = run("train " + spec.string() + " --epochs 1 --distributed --clients 2 " +
                           "--staleness 1 --out " + dir.path.string());
  ASSERT_EQ(stale.code, 0) << stale.err;
  EXPECT_NE(stale.err.find(warning), std::string::npos) << stale.err;
  const Result sync = run("train " + spec.string() + " --epochs 1 --distributed --clients 2 " +
                          "--out " + dir.path.string());
  ASSERT_EQ(sync.code, 0) << sync.err;
  EXPECT_EQ(sync.err.find("warning"), std::string::npos) << sync.err;
  const Result quiet = run("train -q " + spec.string() + " --epochs 1 --distributed --clients 2 " +
                           "--staleness 1 --out " + dir.path.string());
  ASSERT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("warning"), std::string::npos) << quiet.err;
  // The hybrid spec itself, with staleness: no warning.
  const auto hybrid = dir.write("parts.yaml", kPartsSpec);
  const Result h = run("train " + hybrid.string() + " --epochs 1 --distributed --clients 2 " +
                       "--staleness 1 --out " + dir.path.string());
  ASSERT_EQ(h.code, 0) << h.err;
  EXPECT_EQ(h.err.find("warning"), std::string::npos) << h.err;
}

TEST(TrainDistributed, SpecWithoutPartsIsRefusedNamingModelParts) {
  TempDir dir;
  const auto spec = dir.write("flat.yaml", R"(name: flat
data: {dataset: synthetic, validation: 64, limit_train: 128}
model:
  layers: [{dense: 16, activation: relu}, {dense: 10}]
train: {epochs: 1, batch_size: 32, seed: 1, optimizer: sgd}
)");
  const Result r = run("train " + spec.string() + " --distributed --out " + dir.path.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("model.parts"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("features"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "flat.metrics.json"));
}

TEST(TrainDistributed, BadFlagsNameTheFlag) {
  TempDir dir;
  const auto spec = dir.write("parts.yaml", kPartsSpec);
  const std::string base = "train " + spec.string() + " --out " + dir.path.string() + " ";
  for (const char* bad :
       {"--distributed --clients 0", "--distributed --clients 65", "--distributed --clients x",
        "--clients 2", "--distributed --staleness 17", "--staleness 1"}) {
    const Result r = run(base + bad);
    EXPECT_NE(r.code, 0) << bad;
    const std::string flag =
        std::string(bad).find("--clients") != std::string::npos ? "--clients" : "--staleness";
    EXPECT_NE(r.err.find(flag), std::string::npos) << bad << ": " << r.err;
  }
  for (const char* bad : {"--distributed --wire int4", "--distributed --error-feedback sideways",
                          "--distributed --error-feedback grads", "--wire int8"}) {
    const Result r = run(base + bad);
    EXPECT_NE(r.code, 0) << bad;
    const std::string flag = std::string(bad).find("--error-feedback") != std::string::npos
                                 ? "--error-feedback"
                                 : "--wire";
    EXPECT_NE(r.err.find(flag), std::string::npos) << bad << ": " << r.err;
  }
  const Result threads = run(base + "--distributed --threads 2");
  EXPECT_EQ(threads.code, 2);
  EXPECT_NE(threads.err.find("--threads"), std::string::npos) << threads.err;
}

// --ticket-log: one JSON line per ticket's end, and metrics.json names the
// file and agrees with it; a path it cannot write stops the run before any
// training, naming the flag.
TEST(TrainDistributed, TicketLogHasOneLinePerTicketAndMatchesMetrics) {
  TempDir dir;
  const auto spec = dir.write("parts.yaml", kPartsSpec);
  const auto log = dir.path / "tickets.jsonl";
  const Result r = run("train -q " + spec.string() + " --distributed --clients 2 --ticket-log " +
                       log.string() + " --out " + dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto m = nlohmann::json::parse(slurp(dir.path / "parts.metrics.json"))["distributed"];
  std::istringstream lines(slurp(log));
  std::string line;
  std::set<int64_t> ids;
  std::map<std::string, int64_t> by_end;
  std::map<int64_t, std::set<int64_t>> batches;  // epoch -> batch starts applied
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);  // throws on a line that is not JSON
    for (const char* k : {"ticket", "client", "epoch", "version", "begin", "rows", "leased",
                          "activations", "gradients", "end", "rechecked"})
      EXPECT_TRUE(j.contains(k)) << k << " missing: " << line;
    ++by_end[j["end"].get<std::string>()];
    if (j["end"] == "late") continue;
    EXPECT_TRUE(ids.insert(j["ticket"].get<int64_t>()).second) << line;
    if (j["end"] == "applied" || j["end"] == "applied_stale") {
      EXPECT_TRUE(batches[j["epoch"]].insert(j["begin"].get<int64_t>()).second) << line;
      EXPECT_GE(j["gradients"].get<double>(), j["activations"].get<double>()) << line;
      EXPECT_GE(j["activations"].get<double>(), j["leased"].get<double>()) << line;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(ids.size()), m["tickets"].get<int64_t>());
  EXPECT_EQ(m["tickets"], 16);
  ASSERT_EQ(batches.size(), 2u);
  for (const auto& [epoch, begins] : batches) EXPECT_EQ(begins.size(), 8u) << "epoch " << epoch;
  EXPECT_EQ(m["ticket_log"]["file"], log.string());
  EXPECT_EQ(m["ticket_log"]["records"].get<int64_t>(),
            static_cast<int64_t>(ids.size()) + by_end["late"]);
  for (const auto& [end, n] : by_end) EXPECT_EQ(m["ticket_log"]["by_end"][end], n) << end;
  EXPECT_EQ(by_end["applied"] + by_end["applied_stale"], m["grads_applied"].get<int64_t>());
  EXPECT_EQ(by_end["dropped"], m["grads_dropped"].get<int64_t>());
  EXPECT_EQ(by_end["reissued"], m["reissued"].get<int64_t>());
  EXPECT_EQ(by_end["late"], m["late"].get<int64_t>());

  for (const std::string bad :
       {(dir.path / "no" / "such" / "dir" / "t.jsonl").string(), dir.path.string()}) {
    const Result refused = run("train " + spec.string() + " --distributed --ticket-log " + bad +
                               " --out " + (dir.path / "other").string());
    EXPECT_EQ(refused.code, 2) << bad << ": " << refused.err;
    EXPECT_NE(refused.err.find("--ticket-log"), std::string::npos) << refused.err;
    EXPECT_EQ(refused.err.find("loading"), std::string::npos) << "refused before the data";
    EXPECT_FALSE(std::filesystem::exists(dir.path / "other" / "parts.metrics.json"));
  }
  const Result alone = run("train " + spec.string() + " --ticket-log " + log.string());
  EXPECT_NE(alone.code, 0) << "--ticket-log needs --distributed";
  EXPECT_NE(alone.err.find("--ticket-log"), std::string::npos) << alone.err;
}

}  // namespace train_distributed_test
}  // namespace dnnlab::cli_test
