// The browser gateway (protocol v1, docs/protocol.md) driven by scripted
// clients: honest ones that train natively on the shard they are sent, liars,
// and every malformed input the protocol names. Real SQLite, real training.
#include "gateway_fixture.hpp"
#include "nn/safetensors.hpp"

namespace dnnlab::server::testing {
namespace {

TEST_F(GatewayTest, TheShardIsBuiltOffTheCallersThreadAndNoLeaseIsSpentMeanwhile) {
  auto [a, wa] = join("early");
  // The first request starts the build and answers at once.
  auto r = send(a, {{"v", 1}, {"type", "request"}});
  json idle = parse_frame(r.frames.at(0));
  EXPECT_EQ(idle["type"], "idle");
  EXPECT_EQ(idle["reason"], "preparing data");
  EXPECT_EQ(q->waiting(db::queue_name(exp)), st->trial_counts(exp).queued)
      << "nothing leased while waiting";
  // Once it is built the trials come, each on its first attempt.
  auto t = request(a);
  ASSERT_TRUE(t);
  EXPECT_EQ((*t)["trial"]["attempt"], 1);
  EXPECT_TRUE(gw->asset((*t)["data"]["url"].get<std::string>()).has_value());
}

TEST_F(GatewayTest, AHeldTicketsShardOutlivesTheCacheOfDataSpecs) {
  // Five data sets (the cache keeps four): one client holds the first
  // trial's ticket while another works through the other four.
  std::string text = kSweep;
  text.replace(text.find("limit_train: 128"), 16, "limit_train: ${n}");
  text.replace(text.find("lr: [0.05, 0.1, 0.2]"), 20, "n: [96, 100, 104, 108, 112]");
  text.replace(text.find("lr: ${lr}"), 9, "lr: 0.1");
  start(0.0, text.c_str());
  auto [a, wa] = join("holder");
  auto [b, wb] = join("busy");
  auto held = request(a);
  ASSERT_TRUE(held);
  const std::string url = (*held)["data"]["url"];
  std::set<std::string> urls{url};
  while (auto t = request(b)) {
    urls.insert((*t)["data"]["url"].get<std::string>());
    ASSERT_FALSE(work(b, *t).close);
  }
  EXPECT_EQ(urls.size(), 5u) << "five data sets, five shards";
  // The cache has turned over; the held ticket's shard is still served.
  EXPECT_TRUE(gw->asset(url).has_value()) << url;
  ASSERT_FALSE(work(a, *held).close);
}

TEST_F(GatewayTest, TwoHonestClientsFinishEveryTrialOnceAndAgreeWithNativeReruns) {
  start(1.0);  // re-run every result natively
  auto [a, wa] = join("tab-a");
  auto [b, wb] = join("tab-b", "wasm-relaxed-simd");
  EXPECT_NE(wa, wb);
  int done = 0;
  for (int round = 0; round < 10 && done < 3; ++round)
    for (auto id : {a, b})
      if (auto t = request(id)) {
        EXPECT_EQ(t->at("trial")["attempt"], 1);
        auto r = work(id, *t);
        ASSERT_FALSE(r.close) << r.reason;
        json acc = parse_frame(r.frames.at(0));
        EXPECT_EQ(acc["type"], "accepted");
        EXPECT_TRUE(acc["counted"].get<bool>());
        ++done;
      }
  EXPECT_EQ(done, 3);
  EXPECT_FALSE(request(a).has_value());  // idle: nothing left

  auto closes = settle_all();
  EXPECT_TRUE(closes.empty());
  auto verified = events("trial.verified");
  ASSERT_EQ(verified.size(), 3u);
  for (const auto& e : verified) EXPECT_TRUE(e.data["agree"].get<bool>()) << e.data.dump();
  EXPECT_TRUE(events("worker.quarantined").empty());

  store::TrialQuery all;
  auto trials = st->trials(exp, all);
  ASSERT_EQ(trials.size(), 3u);
  for (const auto& t : trials) {
    EXPECT_EQ(t.status, store::TrialStatus::finished);
    EXPECT_EQ(t.attempt, 1);
    EXPECT_TRUE(t.worker == wa || t.worker == wb) << t.worker;
    EXPECT_EQ(t.metrics.epochs_done, 2);
    EXPECT_EQ(t.provenance["worker_kind"], "browser");
    // Each trial records the core build its client runs.
    EXPECT_EQ(t.provenance["kernel_target"], t.worker == wb ? "wasm-relaxed-simd" : "wasm-simd128");
    // Not the server's native tables: the browser's are not known.
    EXPECT_FALSE(t.provenance.contains("kernel_targets")) << t.provenance.dump();
    // Whether the relaxed build's multiply-add was fused: only it depends on that.
    EXPECT_EQ(t.provenance.value("relaxed_madd_fused", json()),
              t.worker == wb ? json(true) : json())
        << t.provenance.dump();
  }
  int browsers = 0;
  for (const auto& w : st->workers()) browsers += w.kind == store::WorkerKind::browser;
  EXPECT_EQ(browsers, 2);
  EXPECT_EQ(q->waiting(db::queue_name(exp)), 0);
  EXPECT_FALSE(q->lease(db::queue_name(exp), "late", 10)) << "all three acked";
}

// The verifier's tolerance (1% relative on losses): an honest client whose
// floating point drifts a little (here 0.004 on every loss) agrees; one off
// by 0.06 (3% of a loss of ~2, still far closer than a made-up curve) does not.
TEST_F(GatewayTest, TheVerifierToleratesDriftButNotAFewPercent) {
  start(1.0);
  auto [close, wc] = join("drifts");
  auto [off, wo] = join("off");
  auto tc = request(close);
  auto to = request(off);
  ASSERT_TRUE(tc && to);
  ASSERT_FALSE(work(close, *tc, /*lie=*/0.004).close);
  ASSERT_FALSE(work(off, *to, /*lie=*/0.06).close);
  auto closes = settle_all();
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_EQ(closes[0].first, off);
  auto verified = events("trial.verified");
  ASSERT_EQ(verified.size(), 2u);
  for (const auto& e : verified)
    EXPECT_EQ(e.data["agree"].get<bool>(), e.data["trial"] == tc->at("trial")["id"])
        << e.data.dump();
}

TEST_F(GatewayTest, ALiarIsQuarantinedAndItsTrialsAreTrainedAgain) {
  start(1.0);
  auto [liar, wl] = join("liar");
  auto t = request(liar);
  ASSERT_TRUE(t);
  auto r = work(liar, *t, /*lie=*/0.25);
  ASSERT_FALSE(r.close) << r.reason;  // plausible numbers pass the cheap checks
  const std::int64_t trial = t->at("trial")["id"];

  auto closes = settle_all();
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_EQ(closes[0].first, liar);
  EXPECT_TRUE(closes[0].second.close);
  EXPECT_EQ(closes[0].second.close_code, 1008);
  EXPECT_NE(closes[0].second.reason.find("quarantined"), std::string::npos);
  ASSERT_EQ(events("worker.quarantined").size(), 1u);
  EXPECT_EQ(events("worker.quarantined")[0].data["worker"], wl);
  gw->close(liar);

  // Its trial is open again, and the liar cannot come back under the
  // identity the server gave it.
  EXPECT_EQ(st->trial(trial)->status, store::TrialStatus::queued);
  const std::string cred = credential[liar];
  ASSERT_EQ(cred.size(), 24u + 1 + 32) << cred;
  const std::string identity = cred.substr(0, 24);
  EXPECT_EQ(wl, "browser-" + identity);
  auto hello = [&](const std::string& client) {
    return json{{"v", 1}, {"type", "hello"}, {"token", "join-secret"}, {"client", client}}.dump();
  };
  auto again = gw->open("127.0.0.1:2");
  auto refused = gw->on_text(again, hello(cred));
  EXPECT_TRUE(refused.close);
  EXPECT_NE(refused.reason.find("quarantined"), std::string::npos);
  EXPECT_EQ(events("worker.quarantined")[0].data["client"], identity);
  {
    // Nor after a restart: the quarantine is rebuilt from the store.
    GatewayOptions o;
    o.join_token = "join-secret";
    o.secret = "gateway-secret";
    Gateway restarted(*st, *q, o);
    auto id = restarted.open("127.0.0.1:3");
    auto r = restarted.on_text(id, hello(cred));
    EXPECT_TRUE(r.close);
    EXPECT_NE(r.reason.find("quarantined"), std::string::npos) << r.reason;
    auto other = restarted.open("127.0.0.1:4");
    EXPECT_FALSE(restarted.on_text(other, hello("someone-else")).close);
  }

  // An honest client trains all three, the reopened one as a newer attempt.
  auto [honest, wh] = join("honest");
  int done = 0;
  while (auto tk = request(honest)) {
    ASSERT_FALSE(work(honest, *tk).close);
    ++done;
  }
  EXPECT_EQ(done, 3);
  settle_all();
  auto rec = st->trial(trial);
  EXPECT_EQ(rec->status, store::TrialStatus::finished);
  EXPECT_EQ(rec->worker, wh);
  EXPECT_EQ(rec->attempt, 2);
  EXPECT_EQ(rec->curve.size(), 2u);  // the newest attempt's epochs only
  EXPECT_EQ(st->trial_counts(exp).finished, 3);
}

TEST_F(GatewayTest, AClosedConnectionPutsItsTrialBackAtOnce) {
  auto [a, wa] = join("a");
  auto t = request(a);
  ASSERT_TRUE(t);
  const std::int64_t trial = t->at("trial")["id"];
  EXPECT_EQ(st->trial(trial)->status, store::TrialStatus::running);
  gw->close(a);  // the tab was closed mid-trial
  EXPECT_EQ(st->trial(trial)->status, store::TrialStatus::queued);

  auto [b, wb] = join("b");
  std::set<std::int64_t> seen;
  while (auto tk = request(b)) {
    if (tk->at("trial")["id"] == trial) {
      EXPECT_EQ(tk->at("trial")["attempt"], 2);
    }
    seen.insert(tk->at("trial")["id"].get<std::int64_t>());
    ASSERT_FALSE(work(b, *tk).close);
  }
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(st->trial_counts(exp).finished, 3);
  EXPECT_EQ(st->trial(trial)->worker, wb);
}

// ASHA (eta 3, first rung at epoch 1): the verdict after a browser's epoch
// is the scheduler's, fed with the counted epochs (native, or a browser's a
// re-run agreed with: gateway_attacks_test.cpp shows unverified ones do not).
TEST_F(GatewayTest, VerdictsComeFromTheExperimentsScheduler) {
  std::string asha = kSweep;
  asha.replace(asha.find("epochs: 2"), 9, "epochs: 3");
  asha.replace(asha.find("type: fifo"), 10, "type: asha\n  min_epochs: 1\n  reduction_factor: 3");
  extra.trust_after = 0;
  start(0.0, asha.c_str());
  auto [a, wa] = join("a");
  auto [b, wb] = join("b");
  auto ta = request(a), tb = request(b);
  ASSERT_TRUE(ta && tb);
  auto progress = [&](Gateway::ClientId id, const json& t, int epoch, double acc) {
    auto r = send(id, {{"v", 1},
                       {"type", "progress"},
                       {"ticket", t["ticket"]},
                       {"epoch", epoch},
                       {"train_loss", 1.0},
                       {"train_acc", acc},
                       {"val_loss", 1.0},
                       {"val_acc", acc},
                       {"seconds", 0.1}});
    EXPECT_FALSE(r.close) << r.reason;
    return parse_frame(r.frames.at(0));
  };
  EXPECT_TRUE(progress(a, *ta, 1, 0.9)["continue"].get<bool>());  // the best always passes
  // As a native re-run's agreement would: a's epoch counts now.
  ASSERT_TRUE(st->set_provisional(ta->at("trial")["id"], 1, false));
  json v = progress(b, *tb, 1, 0.1);  // not in the top third
  EXPECT_FALSE(v["continue"].get<bool>());
  EXPECT_EQ(v["reason"], "pruned");
  // A stopped trial cannot go on, and ends as pruned with its weights.
  auto trial = st->trial(tb->at("trial")["id"].get<std::int64_t>());
  nn::RunSpec run =
      sweep->materialize({trial->index, json::parse(trial->config_json), trial->seed});
  const auto n = nn::Model::build(run.model, nn::Shape{784}, 10, 1).num_params();
  auto r = send(b, {{"v", 1},
                    {"type", "result"},
                    {"ticket", tb->at("ticket")},
                    {"status", "pruned"},
                    {"metrics",
                     {{"train_loss", 1.0},
                      {"train_acc", 0.1},
                      {"val_loss", 1.0},
                      {"val_acc", 0.1},
                      {"test_loss", 1.0},
                      {"test_acc", 0.1},
                      {"epochs_done", 1},
                      {"seconds", 0.1}}}});
  ASSERT_FALSE(r.close) << r.reason;
  r = gw->on_binary(b, weights_frame(tb->at("ticket"), std::vector<float>(n, 0.5f)));
  ASSERT_FALSE(r.close) << r.reason;
  EXPECT_EQ(parse_frame(r.frames.at(0))["type"], "accepted");
  EXPECT_EQ(st->trial(trial->id)->status, store::TrialStatus::pruned);
  EXPECT_EQ(st->trial(trial->id)->curve.size(), 1u);
  // Finishing after a stop verdict is refused.
  auto tc = request(b);
  ASSERT_TRUE(tc);
  EXPECT_FALSE(progress(b, *tc, 1, 0.05)["continue"].get<bool>());
  r = send(b, {{"v", 1},
               {"type", "result"},
               {"ticket", tc->at("ticket")},
               {"status", "finished"},
               {"metrics", json::object()}});
  EXPECT_TRUE(r.close);
  EXPECT_NE(r.reason.find("finished after a stop verdict"), std::string::npos) << r.reason;
}

// Each malformed input closes that client with a reason; the gateway goes on.
TEST_F(GatewayTest, MalformedInputClosesTheClientWithAReason) {
  struct Case {
    const char* name;
    std::string frame;
    bool binary;
    unsigned short code;
    const char* reason;
  };
  const std::string big(5000, ' ');
  const std::vector<Case> before_hello = {
      {"malformed JSON", "{\"v\":1,\"type\":", false, 1008, "malformed JSON at byte"},
      {"not an object", "[1,2]", false, 1008, "JSON object"},
      {"wrong version", R"({"v":2,"type":"hello"})", false, 1002, "unsupported protocol version 2"},
      {"missing version", R"({"type":"hello"})", false, 1002, "missing 'v'"},
      {"before hello", R"({"v":1,"type":"request"})", false, 1008, "first message must be hello"},
      {"binary before hello", std::string("\x02\0\0\0{}", 6), true, 1008, "hello"},
      {"bad token", R"({"v":1,"type":"hello","token":"nope","client":"x"})", false, 1008,
       "join token is wrong"},
      {"oversized text", "{\"v\":1,\"type\":\"hello\",\"pad\":\"" + big + "\"}", false, 1009,
       "frame too big"},
  };
  for (const auto& c : before_hello) {
    auto id = gw->open("127.0.0.1:9");
    auto r = c.binary ? gw->on_binary(id, c.frame) : gw->on_text(id, c.frame);
    EXPECT_TRUE(r.close) << c.name;
    EXPECT_EQ(r.close_code, c.code) << c.name;
    EXPECT_NE(r.reason.find(c.reason), std::string::npos) << c.name << ": " << r.reason;
    EXPECT_LE(r.reason.size(), 123u);
    ASSERT_EQ(r.frames.size(), 1u) << c.name;
    EXPECT_EQ(parse_frame(r.frames[0])["type"], "error");
    gw->close(id);
  }

  // After hello, holding a ticket.
  struct Held {
    const char* name;
    std::function<GatewayReply(Gateway::ClientId, const std::string& ticket)> send;
    const char* reason;
    bool released;  // the trial went back to the queue
  };
  auto prog = [&](const std::string& tid, double loss) {
    return json{{"v", 1},          {"type", "progress"}, {"ticket", tid},
                {"epoch", 1},      {"train_loss", loss}, {"train_acc", 0.5},
                {"val_loss", 1.0}, {"val_acc", 0.5},     {"seconds", 0.1}};
  };
  const std::vector<Held> held = {
      {"unknown type",
       [&](auto id, auto&) {
         return send(id, {{"v", 1}, {"type", "teleport"}});
       },
       "unknown message type 'teleport'", true},
      {"progress for a ticket not held",
       [&](auto id, auto&) { return send(id, prog("t-999-1", 1.0)); },
       "ticket \"t-999-1\" is not held by this client", true},
      {"result for a ticket not held",
       [&](auto id, auto&) {
         return send(id, {{"v", 1}, {"type", "result"}, {"ticket", "t-5-5"}, {"status", "failed"}});
       },
       "result: ticket \"t-5-5\" is not held", true},
      {"NaN loss (JSON.stringify writes null)",
       [&](auto id, auto& tid) {
         json p = prog(tid, 1.0);
         p["train_loss"] = nullptr;
         return send(id, p);
       },
       "non-finite result ('train_loss' is null)", true},
      {"infinite loss",
       [&](auto id, auto& tid) {
         std::string f = prog(tid, 1.0).dump();
         f.replace(f.find("\"val_loss\":1.0"), 14, "\"val_loss\":1e999");
         return gw->on_text(id, f);
       },
       "non-finite result: [json.exception.out_of_range.406] number overflow parsing '1e999'",
       true},
      {"a field of the wrong type",
       [&](auto id, auto& tid) {
         json p = prog(tid, 1.0);
         p["val_acc"] = "high";
         return send(id, p);
       },
       "progress: 'val_acc' must be a number", true},
      {"skipped epoch",
       [&](auto id, auto& tid) {
         json p = prog(tid, 1.0);
         p["epoch"] = 2;
         return send(id, p);
       },
       "expected epoch 1", true},
      {"second request while holding",
       [&](auto id, auto&) {
         return send(id, {{"v", 1}, {"type", "request"}});
       },
       "is still held", true},
      {"binary header length past the end",
       [&](auto id, auto&) { return gw->on_binary(id, std::string("\xff\x00\x00\x00{}", 6)); },
       "header length 255 at offset 0", true},
      {"weights before the result",
       [&](auto id, auto& tid) {
         return gw->on_binary(id, weights_frame(tid, {1.f, 2.f}));
       },
       "weights before the result", true},
      {"an unknown backend",
       [&](auto id, auto& tid) {
         json p = prog(tid, 1.0);
         p["backend"] = "cuda";
         return send(id, p);
       },
       "progress: 'backend' must be wasm, webgpu or webgpu\u2192wasm, not 'cuda'", true},
      {"a backend that is not a string",
       [&](auto id, auto& tid) {
         json p = prog(tid, 1.0);
         p["backend"] = 1;
         return send(id, p);
       },
       "progress: 'backend' must be a string", true},
      {"an adapter that is not an object",
       [&](auto id, auto& tid) {
         json p = prog(tid, 1.0);
         p["adapter"] = "nvidia";
         return send(id, p);
       },
       "progress: 'adapter' must be an object", true},
      {"an adapter vendor past its bound",
       [&](auto id, auto& tid) {
         json p = prog(tid, 1.0);
         p["adapter"] = {{"vendor", std::string(65, 'v')}, {"architecture", "x"}};
         return send(id, p);
       },
       "progress.adapter: 'vendor' is longer than 64 characters", true},
      {"a result's adapter architecture of the wrong type",
       [&](auto id, auto& tid) {
         return send(id, {{"v", 1},
                          {"type", "result"},
                          {"ticket", tid},
                          {"status", "failed"},
                          {"backend", "webgpu"},
                          {"adapter", {{"architecture", 7}}}});
       },
       "result.adapter: 'architecture' must be a string", true},
  };
  for (const auto& c : held) {
    // An address each: the abandons of one address are capped.
    const std::string n = std::to_string(&c - held.data());
    auto [id, w] = join("client-" + n, "wasm-simd128", "10.0.0." + n + ":1");
    auto t = request(id);
    ASSERT_TRUE(t) << c.name;
    const std::int64_t trial = t->at("trial")["id"];
    auto r = c.send(id, t->at("ticket").get<std::string>());
    EXPECT_TRUE(r.close) << c.name;
    EXPECT_NE(r.reason.find(c.reason), std::string::npos) << c.name << ": " << r.reason;
    gw->close(id);  // what the session does after the close frame
    if (c.released) {
      EXPECT_EQ(st->trial(trial)->status, store::TrialStatus::queued) << c.name;
    }
  }

  // Wrong weight counts and non-finite weights, after a proper result.
  auto [id, w] = join("weights");
  auto t = request(id);
  ASSERT_TRUE(t);
  const std::string tid = t->at("ticket");
  for (int e = 1; e <= 2; ++e) {
    json p = prog(tid, 1.0);
    p["epoch"] = e;
    ASSERT_FALSE(send(id, p).close);
  }
  ASSERT_FALSE(send(id, {{"v", 1},
                         {"type", "result"},
                         {"ticket", tid},
                         {"status", "finished"},
                         {"metrics",
                          {{"train_loss", 1.0},
                           {"train_acc", 0.5},
                           {"val_loss", 1.0},
                           {"val_acc", 0.5},
                           {"test_loss", 1.0},
                           {"test_acc", 0.5},
                           {"epochs_done", 2},
                           {"seconds", 0.2}}}})
                   .close);
  auto r = gw->on_binary(id, weights_frame(tid, {1.f, 2.f, 3.f}));
  EXPECT_TRUE(r.close);
  EXPECT_NE(r.reason.find("float32 weights, got 3"), std::string::npos) << r.reason;
  gw->close(id);

  // The gateway still serves an honest client to the end.
  auto [ok, wok] = join("still-fine");
  int done = 0;
  while (auto tk = request(ok)) {
    ASSERT_FALSE(work(ok, *tk).close);
    ++done;
  }
  EXPECT_EQ(done, 3);
  EXPECT_EQ(st->trial_counts(exp).finished, 3);
}

TEST_F(GatewayTest, NonFiniteWeightsAreRejected) {
  auto [id, w] = join("nan-weights");
  auto t = request(id);
  ASSERT_TRUE(t);
  // Report honestly, then corrupt one weight.
  auto asset = gw->asset(t->at("data")["url"].get<std::string>());
  data::Dataset ds = data::decode_shard(*asset->body);
  auto trial = st->trial(t->at("trial")["id"].get<std::int64_t>());
  nn::RunSpec run =
      sweep->materialize({trial->index, json::parse(trial->config_json), trial->seed});
  nn::Model model = nn::Model::build(run.model, ds.sample_shape, ds.num_classes, 1);
  auto res = experiment::train_run(run, ds, nullptr, &model);
  const std::string tid = t->at("ticket");
  for (const auto& e : res.curve) ASSERT_FALSE(send(id, progress_msg(tid, e)).close);
  ASSERT_FALSE(send(id, result_msg(tid, res)).close);
  std::vector<float> wts = flat_weights(model);
  wts[7] = std::nanf("");
  auto r = gw->on_binary(id, weights_frame(tid, wts));
  EXPECT_TRUE(r.close);
  EXPECT_NE(r.reason.find("non-finite result (weight 7"), std::string::npos) << r.reason;
  EXPECT_EQ(st->trial(trial->id)->status, store::TrialStatus::queued);  // not counted
}

// Over a real socket: the close frame carries the code and reason, oversized
// frames are cut off, the files are served content-hashed and immutable, and
// the join token opens nothing else.
TEST(GatewaySocket, ClosesWithReasonsAndKeepsServing) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  o.max_join_frame = 2048;
  RunningServer s(o);
  const std::string jt = s.server().join_token();
  ASSERT_EQ(jt.size(), 64u);
  EXPECT_NE(jt, s.token());
  EXPECT_NE(s.server().join_url().find("/join?token=" + jt), std::string::npos);

