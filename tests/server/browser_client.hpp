// An honest browser worker, simulated: it speaks protocol v1 on a real
// WebSocket to /join, fetches its data shard over HTTP (once, as a browser's
// cache would), trains each ticket natively so its numbers agree with the
// verifier's re-runs, and reports every epoch, the result and the weights.
// Used by the soak test and by bench/verify_bench.cpp.
//
//   HonestBrowser b(port, server.join_token(), store_url);
//   auto results = b.work(experiment_id, std::chrono::steady_clock::now() + 60s);
//   // results[i].cpu_seconds: what training trial i cost this client
#pragma once
#include <time.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "data/shard.hpp"
#include "nn/model.hpp"
#include "server/http_client.hpp"
#include "store/result_store.hpp"
#include "sweep/sampler.hpp"
#include "sweep/sweep_spec.hpp"
#include "experiment/training_run.hpp"

namespace dnnlab::server::testing {

struct BrowserResult {
  std::int64_t trial = 0;
  int attempt = 0;
  double cpu_seconds = 0;  // this client's thread CPU for training it
  bool counted = false;    // the server's "accepted" said so
};

class HonestBrowser {
 public:
  using Clock = std::chrono::steady_clock;

  // source: the local address to connect from (another 127.x.y.z stands for
  // another machine: the gateway's limits are per address); empty: any.
  HonestBrowser(unsigned short port, std::string join_token, std::string store_url,
                const std::string& source = {})
      : port_(port),
        join_token_(std::move(join_token)),
        st_(store::open_result_store(store_url)),
        ws_(io_) {
    if (!source.empty()) {
      ws_.next_layer().open(boost::asio::ip::tcp::v4());
      ws_.next_layer().bind({boost::asio::ip::make_address(source), 0});
    }
    ws_.next_layer().connect({boost::asio::ip::make_address("127.0.0.1"), port});
    timeval tv{60, 0};
    setsockopt(ws_.next_layer().native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ws_.handshake("127.0.0.1", "/join");
    nlohmann::json w =
        call({{"v", 1}, {"type", "hello"}, {"token", join_token_}, {"client", "honest"}});
    if (w.value("type", "") != "welcome") throw std::runtime_error("no welcome: " + w.dump());
    worker_id_ = w["worker"];
  }

  ~HonestBrowser() {
    boost::beast::error_code ec;
    ws_.close(boost::beast::websocket::close_code::normal, ec);
  }

  const std::string& worker_id() const { return worker_id_; }

  // Takes and finishes tickets until the experiment stops running, the
  // deadline passes or *stop is set. Throws on anything an honest client
  // would not expect (a refusal, a close, a malformed frame).
  std::vector<BrowserResult> work(std::int64_t experiment, Clock::time_point deadline,
                                  const std::atomic<bool>* stop = nullptr) {
    std::vector<BrowserResult> out;
    while (Clock::now() < deadline && !(stop && *stop)) {
      nlohmann::json t = call({{"v", 1}, {"type", "request"}});
      if (t["type"] == "idle") {
        auto e = st_->experiment(experiment);
        if (!e || e->status != store::ExperimentStatus::running) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (t["type"] != "ticket") throw std::runtime_error("expected a ticket: " + t.dump());
      out.push_back(run_ticket(t));
    }
    return out;
  }

 private:
  static double thread_cpu() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }

  nlohmann::json call(const nlohmann::json& msg) {
    ws_.text(true);
    ws_.write(boost::asio::buffer(msg.dump()));
    return read();
  }

  nlohmann::json read() {
    buf_.clear();
    ws_.read(buf_);
    return nlohmann::json::parse(boost::beast::buffers_to_string(buf_.data()));
  }

  const data::Dataset& shard(const std::string& url) {
    auto it = shards_.find(url);
    if (it != shards_.end()) return it->second;
    HttpReply r = http_request("http://127.0.0.1:" + std::to_string(port_), "GET", url, {}, {});
    if (r.status != 200) throw std::runtime_error("shard " + url + ": " + std::to_string(r.status));
    return shards_.emplace(url, data::decode_shard(r.body)).first->second;
  }

  const sweep::SweepSpec& sweep_of(std::int64_t experiment) {
    auto& s = sweeps_[experiment];
    if (!s) {
      auto e = st_->experiment(experiment);
      s = std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(e->spec_text, e->spec_path));
    }
    return *s;
  }

