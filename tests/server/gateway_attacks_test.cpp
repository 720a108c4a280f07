// Attacks on verification, each performed with the documented join protocol
// (docs/security.md, "Attacks tried"): a client that fakes the final metrics,
// a trusted identity that lies, throwaway identities that go silent, progress
// that would steer the scheduler, floods of failures, inflation within the
// verifier's tolerance, replayed public curves. Each test shows the attack
// fails.
#include "gateway_fixture.hpp"

namespace dnnlab::server::testing {
namespace {

class GatewayAttackTest : public GatewayTest {};

// kSweep with `n` learning rates (n trials: lr, 2 lr, ... n lr) and `epochs` epochs.
std::string sweep_of(int n, int epochs = 2, const char* scheduler = "type: fifo",
                     double lr = 0.02) {
  std::string s = kSweep;
  std::string lrs = "[";
  for (int i = 0; i < n; ++i) lrs += (i ? ", " : "") + std::to_string(lr * (i + 1));
  lrs += "]";
  s.replace(s.find("[0.05, 0.1, 0.2]"), 16, lrs);
  s.replace(s.find("epochs: 2"), 9, "epochs: " + std::to_string(epochs));
  s.replace(s.find("type: fifo"), 10, scheduler);
  return s;
}

json msg(const char* type, const json& fields = json::object()) {
  json j{{"v", 1}, {"type", type}};
  j.merge_patch(fields);
  return j;
}

json progress_of(const json& ticket, int epoch, double acc) {
  return msg("progress", {{"ticket", ticket["ticket"]},
                          {"epoch", epoch},
                          {"train_loss", 1.0},
                          {"train_acc", acc},
                          {"val_loss", 1.0},
                          {"val_acc", acc},
                          {"seconds", 0.1}});
}

// Issue 24, verification 1: an honest curve with a made-up final val_loss or
// test_acc. The final metrics are the curve's last epoch (a different copy
// is refused), and the test accuracy is compared by the re-run.
TEST_F(GatewayAttackTest, FakeFinalMetricsAreNeitherStoredNorRanked) {
  start(1.0);
  auto [a, wa] = join("fakes-val-loss");
  auto t = request(a);
  ASSERT_TRUE(t);
  auto r = work(a, *t, 0, 0, [](json& m) { m["metrics"]["val_loss"] = 0.0001; });
  EXPECT_TRUE(r.close);
  EXPECT_NE(r.reason.find("val_loss differs from the last epoch's"), std::string::npos) << r.reason;
  gw->close(a);

  auto [b, wb] = join("fakes-test-acc");
  auto tb = request(b);
  ASSERT_TRUE(tb);
  // 0.999, or 0.001 when the honest one is high (the synthetic data is easy).
  double faked_test_acc = 0;
  r = work(b, *tb, 0, 0, [&](json& m) {
    faked_test_acc = m["metrics"]["test_acc"].get<double>() < 0.5 ? 0.999 : 0.001;
    m["metrics"]["test_acc"] = faked_test_acc;
  });
  ASSERT_FALSE(r.close) << r.reason;
  const std::int64_t trial = tb->at("trial")["id"];
  // Stored as the curve says, provisional, not the best.
  auto rec = st->trial(trial);
  ASSERT_EQ(rec->curve.size(), 2u);
  EXPECT_EQ(rec->metrics.val_loss, rec->curve.back().val_loss);
  EXPECT_EQ(rec->metrics.val_acc, rec->curve.back().val_acc);
  EXPECT_EQ(rec->metrics.train_loss, rec->curve.back().train_loss);
  EXPECT_DOUBLE_EQ(rec->metrics.seconds, rec->curve[0].seconds + rec->curve[1].seconds);
  EXPECT_TRUE(rec->provisional);
  EXPECT_EQ(rec->metrics.test_acc, faked_test_acc);
  EXPECT_EQ(st->best_trial(exp), std::nullopt);
  // The re-run compares the test accuracy: quarantined, the trial reopened.
  auto closes = settle_all();
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_EQ(closes[0].first, b);
  auto verified = events("trial.verified");
  ASSERT_EQ(verified.size(), 1u);
  EXPECT_FALSE(verified[0].data["agree"].get<bool>());
  EXPECT_NE(verified[0].data["detail"].get<std::string>().find("test_acc"), std::string::npos)
      << verified[0].data.dump();
  EXPECT_EQ(st->trial(trial)->status, store::TrialStatus::queued);
  EXPECT_EQ(st->best_trial(exp), std::nullopt);
}

// Verification 2: a trusted identity's result that would be the new best is
// re-run before it counts, whatever the trust; one that changes no ranking
// is not re-run but stays provisional (shown, never ranked or scheduled).
TEST_F(GatewayAttackTest, ATrustedLiarsNewBestIsVerifiedBeforeItCounts) {
  extra.trust_after = 0;  // everyone trusted: only the floor of 0 would be re-run
  extra.verify_top_k = 1;
  const std::string sw = sweep_of(3);
  start(0.0, sw.c_str());
  auto [liar, wl] = join("trusted-liar");
  auto t = request(liar);
  ASSERT_TRUE(t);
  ASSERT_FALSE(work(liar, *t, /*lie=*/-0.5, /*acc_lie=*/0.3).close);
  const std::int64_t faked = t->at("trial")["id"];
  EXPECT_EQ(st->best_trial(exp), std::nullopt) << "not ranked before the re-run";
  auto closes = settle_all();
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_EQ(closes[0].first, liar);
  EXPECT_EQ(st->trial(faked)->status, store::TrialStatus::queued);
  gw->close(liar);

  // An honest trusted client: its first result is the best so far (re-run,
  // then it counts); the others cannot be the best unless they beat it.
  auto [h, wh] = join("trusted-honest");
  std::vector<std::int64_t> done;
  while (auto tk = request(h)) {
    ASSERT_FALSE(work(h, *tk).close);
    done.push_back(tk->at("trial")["id"].get<std::int64_t>());
    settle_all();
  }
  ASSERT_EQ(done.size(), 3u);
  auto best = st->best_trial(exp);
  ASSERT_TRUE(best);
  EXPECT_FALSE(best->provisional);
  int unverified = 0;
  for (auto id : done) {
    auto rec = st->trial(id);
    if (!rec->provisional) continue;
    ++unverified;  // not re-run: it ranks nowhere, so it must not be the best
    EXPECT_LE(*rec->metrics.val_acc, *best->metrics.val_acc);
  }
  // Every counted result was re-run, and each re-run was of a result that
  // would have been the best when it came.
  EXPECT_EQ(events("trial.verified").size() - 1, done.size() - unverified);
  EXPECT_TRUE(events("worker.quarantined").size() == 1u);
}

// Verification 3: throwaway identities take tickets and go silent. The
// gateway keeps the queue's lease while it holds the ticket and gives it back
// itself when the client is silent, so no attempt is spent; the identities
// and their address pay.
TEST_F(GatewayAttackTest, SilentThrowawayIdentitiesFailNoTrial) {
  max_attempts = 3;
  extra.lease_seconds = 1;  // the queue's lease, in real seconds
  extra.max_abandons_per_address = 9;
  start(0.0);
  for (int round = 0; round < 3; ++round) {
    std::vector<Gateway::ClientId> silent;
    for (int i = 0; i < 3; ++i) {
      auto [c, w] = join("throwaway");  // a fresh identity each time
      ASSERT_TRUE(request(c)) << round << " " << i;
      silent.push_back(c);
    }
    // Longer than the queue's lease, in real time: the gateway renews it.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    while (std::chrono::steady_clock::now() < until) {
      EXPECT_TRUE(gw->poll().empty());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    now += 31;  // the clients' silence passes the limit: three heartbeats (10 s), above the lease
    int closed = 0;
    for (auto& [id, reply] : gw->poll()) {
      ++closed;
      EXPECT_NE(reply.reason.find("nothing heard for"), std::string::npos) << reply.reason;
      gw->close(id);
    }
    EXPECT_EQ(closed, 3);
  }
  store::TrialQuery all;
  for (const auto& t : st->trials(exp, all)) EXPECT_EQ(t.status, store::TrialStatus::queued);
  EXPECT_EQ(q->waiting(queue::dead_letter_queue(db::queue_name(exp))), 0);
  // Nine abandons from one address: a tenth identity from it waits out the cooldown.
  auto [c, w] = join("throwaway");
  json idle = parse_frame(send(c, msg("request")).frames.at(0));
  EXPECT_EQ(idle["reason"], "too many abandoned tickets");
  // An honest client elsewhere trains all three.
  auto [h, wh] = join("honest", "wasm-simd128", "10.7.7.7:1");
  int n = 0;
  while (auto tk = request(h)) {
    ASSERT_FALSE(work(h, *tk).close);
    ++n;
  }
  EXPECT_EQ(n, 3);
  EXPECT_EQ(st->trial_counts(exp).finished, 3);
}

// Verification 3 and 4: progress from a ticket the client then abandons
// steers nothing: not the rungs (a fake 0.99 does not prune an honest 0.5),
// and no cached decision outlives it (the trial's later run is decided anew).
TEST_F(GatewayAttackTest, UnverifiedProgressMovesNoScheduler) {
  extra.trust_after = 0;  // trusted: under the old rules their epochs fed the scheduler
  const std::string sw = sweep_of(3, 3, "type: asha\n  min_epochs: 1\n  reduction_factor: 3");
  start(0.0, sw.c_str());
  auto [a, wa] = join("stranger");
  auto ta = request(a);
  ASSERT_TRUE(ta);
  EXPECT_TRUE(parse_frame(send(a, progress_of(*ta, 1, 0.99)).frames.at(0))["continue"]);
  gw->close(a);  // abandoned
  auto [b, wb] = join("honest", "wasm-simd128", "10.1.1.1:1");
  auto tb = request(b);
  ASSERT_TRUE(tb);
  EXPECT_NE(tb->at("trial")["id"], ta->at("trial")["id"]);
  json v = parse_frame(send(b, progress_of(*tb, 1, 0.5)).frames.at(0));
  EXPECT_TRUE(v["continue"].get<bool>()) << "pruned by a fake value: " << v.dump();
  gw->close(b);
  // A native worker's epoch counts: the stranger's trial, run again, is
  // decided on it and not by the decision its fake 0.99 got.
  store::TrialQuery all;
  std::int64_t other = 0;
  for (const auto& t : st->trials(exp, all))
    if (t.id != ta->at("trial")["id"] && t.id != tb->at("trial")["id"]) other = t.id;
  ASSERT_TRUE(st->mark_running(other, 9, "native-1"));
  store::EpochMetrics m;
  m.epoch = 1;
  m.train_loss = m.val_loss = 1.0;
  m.train_acc = m.val_acc = 0.6;
  ASSERT_TRUE(st->record_epoch(other, 9, m));
  auto [c, wc] = join("honest-2", "wasm-simd128", "10.2.2.2:1");
  std::optional<json> tc;
  for (int i = 0; i < 3 && (!tc || tc->at("trial")["id"] != ta->at("trial")["id"]); ++i) {
    if (tc) gw->close(c), std::tie(c, wc) = join("honest-2", "wasm-simd128", "10.2.2.2:1");
    tc = request(c);
    ASSERT_TRUE(tc);
  }
  ASSERT_EQ(tc->at("trial")["id"], ta->at("trial")["id"]);
  v = parse_frame(send(c, progress_of(*tc, 1, 0.1)).frames.at(0));
  EXPECT_FALSE(v["continue"].get<bool>()) << "0.1 is not in the top third of {0.6, 0.1}";
}

// Verification 5: floods of fake failures from fresh identities queue at most
// the per-address and global bounds of re-runs; beyond them the results are
// refused, not queued; an address whose failures were not confirmed has its
// later failures refused outright.
TEST_F(GatewayAttackTest, FakeFailuresQueueBoundedReruns) {
  extra.max_pending_verifications_per_address = 2;
  extra.max_verify_queue = 3;
  extra.max_unconfirmed_failures_per_address = 0;
  extra.max_abandons_per_address = 1000;
  const std::string sw = sweep_of(8);
  start(0.0, sw.c_str());
  auto fail = [&](const std::string& address) -> std::string {
    auto id = gw->open(address);
    auto r = send(id, msg("hello", {{"token", "join-secret"}}));
    EXPECT_FALSE(r.close) << r.reason;
    json t;
    for (int i = 0; i < 500; ++i) {  // past "preparing data"
      t = parse_frame(send(id, msg("request")).frames.at(0));
      if (t["type"] != "idle" || t.value("reason", "") != "preparing data") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::string out = t["type"] == "idle" ? t.value("reason", "idle") : "";
    if (t["type"] == "ticket") {
      json a = parse_frame(
          send(id, msg("result", {{"ticket", t["ticket"]}, {"status", "failed"}})).frames.at(0));
      EXPECT_EQ(a["type"], "accepted");
      out = a.value("reason", "queued");
    }
    gw->close(id);
    EXPECT_LE(gw->verifications_pending(), 3u);
    return out;
  };
  std::map<std::string, int> outcomes;
  for (int i = 0; i < 25; ++i)
    for (const char* addr : {"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"}) ++outcomes[fail(addr)];
  EXPECT_EQ(outcomes["queued"], 3) << "the global bound";
  EXPECT_EQ(outcomes["waiting for verification"], 72);
  settle_all();  // the native runs train: no failure was confirmed
  EXPECT_EQ(gw->verifications_pending(), 0u);
  // Now those addresses' failures are refused, not re-run.
  outcomes.clear();
  for (const char* addr : {"10.0.0.1:1", "10.0.0.2:1"}) ++outcomes[fail(addr)];
  EXPECT_EQ(outcomes["failures from this address were not confirmed"], 2) << json(outcomes).dump();
  EXPECT_EQ(gw->verifications_pending(), 0u);
  store::TrialQuery all;
  for (const auto& t : st->trials(exp, all)) EXPECT_EQ(t.status, store::TrialStatus::queued);
}

// Issue 28: a browser says which backend trained its trial (webgpu, wasm,
// webgpu→wasm) and its adapter. The trial's provenance and /api/workers keep
// what it said, for display; verification is the same for every backend
// (docs/security.md, "Trust": the measured GPU-vs-native spread is well
// inside the one policy), so a WebGPU label buys a faked result nothing.
TEST_F(GatewayAttackTest, AWebGpuLabelIsDisplayedAndBuysAFakedResultNothing) {
  // Small rates: no validation accuracy near 1, where an inflation is capped.
  const std::string sw = sweep_of(3, 2, "type: fifo", 0.002);
  start(1.0, sw.c_str());
  const json gpu = {{"backend", "webgpu"},
                    {"adapter", {{"vendor", "google"}, {"architecture", "swiftshader"}}}};
  auto [h, wh] = join("honest-gpu");
  auto t = request(h);
  ASSERT_TRUE(t);
  const std::int64_t trial = t->at("trial")["id"];
  ASSERT_FALSE(work(h, *t, 0, 0, [&](json& m) { m.merge_patch(gpu); }).close);
  auto rec = st->trial(trial);
  EXPECT_EQ(rec->provenance["backend"], "webgpu");
  EXPECT_EQ(rec->provenance["adapter"]["architecture"], "swiftshader");
  EXPECT_EQ(rec->provenance["kernel_target"], "wasm-simd128") << "the wasm build it also holds";
  EXPECT_EQ(gw->worker_backends()[wh]["backend"], "webgpu");
  EXPECT_EQ(gw->worker_backends()[wh]["adapter"]["vendor"], "google");
  EXPECT_TRUE(settle_all().empty());
  auto verified = events("trial.verified");
  ASSERT_EQ(verified.size(), 1u);
  EXPECT_TRUE(verified[0].data["agree"].get<bool>());
  EXPECT_EQ(verified[0].data["backend"], "webgpu");
  // The spread, epoch by epoch and the final test accuracy: none here (the
  // fixture's client trains natively).
  const json& dev = verified[0].data["deviations"];
  ASSERT_EQ(dev.size(), 3u) << dev.dump();
  EXPECT_EQ(dev[0]["epoch"], 1);
  EXPECT_EQ(dev[2]["final"], "test_acc");
  for (const char* m : {"train_loss", "val_loss", "train_acc", "val_acc"})
    EXPECT_EQ(dev[1].value(m, -1.0), 0.0) << m << ": " << dev.dump();
  gw->close(h);
  EXPECT_FALSE(gw->worker_backends().contains(wh)) << "gone with its connection";

  // A WebGPU-labelled liar: validation accuracy up by 0.15, under 2 of the
  // 32 validation samples' worth past the tolerance (3 samples).
  auto [liar, wl] = join("gpu-liar", "wasm-simd128", "10.9.9.9:1");
  auto tl = request(liar);
  ASSERT_TRUE(tl);
  ASSERT_FALSE(work(liar, *tl, 0, 0.15, [&](json& m) { m.merge_patch(gpu); }).close);
  auto closes = settle_all();
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_EQ(closes[0].first, liar);
  verified = events("trial.verified");
  ASSERT_EQ(verified.size(), 2u);
  EXPECT_FALSE(verified[1].data["agree"].get<bool>());
  EXPECT_NE(verified[1].data["detail"].get<std::string>().find("val_acc"), std::string::npos)
      << verified[1].data.dump();
  EXPECT_EQ(st->trial(tl->at("trial")["id"].get<std::int64_t>())->status,
            store::TrialStatus::queued);
}

// Verification 5: inflation below the tolerance agrees result by result, but
// the bias test (a one-sided CUSUM per metric, k = 0.3, h = 2 tolerances)
// quarantines a client that inflates its validation accuracy by 0.75 of the
// tolerance within ceil(2 / (0.75 - 0.3)) = 5 verified results; an honest
// one never.
TEST_F(GatewayAttackTest, InflationWithinTheToleranceIsCaughtByTheBiasTest) {
  // Small rates: no validation accuracy near 1, where an inflation is capped.
  const std::string sw = sweep_of(8, 2, "type: fifo", 0.002);
  start(1.0, sw.c_str());
  const double tol = 3.0 / 32;  // 3 of the 32 validation (and test) samples
  auto [liar, wl] = join("inflates");
  int results = 0;
  bool caught = false;
  while (!caught && results < 8) {
    auto t = request(liar);
    if (!t) break;
    auto r = work(liar, *t, 0, 0.75 * tol);
    ASSERT_FALSE(r.close) << r.reason;
    ++results;
    for (auto& [id, reply] : settle_all()) {
      caught |= id == liar;
      EXPECT_NE(reply.reason.find("consistently better"), std::string::npos) << reply.reason;
    }
  }
  EXPECT_TRUE(caught);
  EXPECT_LE(results, 5);
  for (const auto& e : events("trial.verified")) EXPECT_TRUE(e.data["agree"].get<bool>());
  gw->close(liar);
  auto [h, wh] = join("honest", "wasm-simd128", "10.3.3.3:1");
  int n = 0;
  while (auto t = request(h)) {
    ASSERT_FALSE(work(h, *t).close);
    ++n;
  }
  EXPECT_EQ(n, 8);
  EXPECT_TRUE(settle_all().empty());
  EXPECT_EQ(events("worker.quarantined").size(), 1u);
}

// Verification 7: an experiment that runs a sweep already run (the same
// seeds, so its curves are public) earns no trust: every result of a new
// identity is re-run, however many agree.
TEST_F(GatewayAttackTest, ReplayedCurvesEarnNoTrust) {
  extra.verify_top_k = 0;
  const std::string sw = sweep_of(6);
  start(0.0, sw.c_str());
  auto [first, wf] = join("first", "wasm-simd128", "10.4.4.4:1");
  while (auto t = request(first)) ASSERT_FALSE(work(first, *t).close);
  settle_all();
  EXPECT_EQ(st->trial_counts(exp).finished, 6);
  // The same sweep again (as a new experiment, as `dnnlab submit` makes
  // one): the first experiment's curves are public.
  exp = experiment::Coordinator::submit(*st, *q, sw, "tiny.yaml", experiment::SubmitMode::kNew);
  experiment::Coordinator(*st, *q, exp).tick(100);
  // The gateway lists running experiments once a second.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto [a, wa] = join("replays");
  int n = 0;
  while (auto t = request(a)) {
    EXPECT_EQ(t->at("trial")["experiment"], exp);
    ASSERT_FALSE(work(a, *t).close);
    ++n;
    settle_all();
  }
  ASSERT_EQ(n, 6);
  std::vector<store::EventRecord> verified;
  for (auto& e : events("trial.verified"))
    if (e.data["worker"] == wa) verified.push_back(e);
  EXPECT_EQ(verified.size(), 6u) << "an untrusted identity's every result";
  for (const auto& e : verified) {
    EXPECT_TRUE(e.data["agree"].get<bool>());
    EXPECT_FALSE(e.data["fresh"].get<bool>());
  }
}

// Verification 7: progress frames are bounded per ticket (each is a stored
// epoch and an event): a burst, then a rate.
TEST_F(GatewayAttackTest, ProgressIsRateLimitedPerTicket) {
  extra.progress_burst = 10;
  extra.progress_per_second = 2;
  const std::string sw = sweep_of(1, 1000);
  start(0.0, sw.c_str());
  auto [a, wa] = join("floods");
  auto t = request(a);
  ASSERT_TRUE(t);
  for (int e = 1; e <= 10; ++e) ASSERT_FALSE(send(a, progress_of(*t, e, 0.5)).close) << e;
  now += 1;  // two more
  ASSERT_FALSE(send(a, progress_of(*t, 11, 0.5)).close);
  ASSERT_FALSE(send(a, progress_of(*t, 12, 0.5)).close);
  auto r = send(a, progress_of(*t, 13, 0.5));
  EXPECT_TRUE(r.close);
  EXPECT_NE(r.reason.find("epochs a second"), std::string::npos) << r.reason;
  EXPECT_EQ(events("trial.epoch").size(), 12u);
}

}  // namespace
}  // namespace dnnlab::server::testing