  auto connect = [&](websocket::stream<asio::ip::tcp::socket>& ws) {
    ws.next_layer().connect({asio::ip::make_address("127.0.0.1"), s.port()});
    timeval tv{5, 0};
    setsockopt(ws.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ws.handshake("127.0.0.1", "/join");
  };
  auto read_until_close = [](websocket::stream<asio::ip::tcp::socket>& ws) {
    beast::flat_buffer buf;
    beast::error_code ec;
    std::vector<json> frames;
    for (;;) {
      buf.clear();
      ws.read(buf, ec);
      if (ec) break;
      frames.push_back(json::parse(beast::buffers_to_string(buf.data()), nullptr, false));
    }
    return std::pair{ec, frames};
  };
  {
    asio::io_context io;
    websocket::stream<asio::ip::tcp::socket> ws(io);
    connect(ws);
    ws.write(asio::buffer(std::string(R"({"v":7,"type":"hello"})")));
    auto [ec, frames] = read_until_close(ws);
    EXPECT_EQ(ec, websocket::error::closed);
    EXPECT_EQ(ws.reason().code, 1002);
    EXPECT_NE(std::string(ws.reason().reason.c_str()).find("unsupported protocol version 7"),
              std::string::npos);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0]["code"], "bad_version");
  }
  {
    asio::io_context io;
    websocket::stream<asio::ip::tcp::socket> ws(io);
    connect(ws);
    ws.binary(true);
    ws.write(asio::buffer(std::string(4096, 'x')));
    auto [ec, frames] = read_until_close(ws);
    // Closed, or an error answering the close frame of a server already gone
    // (EPIPE, ENOTCONN or ECONNRESET, depending on how far its shutdown got).
    EXPECT_TRUE(ec == websocket::error::closed || ec == asio::error::broken_pipe ||
                ec == asio::error::not_connected || ec == asio::error::connection_reset)
        << ec.message();
    EXPECT_EQ(ws.reason().code, 1009);
  }
  {
    asio::io_context io;
    websocket::stream<asio::ip::tcp::socket> ws(io);
    connect(ws);
    ws.write(
        asio::buffer(json{{"v", 1}, {"type", "hello"}, {"token", jt}, {"client", "sock"}}.dump()));
    beast::flat_buffer buf;
    ws.read(buf);
    json w = json::parse(beast::buffers_to_string(buf.data()));
    EXPECT_EQ(w["type"], "welcome");
    // The server names the client: a random id and its MAC, kept by the page.
    const std::string cred = w["client"];
    EXPECT_EQ(w["worker"], "browser-" + cred.substr(0, 24));
    ws.write(asio::buffer(json{{"v", 1}, {"type", "heartbeat"}, {"ticket", nullptr}}.dump()));
    buf.clear();
    ws.read(buf);
    EXPECT_EQ(json::parse(beast::buffers_to_string(buf.data()))["type"], "heartbeat");
    ws.close(websocket::close_code::normal);
  }
  // The join token is not the write token.
  EXPECT_EQ(s.post("/api/experiments", R"({"spec":"x"})", jt).status, 401u);
  EXPECT_EQ(s.get("/core/nothing.0123456789abcdef.wasm").status, 404u);
  EXPECT_EQ(s.get("/shards/" + std::string(64, 'a') + ".safetensors").status, 404u);
  EXPECT_EQ(s.get("/api/stats").status, 200u);
}

