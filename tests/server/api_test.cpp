// REST endpoints against a real server: listings, paging and sorting, trial
// detail with curve, workers, stats, events, auth and every 4xx the API gives.
#include "server/api.hpp"

#include <set>

#include "db/pg_db.hpp"
#include "db/sqlite_db.hpp"
#include "server_fixture.hpp"
#include "store/trial_json.hpp"
#include "store_backends.hpp"

namespace dnnlab::server::testing {
namespace {

class ApiTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    url_ = store_url(GetParam(), dir_);
    DNNLAB_REQUIRE_STORE(url_);
    store_ = store::open_result_store(url_);
    exp_ = populate(*store_, 250);
    ServerOptions o;
    o.store_url = url_;
    o.broker_url = broker_url(url_, dir_);
    o.max_body = 64 * 1024;
    o.run_coordinators = false;
    server_ = std::make_unique<RunningServer>(o);
  }
  void TearDown() override { server_.reset(); }

  TempDir dir_;
  std::string url_;
  std::unique_ptr<store::ResultStore> store_;
  std::int64_t exp_ = 0;
  std::unique_ptr<RunningServer> server_;
};

INSTANTIATE_TEST_SUITE_P(Stores, ApiTest, DNNLAB_STORE_BACKENDS, store_backend_name);

TEST_P(ApiTest, ListsExperimentsWithCountsAndBest) {
  auto r = server_->get("/api/experiments");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  json j = parse(r);
  ASSERT_EQ(j["experiments"].size(), 1u);
  json e = j["experiments"][0];
  EXPECT_EQ(e["id"], exp_);
  EXPECT_EQ(e["name"], "pop");
  EXPECT_EQ(e["status"], "running");
  EXPECT_EQ(e["method"], "grid");
  EXPECT_EQ(e["counts"]["finished"], 84);
  EXPECT_EQ(e["counts"]["queued"], 166);
  EXPECT_EQ(e["counts"]["total"], 250);
  ASSERT_TRUE(e["best"].is_object());
  EXPECT_EQ(e["best"]["metric"], "val_acc");
  EXPECT_GT(e["best"]["value"].get<double>(), 0.95);
}

TEST_P(ApiTest, GetsOneExperiment) {
  json e = parse(server_->get("/api/experiments/" + std::to_string(exp_)));
  EXPECT_EQ(e["spec_text"], "not a sweep");
  EXPECT_TRUE(e["provenance"].is_object());
  EXPECT_TRUE(e["parameters"].is_array());
  EXPECT_EQ(e["metric"], "val_acc");
  EXPECT_EQ(e["counts"]["total"], 250);
}

TEST_P(ApiTest, PagesTrialsConsistently) {
  std::set<std::int64_t> seen;
  std::int64_t last_index = -1;
  for (int offset = 0; offset < 250; offset += 100) {
    auto r = server_->get("/api/experiments/" + std::to_string(exp_) +
                          "/trials?limit=100&offset=" + std::to_string(offset));
    ASSERT_EQ(r.status, 200u) << r.body;
    json j = parse(r);
    EXPECT_EQ(j["total"], 250);
    EXPECT_EQ(j["offset"], offset);
    EXPECT_EQ(j["limit"], 100);
    EXPECT_EQ(j["trials"].size(), static_cast<std::size_t>(std::min(100, 250 - offset)));
    for (const auto& t : j["trials"]) {
      EXPECT_GT(t["index"].get<std::int64_t>(), last_index);  // default: by index ascending
      last_index = t["index"];
      seen.insert(t["id"].get<std::int64_t>());
      EXPECT_TRUE(t["params"].is_object());
      EXPECT_TRUE(t["params"].contains("depth"));
    }
  }
  EXPECT_EQ(seen.size(), 250u);
  json past =
      parse(server_->get("/api/experiments/" + std::to_string(exp_) + "/trials?offset=1000"));
  EXPECT_EQ(past["total"], 250);
  EXPECT_TRUE(past["trials"].empty());
}

