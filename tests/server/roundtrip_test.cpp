// submit -> run -> results: a tiny sweep goes in over HTTP, the server's
// coordinator queues its trials, this test plays the worker (lease, write the
// results through the store, ack), and the API then reports them finished.
#include <chrono>
#include <fstream>
#include <sstream>

#include "db/task_codec.hpp"
#include "experiment/coordinator.hpp"
#include "queue/task_queue.hpp"
#include "server_fixture.hpp"

namespace dnnlab::server::testing {
namespace {

std::string read_example(const std::string& name) {
  const char* src = std::getenv("DNNLAB_SOURCE_DIR");
  std::ifstream f(std::string(src ? src : ".") + "/examples/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(RoundTrip, InvalidSweepIs400WithItsLocation) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  RunningServer s(o);
  json body = {{"spec", "name: x\nsearch:\n  method: sideways\n"}, {"name", "bad.yaml"}};
  auto r = s.post("/api/experiments", body.dump(), s.token());
  ASSERT_EQ(r.status, 400u) << r.body;
  json j = parse(r);
  EXPECT_NE(j["error"].get<std::string>().find("bad.yaml:"), std::string::npos) << r.body;
  EXPECT_TRUE(j.contains("field"));
  EXPECT_TRUE(parse(s.get("/api/experiments"))["experiments"].empty());
}

// Issue 24: a self-referencing alias segfaulted the server that parsed the
// submitted sweep (a stranger with the write token could kill it). Now each
// is a 400 naming where, and the server goes on.
TEST(RoundTrip, CyclicOrExplodingYamlIs400AndTheServerGoesOn) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  RunningServer s(o);
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'k'; ++c)
    laughs += std::string(1, c) + ": &" + c + " [*" + char(c - 1) + ", *" + char(c - 1) + ", *" +
              char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + "]\n";
  for (const std::string& spec :
       {std::string("name: x\ntemplate: &t {model: *t}\n"), std::string("a: &x [*x]\n"),
        std::string(100000, '[') + std::string(100000, ']') + "\n", laughs}) {
    auto r =
        s.post("/api/experiments", json{{"spec", spec}, {"name", "bad.yaml"}}.dump(), s.token());
    EXPECT_EQ(r.status, 400u) << r.body;
    EXPECT_NE(r.body.find("bad.yaml:"), std::string::npos) << r.body;
  }
  EXPECT_EQ(s.get("/api/experiments").status, 200u);
  EXPECT_TRUE(parse(s.get("/api/experiments"))["experiments"].empty());
}

TEST(RoundTrip, SubmitRunResults) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  RunningServer s(o);
  const std::string sweep = read_example("quick-sweep.yaml");
  ASSERT_FALSE(sweep.empty());
  auto r = s.post("/api/experiments", json{{"spec", sweep}, {"name", "quick-sweep.yaml"}}.dump(),
                  s.token());
  ASSERT_EQ(r.status, 202u) << r.body;
  const std::int64_t id = parse(r)["id"];

  auto st = store::open_result_store(o.store_url);
  auto q = queue::open_task_queue(o.store_url);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int done = 0;
  json e;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto lease = q->lease(db::queue_name(id), "test-worker", 30)) {
      auto task = db::decode_task(lease->payload);
      ASSERT_TRUE(st->mark_running(task.trial_id, lease->attempt, "test-worker"));
      store::EpochMetrics em;
      em.epoch = 1;
      em.val_acc = 0.5 + 0.1 * task.index;
      em.train_loss = 0.7;
      ASSERT_TRUE(st->record_epoch(task.trial_id, lease->attempt, em));
      store::TrialMetrics m;
      m.val_acc = em.val_acc;
      m.val_loss = 0.4;
      m.test_acc = 0.5;
      m.epochs_done = 1;
      m.seconds = 0.1;
      ASSERT_TRUE(st->finish_trial(task.trial_id, lease->attempt, store::TrialStatus::finished, m));
      ASSERT_TRUE(q->ack(*lease));
      ++done;
      continue;
    }
    e = parse(s.get("/api/experiments/" + std::to_string(id)));
    // Counts may lag the status by up to kCountsMaxAge.
    if (e["status"] == "finished" && e["counts"]["finished"] == 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(e["status"], "finished") << e.dump();
  EXPECT_EQ(done, 4);
  EXPECT_EQ(e["counts"]["finished"], 4);
  // openapi.yaml: `planned` is present only while this server drives the experiment.
  EXPECT_FALSE(e.contains("planned")) << e.dump();
  EXPECT_FALSE(parse(s.get("/api/experiments"))["experiments"][0].contains("planned"));
  EXPECT_EQ(e["name"], "quick-sweep");
  EXPECT_EQ(e["parameters"], json::array({"depth", "activation"}));
  ASSERT_TRUE(e["best"].is_object());
  EXPECT_NEAR(e["best"]["value"].get<double>(), 0.8, 1e-9);

  json trials =
      parse(s.get("/api/experiments/" + std::to_string(id) + "/trials?sort=val_acc&order=desc"));
  ASSERT_EQ(trials["total"], 4);
  EXPECT_EQ(trials["trials"][0]["id"], e["best"]["trial_id"]);
  json one = parse(s.get("/api/trials/" + trials["trials"][0]["id"].dump()));
  ASSERT_EQ(one["curve"].size(), 1u);
  EXPECT_TRUE(one["params"].is_object());
}

TEST(RoundTrip, CancelStopsARunningSweep) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  RunningServer s(o);
  auto r = s.post("/api/experiments", json{{"spec", read_example("quick-sweep.yaml")}}.dump(),
                  s.token());
  ASSERT_EQ(r.status, 202u) << r.body;
  const std::int64_t id = parse(r)["id"];
  const std::string path = "/api/experiments/" + std::to_string(id);
  // Wait for a coordinator tick: it reports `planned` while it drives the sweep.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!parse(s.get(path)).contains("planned") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(parse(s.get(path))["planned"], 4);
  auto c = s.post(path + "/cancel", "", s.token());
  ASSERT_EQ(c.status, 200u) << c.body;
  json e = parse(s.get(path));
  EXPECT_EQ(e["status"], "cancelled");
  EXPECT_EQ(e["counts"]["queued"], 0);
  EXPECT_FALSE(e.contains("planned")) << e.dump();
}

}  // namespace
}  // namespace dnnlab::server::testing