// A native worker process-alike and a browser (scripted, over the socket,
// fetching its shard over HTTP) serve one experiment at once; the workers
// list shows both kinds and every trial ends once.
TEST(GatewaySocket, BrowserAndNativeWorkersShareAnExperiment) {
  TempDir dir;
  ServerOptions o;
  o.store_url = "sqlite:" + dir.file("dnnlab.db");
  o.verify_fraction = 1.0;
  RunningServer s(o);
  std::string text = kSweep;
  text.replace(text.find("[0.05, 0.1, 0.2]"), 16, "[0.01, 0.02, 0.05, 0.1, 0.15, 0.2]");
  auto posted =
      s.post("/api/experiments", json{{"spec", text}, {"name", "both.yaml"}}.dump(), s.token());
  ASSERT_EQ(posted.status, 202u) << posted.body;
  const std::int64_t id = parse(posted)["id"];
  auto st = store::open_result_store(o.store_url);
  auto sw = sweep::parse_sweep(text, "both.yaml");

  asio::io_context io;
  websocket::stream<asio::ip::tcp::socket> ws(io);
  ws.next_layer().connect({asio::ip::make_address("127.0.0.1"), s.port()});
  timeval tv{30, 0};
  setsockopt(ws.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ws.handshake("127.0.0.1", "/join");
  beast::flat_buffer buf;
  auto call = [&](const json& msg) {
    ws.text(true);
    ws.write(asio::buffer(msg.dump()));
    buf.clear();
    ws.read(buf);
    return json::parse(beast::buffers_to_string(buf.data()));
  };
  json welcome =
      call({{"v", 1}, {"type", "hello"}, {"token", s.server().join_token()}, {"client", "tab"}});
  ASSERT_EQ(welcome["type"], "welcome");

  std::thread native;
  std::atomic<bool> stop{false};
  int browser_trials = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    json t = call({{"v", 1}, {"type", "request"}});
    if (t["type"] == "idle") {
      if (st->experiment(id)->status != store::ExperimentStatus::running) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    ASSERT_EQ(t["type"], "ticket") << t.dump();
    HttpReply shard = s.get(t["data"]["url"].get<std::string>());
    ASSERT_EQ(shard.status, 200u);
    data::Dataset ds = data::decode_shard(shard.body);
    auto trial = st->trial(t["trial"]["id"].get<std::int64_t>());
    nn::RunSpec run = sw.materialize({trial->index, json::parse(trial->config_json), trial->seed});
    nn::Model model = nn::Model::build(run.model, ds.sample_shape, ds.num_classes, 1);
    auto res = experiment::train_run(run, ds, nullptr, &model);
    const std::string tid = t["ticket"];
    for (const auto& e : res.curve) {
      json v = call(progress_msg(tid, e));
      ASSERT_TRUE(v["continue"].get<bool>()) << v.dump();
    }
    ws.write(asio::buffer(result_msg(tid, res).dump()));
    std::vector<float> w = flat_weights(model);
    ws.binary(true);
    ws.write(asio::buffer(weights_frame(t["ticket"], w)));
    buf.clear();
    ws.read(buf);
    json acc = json::parse(beast::buffers_to_string(buf.data()));
    ASSERT_EQ(acc["type"], "accepted") << acc.dump();
    EXPECT_TRUE(acc["counted"].get<bool>());
    ++browser_trials;
    if (!native.joinable()) {
      // The first browser trial is in; now a native worker joins the same experiment.
      native = std::thread([&] {
        worker::WorkerOptions wo;
        wo.broker_url = wo.store_url = o.store_url;
        wo.worker_id = "native-1";
        wo.experiment = id;
        wo.idle_exit_seconds = 3;
        wo.stop = &stop;
        worker::run_worker(wo);
      });
      // Let it take one before going on.
      while (std::chrono::steady_clock::now() < deadline) {
        store::TrialQuery q;
        q.worker = "native-1";
        if (!st->trials(id, q).empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
  stop = true;
  if (native.joinable()) native.join();
  ws.close(websocket::close_code::normal);

  store::TrialQuery all;
  all.limit = 0;
  auto trials = st->trials(id, all);
  ASSERT_EQ(trials.size(), 6u);
  std::set<std::string> kinds;
  for (const auto& t : trials) {
    EXPECT_EQ(t.status, store::TrialStatus::finished) << t.id;
    EXPECT_EQ(t.attempt, 1);
    kinds.insert(t.worker.rfind("browser-", 0) == 0 ? "browser" : t.worker);
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"browser", "native-1"}));
  EXPECT_GE(browser_trials, 1);
  json workers = parse(s.get("/api/workers"));
  std::set<std::string> listed;
  for (const auto& w : workers["workers"]) listed.insert(w["kind"].get<std::string>());
  EXPECT_EQ(listed, (std::set<std::string>{"browser", "native"}));
}

TEST(GatewaySocket, ServesTheCoreUnderContentHashedNames) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "web" / "core");
  {
    std::ofstream(dir.path() / "web" / "core" / "dnnlab_core.wasm") << "\0asm-bytes";
    std::ofstream(dir.path() / "web" / "core" / "dnnlab_core.mjs") << "export default 1;";
    std::ofstream(dir.path() / "web" / "core" / "dnnlab_core_relaxed.wasm") << "relaxed-bytes";
  }
  store::open_result_store("sqlite:" + dir.file("dnnlab.db"));
  auto st = store::open_result_store("sqlite:" + dir.file("dnnlab.db"));
  auto q = queue::open_task_queue("sqlite:" + dir.file("dnnlab.db"));
  GatewayOptions o;
  o.join_token = "t";
  o.web_root = (dir.path() / "web").string();
  Gateway gw(*st, *q, o);
  json urls = gw.core_urls();
  const std::string wasm = urls["wasm"], js = urls["js"];
  EXPECT_EQ(wasm.rfind("/core/dnnlab_core.", 0), 0u) << wasm;
  EXPECT_EQ(wasm.size(), std::string("/core/dnnlab_core.0123456789abcdef.wasm").size());
  auto a = gw.asset(wasm);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->content_type, "application/wasm");
  auto b = gw.asset(js);
  ASSERT_TRUE(b);
  EXPECT_EQ(*b->body, "export default 1;");
  EXPECT_NE(b->content_type.find("javascript"), std::string::npos);
  // The relaxed-SIMD build is offered beside it, under its own hashed name.
  const std::string relaxed = urls.value("relaxed_wasm", "");
  EXPECT_EQ(relaxed.rfind("/core/dnnlab_core_relaxed.", 0), 0u) << urls.dump();
  auto r = gw.asset(relaxed);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->content_type, "application/wasm");
  EXPECT_NE(relaxed, wasm);
  EXPECT_FALSE(gw.asset("/core/dnnlab_core.wasm"));  // only the hashed name
  EXPECT_FALSE(gw.asset("/core/../dnnlab.db"));
}

