// The browser gateway's test fixture: a scripted client that trains honestly
// on the shard it is sent (or lies as told), over a real SQLite store and
// queue. Shared by gateway_test.cpp and gateway_attacks_test.cpp.
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "data/shard.hpp"
#include "db/task_codec.hpp"
#include "experiment/coordinator.hpp"
#include "nn/model.hpp"
#include "server/gateway.hpp"
#include "server/gateway_trust.hpp"
#include "server_fixture.hpp"
#include "sweep/sweep_spec.hpp"
#include "experiment/training_run.hpp"
#include "worker/worker_loop.hpp"

namespace dnnlab::server::testing {
namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;

constexpr const char* kSweep = R"(name: tiny
template:
  data: {dataset: synthetic, limit_train: 128, validation: 32}
  model:
    layers:
      - dense: 16
        activation: relu
      - dense: 10
  train:
    epochs: 2
    batch_size: 32
    optimizer: {type: sgd, lr: ${lr}, momentum: 0.9}
search:
  method: grid
  metric: val_acc
  parameters:
    lr: [0.05, 0.1, 0.2]
scheduler:
  type: fifo
)";

json parse_frame(const std::string& f) {
  json j = json::parse(f, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << f;
  return j;
}

std::string weights_frame(const std::string& ticket, const std::vector<float>& w) {
  const std::string head = json{
      {"v", 1},
      {"ticket", ticket},
      {"tensor", "weights"},
      {"dtype", "F32"},
      {"count", w.size()}}.dump();
  std::string out(4, '\0');
  const auto h = static_cast<std::uint32_t>(head.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(h >> (8 * i) & 0xFF);
  out += head;
  out.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  return out;
}

// What an honest client reports: an epoch, the end of a run, its weights.
// `acc_lie` raises the validation accuracy it reports (capped at 1).
json progress_msg(const std::string& ticket, const nn::EpochResult& e, double lie = 0,
                  double acc_lie = 0) {
  return {{"v", 1},
          {"type", "progress"},
          {"ticket", ticket},
          {"epoch", e.epoch},
          {"train_loss", e.train_loss + lie},
          {"train_acc", e.train_acc},
          {"val_loss", e.val_loss.value_or(0) + lie},
          {"val_acc", std::min(1.0, e.val_acc.value_or(0) + acc_lie)},
          {"seconds", e.seconds},
          {"samples_per_second", e.samples_per_second},
          {"lr", e.lr}};
}

json result_msg(const std::string& ticket, const experiment::RunResult& res, double lie = 0,
                double acc_lie = 0) {
  const auto& last = res.curve.back();
  return {{"v", 1},
          {"type", "result"},
          {"ticket", ticket},
          {"status", "finished"},
          {"metrics",
           {{"train_loss", last.train_loss + lie},
            {"train_acc", last.train_acc},
            {"val_loss", last.val_loss.value_or(0) + lie},
            {"val_acc", std::min(1.0, last.val_acc.value_or(0) + acc_lie)},
            {"test_loss", res.test_loss},
            {"test_acc", res.test_acc},
            {"epochs_done", res.curve.size()},
            {"seconds", res.train_seconds}}}};
}

std::vector<float> flat_weights(nn::Model& model) {
  std::vector<float> w;
  for (nn::Param* p : model.params())
    w.insert(w.end(), p->value.data(), p->value.data() + p->value.numel());
  return w;
}

// Waits until the verifier has decided everything, then returns poll()'s closes.
std::vector<std::pair<Gateway::ClientId, GatewayReply>> settle(Gateway& gw) {
  std::vector<std::pair<Gateway::ClientId, GatewayReply>> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& x : gw.poll()) out.push_back(std::move(x));
    if (gw.verifications_pending() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return out;
}

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override { start(0.0); }

  // Each start() runs one experiment: SetUp's (or an earlier start()'s) is
  // cancelled first, or a client could get its trials instead.
  void start(double verify_fraction, const char* sweep_text = kSweep) {
    gw.reset();
    if (st && q && exp) experiment::Coordinator(*st, *q, exp).cancel();
    url = "sqlite:" + dir.file("dnnlab.db");
    st = store::open_result_store(url);
    queue::TaskQueueOptions qo;
    qo.max_attempts = max_attempts;
    q = queue::open_task_queue(url, qo);
    exp = experiment::Coordinator::submit(*st, *q, sweep_text, "tiny.yaml");
    experiment::Coordinator(*st, *q, exp).tick(100);
    sweep = std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(sweep_text, "tiny.yaml"));
    GatewayOptions o = extra;
    o.join_token = "join-secret";
    o.secret = "gateway-secret";  // the same across restarts, as dnnlab serve keeps it
    o.clock = [this] { return now; };
    o.store_url = url;
    o.broker_url = url;
    o.verify_fraction = verify_fraction;
    o.max_text_bytes = 4096;
    // Stand-ins for the two core builds: only their names matter here.
    std::filesystem::create_directories(dir.path() / "web" / "core");
    for (const char* f : {"dnnlab_core.mjs", "dnnlab_core.wasm", "dnnlab_core_relaxed.wasm"})
      std::ofstream(dir.path() / "web" / "core" / f) << f;
    o.web_root = (dir.path() / "web").string();
    gw = std::make_unique<Gateway>(*st, *q, o);
  }

  GatewayReply send(Gateway::ClientId id, const json& msg) { return gw->on_text(id, msg.dump()); }

  // A connected client that said hello; returns its id and worker id.
  std::pair<Gateway::ClientId, std::string> join(const std::string& key,
                                                 const char* kernels = "wasm-simd128",
                                                 const std::string& remote = "127.0.0.1:1") {
    auto id = gw->open(remote);
    auto r = send(id, {{"v", 1},
                       {"type", "hello"},
                       {"token", "join-secret"},
                       {"client", key},
                       {"capabilities", {{"simd", true}, {"kernels", kernels}, {"fma", true}}}});
    EXPECT_FALSE(r.close) << r.reason;
    EXPECT_EQ(r.frames.size(), 1u);
    json w = parse_frame(r.frames.at(0));
    EXPECT_EQ(w["type"], "welcome");
    EXPECT_EQ(w["v"], 1);
    credential[id] = w.value("client", "");
    return {id, w["worker"].get<std::string>()};
  }

  // A ticket, or nullopt when there is nothing to do. While the gateway is
  // still building a data shard (idle, "preparing data") it asks again; while
  // an untrusted client's results await the verifier ("waiting for
  // verification": at most the agreements it still lacks), it lets the
  // verifier decide them (the closes poll() hands out go to `polled`).
  std::optional<json> request(Gateway::ClientId id) {
    for (int i = 0;; ++i) {
      auto r = send(id, {{"v", 1}, {"type", "request"}});
      EXPECT_FALSE(r.close) << r.reason;
      json t = parse_frame(r.frames.at(0));
      const std::string reason = t.value("reason", "");
      if (t["type"] == "idle" && reason == "preparing data" && i < 3000) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (t["type"] == "idle" && reason == "waiting for verification" && i < 3000) {
        for (auto& x : settle(*gw)) polled.push_back(std::move(x));
        continue;
      }
      if (t["type"] == "idle") return std::nullopt;
      EXPECT_EQ(t["type"], "ticket");
      return t;
    }
  }

  // Trains the ticket's trial natively on the shard the gateway serves and
  // reports it; `lie` shifts the losses it reports. Returns the last reply.
  // `acc_lie` raises the validation accuracy; `tamper` may change the result
  // message (a made-up final metric, say).
  GatewayReply work(Gateway::ClientId id, const json& ticket, double lie = 0, double acc_lie = 0,
                    const std::function<void(json&)>& tamper = {}) {
    auto asset = gw->asset(ticket["data"]["url"].get<std::string>());
    EXPECT_TRUE(asset.has_value());
    data::Dataset ds = data::decode_shard(*asset->body);
    auto trial = st->trial(ticket["trial"]["id"].get<std::int64_t>());
    nn::RunSpec run =
        sweep->materialize({trial->index, json::parse(trial->config_json), trial->seed});
    std::vector<std::int64_t> shape(ds.sample_shape.d.begin(),
                                    ds.sample_shape.d.begin() + ds.sample_shape.rank);
    EXPECT_EQ(ticket["spec"], core_spec_json(run, shape, ds.num_classes));
    nn::Model model = nn::Model::build(run.model, ds.sample_shape, ds.num_classes, 1);
    experiment::RunResult res = experiment::train_run(run, ds, nullptr, &model);
    const std::string tid = ticket["ticket"];
    for (const auto& e : res.curve) {
      auto r = send(id, progress_msg(tid, e, lie, acc_lie));
      EXPECT_FALSE(r.close) << r.reason;
      json v = parse_frame(r.frames.at(0));
      EXPECT_EQ(v["type"], "verdict");
      EXPECT_TRUE(v["continue"].get<bool>());
    }
    json rm = result_msg(tid, res, lie, acc_lie);
    if (tamper) tamper(rm);
    auto r = send(id, rm);
    if (r.close) return r;  // refused: the caller looks at why
    EXPECT_TRUE(r.frames.empty());
    std::vector<float> w = flat_weights(model);
    return gw->on_binary(id, weights_frame(tid, w));
  }

  // settle(), with the closes request() has already let through first.
  std::vector<std::pair<Gateway::ClientId, GatewayReply>> settle_all() {
    auto out = std::move(polled);
    polled.clear();
    for (auto& x : settle(*gw)) out.push_back(std::move(x));
    return out;
  }

  std::vector<store::EventRecord> events(const std::string& type) {
    std::vector<store::EventRecord> out;
    for (auto& e : st->events_since(0, 10000))
      if (e.type == type) out.push_back(e);
    return out;
  }

  TempDir dir;
  GatewayOptions extra;    // limits a test changes before start()
  int max_attempts = 100;  // the malformed-input test gives trials back many times
  // The gateway's clock (the store's rows keep the real one).
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::map<Gateway::ClientId, std::string> credential;             // from each welcome
  std::vector<std::pair<Gateway::ClientId, GatewayReply>> polled;  // closes request() let through
  std::string url;
  std::unique_ptr<store::ResultStore> st;
  std::unique_ptr<queue::TaskQueue> q;
  std::int64_t exp = 0;
  std::unique_ptr<sweep::SweepSpec> sweep;
  std::unique_ptr<Gateway> gw;
};

}  // namespace
}  // namespace dnnlab::server::testing