TEST_P(ApiTest, SortsAndFiltersTrials) {
  auto r = server_->get("/api/experiments/" + std::to_string(exp_) +
                        "/trials?sort=val_acc&order=desc&status=finished&limit=1000");
  ASSERT_EQ(r.status, 200u) << r.body;
  json j = parse(r);
  EXPECT_EQ(j["total"], 84);
  ASSERT_EQ(j["trials"].size(), 84u);
  double prev = 2.0;
  for (const auto& t : j["trials"]) {
    EXPECT_EQ(t["status"], "finished");
    double v = t["val_acc"];
    EXPECT_LE(v, prev);
    prev = v;
  }
  json asc = parse(server_->get("/api/experiments/" + std::to_string(exp_) +
                                "/trials?sort=val_acc&order=asc&limit=5"));
  // Queued trials have no val_acc: they sort last either way.
  ASSERT_EQ(asc["trials"].size(), 5u);
  EXPECT_LE(asc["trials"][0]["val_acc"].get<double>(), asc["trials"][4]["val_acc"].get<double>());
  json queued = parse(
      server_->get("/api/experiments/" + std::to_string(exp_) + "/trials?status=queued&limit=1"));
  EXPECT_EQ(queued["total"], 166);
  EXPECT_EQ(queued["trials"][0]["val_acc"], nullptr);
}

// sort=params.NAME: numbers by value, strings as text, ties by index; a name
// the sweep does not have is a 400 naming it (never a silent fallback).
TEST_P(ApiTest, SortsTrialsByAParameterAndByWorker) {
  const std::string sweep =
      "name: by-param\n"
      "template:\n"
      "  data: {dataset: fashion-mnist, validation: 100, limit_train: 200}\n"
      "  model: {layers: [{repeat: ${depth}, dense: 8, activation: ${activation}}, {dense: 10}]}\n"
      "  train: {epochs: 1, batch_size: 32, optimizer: {type: sgd, lr: 0.1}}\n"
      "search:\n"
      "  method: grid\n"
      "  parameters: {depth: [1, 2, 3, 4, 5, 6, 7], activation: [relu, tanh]}\n";
  const std::int64_t exp = populate(*store_, 30, "by-param", sweep);
  const std::string base = "/api/experiments/" + std::to_string(exp) + "/trials?";
  auto r = server_->get(base + "sort=params.depth&order=desc&limit=1000");
  ASSERT_EQ(r.status, 200u) << r.body;
  json j = parse(r);
  EXPECT_EQ(j["sort"], "params.depth");
  ASSERT_EQ(j["trials"].size(), 30u);
  int prev_depth = 100;
  std::int64_t prev_index = -1;
  for (const auto& t : j["trials"]) {
    const int depth = t["params"]["depth"];
    EXPECT_LE(depth, prev_depth);
    if (depth == prev_depth) {  // ties
      EXPECT_GT(t["index"].get<std::int64_t>(), prev_index);
    }
    prev_depth = depth;
    prev_index = t["index"];
  }
  json act = parse(server_->get(base + "sort=params.activation&order=asc&limit=1000"));
  EXPECT_EQ(act["trials"].front()["params"]["activation"], "relu");
  EXPECT_EQ(act["trials"].back()["params"]["activation"], "tanh");
  // by worker: the finished trials' "w1" after the queued trials' ""
  json by_worker = parse(server_->get(base + "sort=worker&order=desc&limit=10"));
  EXPECT_EQ(by_worker["trials"].front()["worker"], "w1");

  for (const std::string bad : {"params.width", "params.", "params.depth;drop", "params.a%20b"}) {
    auto e = server_->get(base + "sort=" + bad);
    EXPECT_EQ(e.status, 400u) << bad << " -> " << e.body;
    json err = parse(e);
    EXPECT_EQ(err["field"], "sort") << bad;
  }
  json width = parse(server_->get(base + "sort=params.width"));
  EXPECT_NE(width["error"].get<std::string>().find("unknown parameter 'width'"), std::string::npos)
      << width.dump();
  EXPECT_NE(width["error"].get<std::string>().find("depth, activation"), std::string::npos);
}