// ---- issue 12: trust and bounds ----

TEST(GatewayTrust, IdentitiesAreSignedAndVerificationHalvesToTheFloor) {
  TempDir dir;
  auto st = store::open_result_store("sqlite:" + dir.file("t.db"));
  GatewayOptions o;
  o.secret = "s1";
  o.verify_fraction = 0.1;
  o.trust_after = 3;
  TrustBook book(*st, o);
  auto a = book.issue();
  EXPECT_EQ(book.identity_of(a.credential), a.id);
  // The public id alone, a made-up MAC, another server's credential: nothing.
  EXPECT_FALSE(book.identity_of(a.id));
  EXPECT_FALSE(book.identity_of(a.id + "." + std::string(32, '0')));
  EXPECT_FALSE(book.identity_of("browser-" + a.id));
  GatewayOptions o2 = o;
  o2.secret = "s2";
  TrustBook other(*st, o2);
  EXPECT_FALSE(other.identity_of(a.credential));
  EXPECT_NE(book.issue().id, a.id);

  auto share = [&](TrustBook& b, const std::string& id) {
    int n = 0;
    for (int t = 1; t <= 20000; ++t) n += b.choose_for_verification(id, t, 1);
    return n / 20000.0;
  };
  EXPECT_EQ(share(book, a.id), 1.0) << "a new identity: every result";
  for (int i = 0; i < 3; ++i) book.agreed(a.id, true);
  EXPECT_TRUE(book.trusted(a.id));
  // Then the k-th result since trust is drawn with max(0.1, 2^-(k+1)):
  // counted over many trusted identities, each with its own trials.
  constexpr int kIds = 4000;
  std::vector<int> chosen(6, 0);
  for (int i = 0; i < kIds; ++i) {
    const std::string id = book.issue().id;
    for (int j = 0; j < 3; ++j) book.agreed(id, true);
    for (int k = 0; k < 6; ++k) chosen[k] += book.choose_for_verification(id, 10 * i + k + 1, 1);
  }
  EXPECT_NEAR(chosen[0] / double(kIds), 0.5, 0.03);
  EXPECT_NEAR(chosen[1] / double(kIds), 0.25, 0.03);
  EXPECT_NEAR(chosen[2] / double(kIds), 0.125, 0.02);
  for (int k = 3; k < 6; ++k)
    EXPECT_NEAR(chosen[k] / double(kIds), 0.1, 0.02) << "never below --verify-fraction";
  EXPECT_NEAR(share(book, a.id), 0.1, 0.01) << "a long record: the floor";
  // Trusted from the start (--trust-after 0): the floor from the first result.
  GatewayOptions o0 = o;
  o0.trust_after = 0;
  TrustBook open_book(*st, o0);
  const std::string fresh = open_book.issue().id;
  EXPECT_NEAR(share(open_book, fresh), 0.1, 0.01);
  // Which ones depends on the secret, which the client never sees.
  for (int i = 0; i < 100; ++i) other.agreed(a.id, true);
  for (int t = 1; t <= 10; ++t) other.choose_for_verification(a.id, t, 1);  // down to the floor
  int differ = 0;
  for (int t = 1; t <= 2000; ++t)
    differ += book.choose_for_verification(a.id, t, 1) != other.choose_for_verification(a.id, t, 1);
  EXPECT_GT(differ, 100);
}