  BrowserResult run_ticket(const nlohmann::json& t) {
    using nlohmann::json;
    const data::Dataset& ds = shard(t["data"]["url"].get<std::string>());
    auto trial = st_->trial(t["trial"]["id"].get<std::int64_t>());
    if (!trial) throw std::runtime_error("ticket for an unknown trial: " + t.dump());
    nn::RunSpec run =
        sweep_of(trial->experiment_id)
            .materialize({trial->index, json::parse(trial->config_json), trial->seed});
    BrowserResult r;
    r.trial = trial->id;
    r.attempt = t["trial"]["attempt"];
    const double cpu0 = thread_cpu();
    nn::Model model = nn::Model::build(run.model, ds.sample_shape, ds.num_classes, 1);
    experiment::RunResult res = experiment::train_run(run, ds, nullptr, &model);
    r.cpu_seconds = thread_cpu() - cpu0;
    const std::string tid = t["ticket"];
    for (const auto& e : res.curve) {
      json v = call({{"v", 1},
                     {"type", "progress"},
                     {"ticket", tid},
                     {"epoch", e.epoch},
                     {"train_loss", e.train_loss},
                     {"train_acc", e.train_acc},
                     {"val_loss", e.val_loss.value_or(0)},
                     {"val_acc", e.val_acc.value_or(0)},
                     {"seconds", e.seconds},
                     {"samples_per_second", e.samples_per_second},
                     {"lr", e.lr}});
      if (v.value("type", "") != "verdict")
        throw std::runtime_error("expected a verdict: " + v.dump());
    }
    const auto& last = res.curve.back();
    ws_.text(true);
    ws_.write(boost::asio::buffer(json{{"v", 1},
                                       {"type", "result"},
                                       {"ticket", tid},
                                       {"status", "finished"},
                                       {"metrics",
                                        {{"train_loss", last.train_loss},
                                         {"train_acc", last.train_acc},
                                         {"val_loss", last.val_loss.value_or(0)},
                                         {"val_acc", last.val_acc.value_or(0)},
                                         {"test_loss", res.test_loss},
                                         {"test_acc", res.test_acc},
                                         {"epochs_done", res.curve.size()},
                                         {"seconds", res.train_seconds}}}}
                                      .dump()));
    std::vector<float> w;
    for (nn::Param* p : model.params())
      w.insert(w.end(), p->value.data(), p->value.data() + p->value.numel());
    const std::string head = json{
        {"v", 1},
        {"ticket", tid},
        {"tensor", "weights"},
        {"dtype", "F32"},
        {"count", w.size()}}.dump();
    std::string frame(4, '\0');
    const auto h = static_cast<std::uint32_t>(head.size());
    for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>(h >> (8 * i) & 0xFF);
    frame += head;
    frame.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
    ws_.binary(true);
    ws_.write(boost::asio::buffer(frame));
    json acc = read();
    if (acc.value("type", "") != "accepted")
      throw std::runtime_error("not accepted: " + acc.dump());
    r.counted = acc.value("counted", false);
    return r;
  }

  unsigned short port_;
  std::string join_token_;
  std::unique_ptr<store::ResultStore> st_;
  boost::asio::io_context io_;
  boost::beast::websocket::stream<boost::asio::ip::tcp::socket> ws_;
  boost::beast::flat_buffer buf_;
  std::string worker_id_;
  std::map<std::string, data::Dataset> shards_;
  std::map<std::int64_t, std::unique_ptr<sweep::SweepSpec>> sweeps_;
};

}  // namespace dnnlab::server::testing