TEST_P(ApiTest, BadTrialQueriesName400TheParameter) {
  const std::string base = "/api/experiments/" + std::to_string(exp_) + "/trials?";
  const std::pair<std::string, std::string> cases[] = {
      {"sort=bogus", "sort"},       {"order=up", "order"},   {"status=done", "status"},
      {"limit=0", "limit"},         {"limit=1001", "limit"}, {"limit=ten", "limit"},
      {"offset=-1", "offset"},      {"offset=1x", "offset"}, {"colour=red", "colour"},
      {"limit=1&limit=2", "limit"}, {"sort=%zz", "query"}};
  for (const auto& [q, field] : cases) {
    auto r = server_->get(base + q);
    EXPECT_EQ(r.status, 400u) << q;
    json j = parse(r);
    EXPECT_EQ(j["field"], field) << q << " -> " << r.body;
    EXPECT_TRUE(j["error"].is_string());
  }
}

TEST_P(ApiTest, BadAndUnknownIds) {
  EXPECT_EQ(server_->get("/api/experiments/abc").status, 400u);
  EXPECT_EQ(parse(server_->get("/api/experiments/abc"))["field"], "id");
  EXPECT_EQ(server_->get("/api/experiments/-3").status, 400u);
  EXPECT_EQ(server_->get("/api/experiments/99999999999999999999").status, 400u);
  EXPECT_EQ(server_->get("/api/experiments/999").status, 404u);
  EXPECT_EQ(server_->get("/api/experiments/999/trials").status, 404u);
  EXPECT_EQ(server_->get("/api/trials/x1").status, 400u);
  EXPECT_EQ(server_->get("/api/trials/123456").status, 404u);
  EXPECT_EQ(server_->post("/api/experiments/999/cancel", "", server_->token()).status, 404u);
}

TEST_P(ApiTest, UnknownRoutesAndWrongMethods) {
  auto r = server_->get("/api/nothing/here");
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_TRUE(parse(r)["error"].is_string());
  auto m = http_request(server_->url(), "DELETE", "/api/workers", {}, server_->token());
  EXPECT_EQ(m.status, 405u);
  EXPECT_EQ(parse(m)["field"], "method");
  EXPECT_EQ(server_->get("/api/experiments/1/cancel").status, 405u);
  EXPECT_EQ(http_request(server_->url(), "GE", "/api/experiments", {}, server_->token()).status,
            405u);
  EXPECT_EQ(http_request(server_->url(), "PUT", "/api/experiments", "{}", server_->token()).status,
            405u);
}

TEST_P(ApiTest, TrialDetailHasTheCurve) {
  auto id = store_->trials(exp_, {}).at(1).id;  // index 1: queued
  ASSERT_TRUE(store_->mark_running(id, 1, "w7"));
  for (int ep = 1; ep <= 3; ++ep) {
    store::EpochMetrics m;
    m.epoch = ep;
    m.train_loss = 1.0 / ep;
    m.val_acc = 0.5 + 0.1 * ep;
    m.seconds = ep;
    m.lr = 0.1;
    ASSERT_TRUE(store_->record_epoch(id, 1, m));
  }
  json t = parse(server_->get("/api/trials/" + std::to_string(id)));
  EXPECT_EQ(t["status"], "running");
  EXPECT_EQ(t["worker"], "w7");
  EXPECT_EQ(t["attempt"], 1);
  ASSERT_EQ(t["curve"].size(), 3u);
  EXPECT_EQ(t["curve"][2]["epoch"], 3);
  EXPECT_DOUBLE_EQ(t["curve"][2]["val_acc"].get<double>(), 0.8);
  EXPECT_EQ(t["curve"][0]["val_loss"], nullptr);
  EXPECT_DOUBLE_EQ(t["curve"][0]["lr"].get<double>(), 0.1);
}