TEST_F(GatewayTest, AForgedOrBorrowedIdentityIsNotHonoured) {
  auto [a, wa] = join("whatever-i-like");
  const std::string cred = credential[a];
  EXPECT_NE(wa, "browser-whatever-i-like") << "the client does not choose its id";
  const std::string public_id = wa.substr(std::string("browser-").size());
  std::string forged = cred;
  forged.back() = forged.back() == '0' ? '1' : '0';
  for (const std::string& attempt : {public_id, wa, forged}) {
    auto [b, wb] = join(attempt);
    EXPECT_NE(wb.rfind(wa, 0), 0u) << attempt << " became " << wb;
    EXPECT_NE(credential[b], cred);
  }
  // The real credential is the same identity (a second tab: its own worker id).
  auto [c, wc] = join(cred);
  EXPECT_EQ(wc, wa + "-2");
  EXPECT_EQ(credential[c], cred);
}

TEST_F(GatewayTest, ImpossibleNumbersRefuseTheClientAndReopenItsResults) {
  auto [h, wh] = join("h");
  auto first = request(h);
  ASSERT_TRUE(first);
  ASSERT_FALSE(work(h, *first).close);
  const std::int64_t done = first->at("trial")["id"];
  EXPECT_EQ(st->trial(done)->status, store::TrialStatus::finished);
  auto t = request(h);
  ASSERT_TRUE(t);
  auto prog = [&](const json& tk, int epoch, const char* name, double value) {
    json p{{"v", 1},          {"type", "progress"}, {"ticket", tk["ticket"]},
           {"epoch", epoch},  {"train_loss", 1.0},  {"train_acc", 0.5},
           {"val_loss", 1.0}, {"val_acc", 0.5},     {"seconds", 0.1}};
    if (name) p[name] = value;
    return p;
  };
  auto r = send(h, prog(*t, 1, "val_acc", 7.5));
  EXPECT_TRUE(r.close);
  EXPECT_EQ(r.close_code, 1008);
  EXPECT_NE(r.reason.find("'val_acc' 7.5 is outside [0.0, 1.0]"), std::string::npos) << r.reason;
  gw->close(h);
  EXPECT_EQ(st->trial(t->at("trial")["id"].get<std::int64_t>())->status,
            store::TrialStatus::queued);
  EXPECT_EQ(st->trial(done)->status, store::TrialStatus::queued) << "its result reopened";
  auto back = gw->open("127.0.0.1:1");
  auto refused = send(
      back, {{"v", 1}, {"type", "hello"}, {"token", "join-secret"}, {"client", credential[h]}});
  EXPECT_NE(refused.reason.find("quarantined"), std::string::npos) << refused.reason;

  struct Case {
    const char* field;
    double value;
    int epoch;
    const char* reason;
  } cases[] = {{"seconds", -1, 1, "'seconds' -1.0 is outside"},
               {"train_loss", -0.5, 1, "'train_loss' -0.5 is outside"},
               {"val_acc", 1e300, 1, "'val_acc' 1e+300 is outside"},
               {nullptr, 0, 3, "epoch 3.0 is outside the trial's 1..2"}};
  for (const auto& c : cases) {
    auto [id, w] = join("x");
    auto tk = request(id);
    ASSERT_TRUE(tk);
    auto rr = send(id, prog(*tk, c.epoch, c.field, c.value));
    EXPECT_TRUE(rr.close) << c.reason;
    EXPECT_NE(rr.reason.find(c.reason), std::string::npos) << rr.reason;
    gw->close(id);
  }
  EXPECT_EQ(st->best_trial(exp), std::nullopt);
}

TEST_F(GatewayTest, ABrowserFailureDoesNotEndTheTrial) {
  max_attempts = 3;
  extra.max_unconfirmed_failures = 0;
  start(0.0);
  auto [a, wa] = join("a");
  auto t = request(a);
  ASSERT_TRUE(t);
  const std::int64_t trial = t->at("trial")["id"];
  auto r = send(a, {{"v", 1},
                    {"type", "result"},
                    {"ticket", t->at("ticket")},
                    {"status", "failed"},
                    {"error", "out of memory"}});
  ASSERT_FALSE(r.close) << r.reason;
  json acc = parse_frame(r.frames.at(0));
  EXPECT_EQ(acc["type"], "accepted");
  EXPECT_FALSE(acc["counted"].get<bool>());
  EXPECT_EQ(st->trial(trial)->status, store::TrialStatus::queued) << "it runs again elsewhere";
  // The native re-run trains: the failure was not real.
  auto closes = settle_all();
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_NE(closes[0].second.reason.find("not confirm"), std::string::npos)
      << closes[0].second.reason;
  ASSERT_EQ(events("worker.quarantined").size(), 1u);
  gw->close(a);
  auto [b, wb] = join("b");
  int n = 0;
  while (auto tk = request(b)) {
    if (tk->at("trial")["id"] == trial) {
      EXPECT_EQ(tk->at("trial")["attempt"], 2);
    }
    ASSERT_FALSE(work(b, *tk).close);
    ++n;
  }
  EXPECT_EQ(n, 3);
  EXPECT_EQ(st->trial(trial)->status, store::TrialStatus::finished);
}