TEST_P(ApiTest, WorkersAndStats) {
  store::WorkerRecord w;
  w.id = "host-1";
  w.host = "host";
  w.pid = 42;
  w.started_at = 1.0;
  store_->upsert_worker(w);
  w.id = "browser-1";
  w.kind = store::WorkerKind::browser;
  store_->upsert_worker(w);
  store_->mark_worker_gone("browser-1");
  json ws = parse(server_->get("/api/workers"));
  ASSERT_EQ(ws["workers"].size(), 2u);
  for (const auto& x : ws["workers"]) {
    EXPECT_TRUE(x.contains("last_seen"));
    EXPECT_TRUE(x.contains("current_trial"));
    EXPECT_EQ(x["gone"], x["id"] == "browser-1");
  }
  json s = parse(server_->get("/api/stats"));
  EXPECT_EQ(s["workers_active"], 1);
  EXPECT_EQ(s["counts"]["total"], 250);
  EXPECT_EQ(s["counts"]["finished"], 84);
  EXPECT_TRUE(s["trials_per_second"].is_number());
  EXPECT_EQ(s["queue_depth"].get<std::int64_t>() >= 0, true);
}

// Workers that left are listed for 10 minutes (?gone=recent, the default),
// then only with ?gone=all; "gone_omitted" counts the rest. Their rows stay
// in the store (trials name their worker).
TEST_P(ApiTest, WorkersThatLeftLongAgoAreListedOnlyOnRequest) {
  store::WorkerRecord w;
  for (const char* id : {"busy", "left-now", "left-long-ago"}) {
    w.id = id;
    store_->upsert_worker(w);
  }
  store_->mark_worker_gone("left-now");
  store_->mark_worker_gone("left-long-ago");
  const std::string backdate =
      "UPDATE workers SET last_seen = last_seen - 3600 WHERE id = 'left-long-ago'";
  if (GetParam() == "sqlite")
    sqlite::Database(url_.substr(std::string("sqlite:").size())).exec(backdate);
  else
    pg::Connection(url_).exec(backdate);
  auto ids = [&](const std::string& target) {
    json r = parse(server_->get(target));
    std::set<std::string> got;
    for (const auto& x : r["workers"]) got.insert(x["id"].get<std::string>());
    return std::pair{got, r["gone_omitted"].get<int>()};
  };
  using Ids = std::set<std::string>;
  EXPECT_EQ(ids("/api/workers"), std::pair(Ids{"busy", "left-now"}, 1));
  EXPECT_EQ(ids("/api/workers?gone=recent"), std::pair(Ids{"busy", "left-now"}, 1));
  EXPECT_EQ(ids("/api/workers?gone=all"), std::pair(Ids{"busy", "left-now", "left-long-ago"}, 0));
  EXPECT_EQ(ids("/api/workers?gone=none"), std::pair(Ids{"busy"}, 2));
  auto bad = server_->get("/api/workers?gone=yes");
  EXPECT_EQ(bad.status, 400u);
  EXPECT_EQ(parse(bad)["field"], "gone");
  EXPECT_EQ(server_->get("/api/workers?limit=3").status, 400u);  // not a key of this route
}

TEST_P(ApiTest, EventsAsPlainJson) {
  auto a = store_->append_event("trial.started", {{"trial", 1}});
  store_->append_event("trial.finished", {{"trial", 1}});
  json all = parse(server_->get("/api/events?after=0"));
  ASSERT_GE(all["events"].size(), 2u);
  json later = parse(server_->get("/api/events?after=" + std::to_string(a)));
  ASSERT_EQ(later["events"].size(), 1u);
  EXPECT_EQ(later["events"][0]["type"], "trial.finished");
  EXPECT_EQ(later["events"][0]["data"]["trial"], 1);
  EXPECT_EQ(later["last_id"], later["events"][0]["id"]);
  EXPECT_EQ(server_->get("/api/events?after=x").status, 400u);
  EXPECT_EQ(server_->get("/api/events?limit=0").status, 400u);
}

TEST_P(ApiTest, WritesNeedTheToken) {
  const std::string body = R"({"spec": "name: x"})";
  auto none = server_->post("/api/experiments", body, "");
  EXPECT_EQ(none.status, 401u);
  EXPECT_EQ(parse(none)["field"], "Authorization");
  EXPECT_EQ(server_->post("/api/experiments", body, "wrong").status, 401u);
  EXPECT_EQ(server_->post("/api/experiments/1/cancel", "", std::string(64, 'a')).status, 401u);
  // Reads are public by default.
  EXPECT_EQ(server_->get("/api/experiments").status, 200u);
}