TEST_F(GatewayTest, AbandonedTicketsCostTheClientNotTheTrial) {
  max_attempts = 3;
  start(0.0);
  // Fifteen tabs take a trial each and close: every trial is abandoned five
  // times, more than max_attempts.
  std::map<std::int64_t, int> taken;
  for (int i = 0; i < 15; ++i) {
    auto [c, w] = join("tab", "wasm-simd128", "10.0.0." + std::to_string(i) + ":1");
    auto t = request(c);
    ASSERT_TRUE(t) << i;
    ++taken[t->at("trial")["id"].get<std::int64_t>()];
    gw->close(c);
  }
  EXPECT_EQ(taken.size(), 3u);
  for (auto [trial, n] : taken) {
    EXPECT_EQ(n, 5) << trial;
    EXPECT_EQ(st->trial(trial)->status, store::TrialStatus::queued);
  }
  EXPECT_EQ(q->waiting(queue::dead_letter_queue(db::queue_name(exp))), 0)
      << "max_attempts not spent";

  // One identity abandoning three in a row waits out a cooldown.
  auto [a, wa] = join("quitter");
  const std::string cred = credential[a];
  for (int i = 0; i < 3; ++i) {
    auto [c, w] = i == 0 ? std::pair{a, wa} : join(cred);
    ASSERT_TRUE(request(c));
    gw->close(c);
  }
  auto [c, w] = join(cred);
  auto r = send(c, {{"v", 1}, {"type", "request"}});
  json idle = parse_frame(r.frames.at(0));
  EXPECT_EQ(idle["type"], "idle");
  EXPECT_EQ(idle["reason"], "too many abandoned tickets");
  now += 601;
  int done = 0;
  while (auto t = request(c)) {
    ASSERT_FALSE(work(c, *t).close);
    ++done;
  }
  EXPECT_EQ(done, 3);
  EXPECT_EQ(st->trial_counts(exp).finished, 3);
}

TEST_F(GatewayTest, TicketsHaveALifetimeAndCaps) {
  extra.ticket_lifetime_seconds = 100;
  extra.max_tickets_per_client = 1;
  extra.max_tickets_per_address = 2;
  start(0.0);
  auto [a, wa] = join("a");
  auto t = request(a);
  ASSERT_TRUE(t);
  // Caps: the same identity in a second tab, then a third client on the address.
  auto [a2, wa2] = join(credential[a]);
  json idle = parse_frame(send(a2, {{"v", 1}, {"type", "request"}}).frames.at(0));
  EXPECT_EQ(idle["reason"], "ticket limit per client");
  auto [b, wb] = join("b");
  ASSERT_TRUE(request(b));
  auto [c, wc] = join("c");
  idle = parse_frame(send(c, {{"v", 1}, {"type", "request"}}).frames.at(0));
  EXPECT_EQ(idle["reason"], "ticket limit per address");
  auto [d, wd] = join("d", "wasm-simd128", "10.9.9.9:7");
  EXPECT_TRUE(request(d)) << "another address is not held back";

  // Heartbeats do not keep a ticket past its lifetime.
  now += 50;
  EXPECT_FALSE(send(a, {{"v", 1}, {"type", "heartbeat"}, {"ticket", t->at("ticket")}}).close);
  now += 51;
  EXPECT_FALSE(send(a, {{"v", 1}, {"type", "heartbeat"}, {"ticket", t->at("ticket")}}).close);
  bool closed = false;
  for (auto& [id, reply] : gw->poll())
    if (id == a) {
      closed = true;
      EXPECT_NE(reply.reason.find("outlived its lifetime"), std::string::npos) << reply.reason;
    }
  EXPECT_TRUE(closed);
  EXPECT_EQ(st->trial(t->at("trial")["id"].get<std::int64_t>())->status,
            store::TrialStatus::queued);
}

TEST_F(GatewayTest, UntrustedResultsAreProvisionalUntilVerified) {
  auto [a, wa] = join("new");
  auto t = request(a);
  ASSERT_TRUE(t);
  const std::int64_t trial = t->at("trial")["id"];
  EXPECT_TRUE(st->trial(trial)->provisional) << "an untrusted client's epochs";
  ASSERT_FALSE(work(a, *t).close);
  EXPECT_EQ(st->trial(trial)->status, store::TrialStatus::finished);
  EXPECT_TRUE(st->trial(trial)->provisional);
  EXPECT_EQ(st->best_trial(exp), std::nullopt) << "not the best before it is verified";
  EXPECT_TRUE(st->epochs_for(exp, 1).empty()) << "nor in ASHA's rungs";
  EXPECT_FALSE(st->weights(trial)) << "its weights are kept only once verified";
  EXPECT_TRUE(settle_all().empty());
  EXPECT_FALSE(st->trial(trial)->provisional);
  // Verified: the parameters the browser sent, as the trial's safetensors file.
  auto w = st->weights(trial);
  ASSERT_TRUE(w) << "the best of its experiment keeps its weights";
  nn::SafetensorsFile f = nn::read_safetensors(w->bytes, "kept");
  EXPECT_EQ(f.metadata.at("trained_by"), "browser");
  EXPECT_EQ(f.metadata.at("trial_id"), std::to_string(trial));
  EXPECT_FALSE(f.tensors.empty());
  ASSERT_TRUE(st->best_trial(exp));
  EXPECT_EQ(st->best_trial(exp)->id, trial);
  EXPECT_EQ(st->epochs_for(exp, 1).size(), 1u);
}

TEST_F(GatewayTest, HelloIsBoundedAndWorkerRowsExpire) {
  // Before hello: small frames only, and a deadline.
  auto early = gw->open("127.0.0.1:5");
  EXPECT_EQ(gw->max_frame(early), 4096u);
  auto r = gw->on_binary(early, std::string(5000, 'x'));
  EXPECT_EQ(r.close_code, 1009);
  EXPECT_NE(r.reason.find("before hello"), std::string::npos) << r.reason;
  gw->close(early);
  auto silent = gw->open("127.0.0.1:6");
  EXPECT_TRUE(gw->poll().empty());
  now += 11;
  auto closes = gw->poll();
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_EQ(closes[0].first, silent);
  EXPECT_NE(closes[0].second.reason.find("hello: none within"), std::string::npos);
  gw->close(silent);

  // An agent cut in the middle of a character.
  auto id = gw->open("127.0.0.1:7");
  r = send(id, {{"v", 1},
                {"type", "hello"},
                {"token", "join-secret"},
                {"agent", std::string(199, 'a') + "\xc3\xa9"}});
  EXPECT_FALSE(r.close) << r.reason;
  EXPECT_GT(gw->max_frame(id), 4096u);
  gw->close(id);

  // Hellos per address per minute.
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    auto c = gw->open("10.1.1.1:" + std::to_string(i));
    auto rr = send(c, {{"v", 1}, {"type", "hello"}, {"token", "join-secret"}});
    refused += rr.close && rr.reason.find("hellos a minute") != std::string::npos;
    gw->close(c);
  }
  EXPECT_EQ(refused, 10);
  auto elsewhere = gw->open("10.2.2.2:1");
  EXPECT_FALSE(send(elsewhere, {{"v", 1}, {"type", "hello"}, {"token", "join-secret"}}).close);
  gw->close(elsewhere);

  // Rows of browsers that left go after --gone-worker-ttl.
  auto browsers = [&] {
    int n = 0;
    for (const auto& w : st->workers()) n += w.kind == store::WorkerKind::browser;
    return n;
  };
  EXPECT_GT(browsers(), 30);
  now += 24 * 3600 + 61;
  gw->poll();
  EXPECT_EQ(browsers(), 0);
}

}  // namespace
}  // namespace dnnlab::server::testing