TEST_P(ApiTest, MalformedAndUnknownBodies) {
  const auto& tok = server_->token();
  auto bad = server_->post("/api/experiments", "{\"spec\": ", tok);
  EXPECT_EQ(bad.status, 400u);
  EXPECT_EQ(parse(bad)["field"], "body");
  auto arr = server_->post("/api/experiments", "[1,2]", tok);
  EXPECT_EQ(arr.status, 400u);
  auto unknown = server_->post("/api/experiments", R"({"spec": "x", "colour": 1})", tok);
  EXPECT_EQ(unknown.status, 400u);
  EXPECT_EQ(parse(unknown)["field"], "colour");
  auto missing = server_->post("/api/experiments", R"({"name": "a.yaml"})", tok);
  EXPECT_EQ(missing.status, 400u);
  EXPECT_EQ(parse(missing)["field"], "spec");
  auto wrong_type = server_->post("/api/experiments", R"({"spec": 3})", tok);
  EXPECT_EQ(parse(wrong_type)["field"], "spec");
  auto big = server_->post("/api/experiments",
                           R"({"spec": ")" + std::string(100 * 1024, 'x') + R"("})", tok);
  EXPECT_EQ(big.status, 413u);
  EXPECT_EQ(parse(big)["field"], "body");
  // Still serving.
  EXPECT_EQ(server_->get("/api/stats").status, 200u);
}

TEST_P(ApiTest, CancelMarksTheExperiment) {
  auto r =
      server_->post("/api/experiments/" + std::to_string(exp_) + "/cancel", "", server_->token());
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(parse(r)["status"], "cancelled");
  json e = parse(server_->get("/api/experiments/" + std::to_string(exp_)));
  EXPECT_EQ(e["status"], "cancelled");
  EXPECT_EQ(e["counts"]["queued"], 0);
  EXPECT_EQ(e["counts"]["cancelled"], 166);
}

TEST(ApiPrivateReads, ReadsNeedTheTokenWhenAsked) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("d.db");
  o.public_reads = false;
  o.run_coordinators = false;
  RunningServer s(o);
  EXPECT_EQ(s.get("/api/experiments").status, 401u);
  EXPECT_EQ(s.get("/api/experiments", "nope").status, 401u);
  EXPECT_EQ(s.get("/api/experiments", s.token()).status, 200u);
  EXPECT_EQ(s.get("/metrics", s.token()).status, 200u);
  EXPECT_EQ(s.get("/api/stats?token=" + s.token()).status, 200u);
}

}  // namespace
}  // namespace dnnlab::server::testing

namespace dnnlab::server::testing {
namespace {

// The one trial encoder against what the API sent before it replaced the
// nlohmann-built trial_json (frozen here, from the build before): the list's
// rows byte for byte, the detail (with provenance and curve; nlohmann sorted
// its keys) as the same JSON.
TEST(TrialJson, EncoderMatchesTheFrozenReference) {
  store::TrialRecord t;
  t.id = 7;
  t.experiment_id = 2;
  t.index = 41;
  t.seed = 18446744073709551615ull;
  t.status = store::TrialStatus::failed;
  t.attempt = 2;
  t.worker = "host \"a\"\\b";
  t.started_at = 1796221777.1138506;
  t.metrics.val_acc = 1.0;
  t.metrics.train_loss = 2.29999999998953e-05;
  t.metrics.val_loss = 0.1 + 0.2;
  t.metrics.epochs_done = 3;
  t.metrics.seconds = 12;
  t.error = "bad\nthing\t\x01 — naïve";
  t.provenance = {{"build", "abc123"}, {"kernel", "avx2"}, {"data_sha256", "e3b0"}};
  for (int ep = 1; ep <= 2; ++ep) {
    store::EpochMetrics m;
    m.epoch = ep;
    m.train_loss = 1.0 / 3 / ep;
    if (ep == 2) m.val_acc = 0.75;
    m.seconds = 0.5 * ep;
    m.lr = ep == 1 ? std::optional<double>(0.1) : std::nullopt;
    t.curve.push_back(m);
  }
  struct Case {
    std::string config, list, detail;
  };
  const Case cases[] = {
      {R"({"depth": 3, "act": "relu", "lr": 0.001})",
       R"json({"id":7,"experiment_id":2,"index":41,"params":{"depth": 3, "act": "relu", "lr": 0.001},"seed":"18446744073709551615","status":"failed","attempt":2,"worker":"host \"a\"\\b","started_at":1796221777.1138506,"finished_at":null,"train_loss":2.29999999998953e-05,"train_acc":null,"val_loss":0.30000000000000004,"val_acc":1.0,"test_acc":null,"epochs_done":3,"seconds":12.0,"error":"bad\nthing\t\u0001 — naïve","provisional":false})json",
       R"json({"attempt":2,"curve":[{"epoch":1,"lr":0.1,"seconds":0.5,"train_acc":null,"train_loss":0.3333333333333333,"val_acc":null,"val_loss":null},{"epoch":2,"lr":null,"seconds":1.0,"train_acc":null,"train_loss":0.16666666666666666,"val_acc":0.75,"val_loss":null}],"epochs_done":3,"error":"bad\nthing\t\u0001 — naïve","experiment_id":2,"finished_at":null,"id":7,"index":41,"params":{"act":"relu","depth":3,"lr":0.001},"pinned":false,"provenance":{"build":"abc123","data_sha256":"e3b0","kernel":"avx2"},"provisional":false,"seconds":12.0,"seed":"18446744073709551615","started_at":1796221777.1138506,"status":"failed","test_acc":null,"train_acc":null,"train_loss":2.29999999998953e-05,"val_acc":1.0,"val_loss":0.30000000000000004,"worker":"host \"a\"\\b"})json"},
      {"not json {",
       R"json({"id":7,"experiment_id":2,"index":41,"params":"not json {","seed":"18446744073709551615","status":"failed","attempt":2,"worker":"host \"a\"\\b","started_at":1796221777.1138506,"finished_at":null,"train_loss":2.29999999998953e-05,"train_acc":null,"val_loss":0.30000000000000004,"val_acc":1.0,"test_acc":null,"epochs_done":3,"seconds":12.0,"error":"bad\nthing\t\u0001 — naïve","provisional":false})json", R"json({"attempt":2,"curve":[{"epoch":1,"lr":0.1,"seconds":0.5,"train_acc":null,"train_loss":0.3333333333333333,"val_acc":null,"val_loss":null},{"epoch":2,"lr":null,"seconds":1.0,"train_acc":null,"train_loss":0.16666666666666666,"val_acc":0.75,"val_loss":null}],"epochs_done":3,"error":"bad\nthing\t\u0001 — naïve","experiment_id":2,"finished_at":null,"id":7,"index":41,"params":"not json {","pinned":false,"provenance":{"build":"abc123","data_sha256":"e3b0","kernel":"avx2"},"provisional":false,"seconds":12.0,"seed":"18446744073709551615","started_at":1796221777.1138506,"status":"failed","test_acc":null,"train_acc":null,"train_loss":2.29999999998953e-05,"val_acc":1.0,"val_loss":0.30000000000000004,"worker":"host \"a\"\\b"})json"},
  };
  for (const Case& c : cases) {
    t.config_json = c.config;
    std::string row;
    append_trial_json(row, t);
    EXPECT_EQ(row, c.list);
    std::string detail;
    append_trial_json(detail, t, /*with_curve=*/true);
    EXPECT_EQ(json::parse(detail), json::parse(c.detail)) << detail;
    // The detail is the row with provenance and curve appended.
    EXPECT_EQ(detail.substr(0, row.size() - 1), row.substr(0, row.size() - 1));
  }
}

}  // namespace
}  // namespace dnnlab::server::testing

namespace dnnlab::server::testing {
namespace {

TEST(ApiNoReaderPool, TrialListsOnTheIoThread) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("d.db");
  o.read_threads = 0;
  o.run_coordinators = false;
  auto st = store::open_result_store(o.store_url);
  auto id = populate(*st, 30);
  RunningServer s(o);
  json j = parse(s.get("/api/experiments/" + std::to_string(id) + "/trials?limit=7&offset=28"));
  EXPECT_EQ(j["total"], 30);
  EXPECT_EQ(j["trials"].size(), 2u);
}

}  // namespace
}  // namespace dnnlab::server::testing
