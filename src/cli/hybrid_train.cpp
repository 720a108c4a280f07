// The hybrid trainer behind `dnnlab train --distributed`: in-process client
// threads, or an endpoint that clients in other processes join.
#include "cli/hybrid_train.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "data/shard.hpp"
#include "hybrid/train_in_process.hpp"
#include "hybrid_net/endpoint.hpp"
#include "hybrid_net/run_status.hpp"
#include "server/gateway.hpp"
#include "server/token.hpp"

namespace dnnlab::cli {
namespace {
// How long a --listen run whose clients have all left waits for one to come
// back (docs/distributed.md, "Reconnecting").
constexpr int kRejoinGraceSeconds = 30;

// --wire and --error-feedback (checked by the CLI's IsMember) as options.
void set_wire(const DistributedFlags& o, hybrid::HybridOptions* options) {
  options->wire = o.wire == "int8"   ? hybrid::Dtype::kInt8
                  : o.wire == "fp16" ? hybrid::Dtype::kFloat16
                                     : hybrid::Dtype::kFloat32;
  options->feedback_grads = o.feedback == "grads" || o.feedback == "both";
  options->feedback_acts = o.feedback == "acts" || o.feedback == "both";
}

// The run page's wire: "int8, error feedback grads" where feedback is on.
std::string wire_label(const DistributedFlags& o) {
  return o.wire == "int8" && o.feedback != "off" ? o.wire + ", error feedback " + o.feedback
                                                 : o.wire;
}

// The largest frame a client may send for this spec: its activations for a
// whole batch, or its weight gradients and state, each with its headers;
// and some room.
uint64_t max_frame_bytes(const nn::RunSpec& spec, const nn::Shape& input, int64_t classes) {
  nn::Model f = nn::Model::build_part(spec.model, "features", input, classes, 0);
  const uint64_t act = 4ull * static_cast<uint64_t>(f.output_shape().numel()) *
                       static_cast<uint64_t>(spec.train.batch_size);
  uint64_t weights = 0;
  std::vector<nn::Param*> all = f.params(), state = f.state();
  all.insert(all.end(), state.begin(), state.end());
  for (const nn::Param* p : all) weights += 4ull * p->value.numel() + 4 + 4 * nn::kMaxRank;
  return std::max(act + 64, weights + 64) + hybrid::kFrameHeaderBytes + 4096;
}

std::shared_ptr<const std::string> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return nullptr;
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::make_shared<const std::string>(ss.str());
}

// What a browser client needs from this endpoint (docs/distributed.md
// "Browser clients"): the spec as the wasm core reads it and the training
// split as a data shard, in the welcome; the page and the wasm core from the
// web bundle (find_web_root), if there is one. Returns the page's path, ""
// when the bundle or the core is missing.
std::string browser_files(const nn::RunSpec& spec, const data::Dataset& data,
                          hybrid_net::EndpointOptions& eo) {
  std::vector<int64_t> input;
  for (int i = 0; i < data.sample_shape.rank; ++i) input.push_back(data.sample_shape[i]);
  eo.welcome.core_spec_json = server::core_spec_json(spec, input, data.num_classes).dump();
  data::Dataset train_only;
  train_only.name = data.name;
  train_only.sample_shape = data.sample_shape;
  train_only.num_classes = data.num_classes;
  train_only.sha256 = data.sha256;
  train_only.class_names = data.class_names;
  train_only.normalize = data.normalize;
  train_only.lut = data.lut;
  train_only.train = data.train;
  eo.welcome.shard_path = "/hybrid/shard-" + eo.welcome.data_fingerprint + ".safetensors";
  eo.files[eo.welcome.shard_path] = {
      "application/octet-stream",
      std::make_shared<const std::string>(data::encode_shard(train_only)), /*needs_token=*/true};
  const std::string root = find_web_root();
  if (root.empty()) return "";
  const std::filesystem::path web(root);
  const std::pair<const char*, const char*> page[] = {
      {"hybrid.html", "text/html; charset=utf-8"}, {"hybrid.js", "text/javascript"},
      {"hybrid_worker.js", "text/javascript"},     {"hybrid_run.html", "text/html; charset=utf-8"},
      {"hybrid_run.js", "text/javascript"},        {"hybrid_run.css", "text/css"},
      {"core/dnnlab_core.mjs", "text/javascript"}, {"core/dnnlab_core.wasm", "application/wasm"}};
  std::map<std::string, hybrid_net::EndpointOptions::File> files;
  for (const auto& [name, type] : page) {
    auto body = read_file(web / name);
    if (!body) return "";
    const std::string n = name;
    const std::string path = "/hybrid/" + (n == "hybrid.html"       ? std::string("join")
                                           : n == "hybrid_run.html" ? std::string("run")
                                                                    : n);
    files[path] = {type, std::move(body)};
  }
  eo.files.merge(files);
  return "/hybrid/join";
}

// Clients in other processes: listen, wait for o.clients of them, train.
hybrid::HybridStats networked_fit(const DistributedFlags& o, const nn::RunSpec& spec,
                                  const data::Dataset& data, const nn::LabeledData& train,
                                  const nn::LabeledData* val, nn::TrainObserver* obs,
                                  nn::Model* model, std::vector<nn::EpochResult>* curve,
                                  uint64_t* version, nlohmann::json* by_client) {
  const nn::Shape input = nn::model_input(spec.model, data.sample_shape);
  hybrid_net::EndpointOptions eo;
  eo.token = server::random_hex(32);
  eo.welcome.spec_yaml = spec.source;
  eo.welcome.data_fingerprint = hybrid_net::fingerprint(data.train.x.view());
  eo.welcome.train_rows = data.train.size();
  eo.max_frame_bytes = max_frame_bytes(spec, input, data.num_classes);
  eo.max_clients = hybrid::kMaxClients;
  eo.tls = o.tls;
  if (!o.quiet) eo.log = [](const std::string& line) { std::cerr << "hybrid: " << line << "\n"; };
  const std::string page = browser_files(spec, data, eo);
  // The run's live status (docs/distributed.md "Watching a run"): read-only,
  // with its own token, so that a watcher can neither join nor read the data.
  // The board outlives the endpoint, whose io thread reads it.
  hybrid_net::RunStatusInput waiting;
  waiting.state = "waiting";
  waiting.epochs = spec.train.epochs;
  waiting.staleness = o.staleness;
  waiting.wire = wire_label(o);
  hybrid_net::RunStatusBoard board(hybrid_net::status_json(waiting).dump());
  eo.watch_token = server::random_hex(32);
  eo.files["/hybrid/status"] = {"application/json", nullptr, /*needs_token=*/true,
                                /*watch_token_too=*/true, [&board] { return board.latest(); }};
  hybrid_net::HybridEndpoint endpoint(o.listen, eo);
  // Printed even with -q: nobody can join without it. The browser URL keeps
  // the token in its fragment, which browsers never send (so no request line
  // or log holds it).
  std::cerr << "hybrid: listening on " << endpoint.url() << "\n"
            << "hybrid: join with: dnnlab join " << endpoint.url() << " --token " << eo.token
            << "\n";
  if (o.tls)
    std::cerr << "hybrid: a client whose system does not trust the certificate's CA adds "
                 "--tls-ca FILE (for a self-signed certificate: "
              << o.tls_cert << " itself)\n";
  std::string http = endpoint.url();
  http.replace(0, 2, "http");  // ws(s)://HOST:PORT/hybrid -> http(s)://HOST:PORT/hybrid
  if (!page.empty())
    std::cerr << "hybrid: browsers join at " << http.substr(0, http.size() - 7) << page
              << "#token=" << eo.token << "\n"
              << "hybrid: watch the run at " << http.substr(0, http.size() - 7) << "/hybrid/run"
              << "#token=" << eo.watch_token << std::endl;
  else
    std::cerr << "hybrid: the run's status: GET " << http.substr(0, http.size() - 7)
              << "/hybrid/status with Authorization: Bearer " << eo.watch_token << "\n"
              << "hybrid: no browser page here (the web bundle and its wasm core were not "
                 "found; $DNNLAB_WEB_DIR names them)"
              << std::endl;
  const int joined = endpoint.wait_for_clients(
      o.clients, hybrid::Clock::now() + std::chrono::seconds(o.client_wait_s), [&](int n) {
        waiting.agents = endpoint.agents();
        board.publish(hybrid_net::status_json(waiting).dump());
        if (n < o.clients)
          std::cerr << "hybrid: waiting for " << o.clients << " client"
                    << (o.clients > 1 ? "s" : "") << " to join (" << n << " joined)" << std::endl;
      });
  if (joined < o.clients)
    throw std::runtime_error("hybrid: " + std::to_string(joined) + " of " +
                             std::to_string(o.clients) + " clients joined within " +
                             std::to_string(o.client_wait_s) + " s (--client-wait)");
  if (!o.quiet) std::cerr << "hybrid: " << joined << " joined; training\n";
  hybrid::HybridOptions options;
  options.staleness = o.staleness;
  options.tickets = o.tickets.get();
  // A joined client that loses its link reconnects within seconds (`join
  // --reconnect`: 0.5 s, then doubling); a run whose last client is away
  // waits this long for it.
  options.rejoin_grace = std::chrono::seconds(kRejoinGraceSeconds);
  set_wire(o, &options);
  hybrid::HybridServer server(spec, input, data.num_classes, endpoint, options);
  hybrid_net::RunStatusObserver watch(board, server, endpoint, obs, spec.train.epochs, o.staleness,
                                      wire_label(o));
  *curve = server.fit(train, val, &watch);
  watch.finished();
  // The run page's last client rows, kept in metrics.json: the split of
  // each client's time outlives the endpoint.
  *by_client = nlohmann::json::parse(*board.latest())["clients"];
  server.finish();
  endpoint.shutdown();
  *version = server.version();
  *model = std::move(server.whole());
  return server.stats();
}

}  // namespace

experiment::RunResult distributed_run(const DistributedFlags& o, const nn::RunSpec& spec,
                                      const data::Dataset& data, nn::TrainObserver* obs,
                                      nn::Model* model, nlohmann::json* report) {
  const nn::LabeledData train{data.train.x.view(), data.train.y.data()};
  const nn::LabeledData val{data.val.x.view(), data.val.y.data()};
  const nn::LabeledData* valp = data.val.size() ? &val : nullptr;
  experiment::RunResult r;
  hybrid::HybridStats stats;
  uint64_t version = 0;
  nlohmann::json by_client;
  // `classifier: []` is data-parallel training: with s > 0 every layer's
  // gradient may be stale, and it learns much worse (bench/RESULTS.md, "What
  // each scheme learns in one epoch"). Said, not refused: it is a choice.
  if (o.staleness > 0 && !o.quiet && spec.model.parts.size() == 2 &&
      spec.model.parts[1].begin == spec.model.parts[1].end)
    std::cerr << "hybrid: warning: with `classifier: []` (data-parallel) and --staleness "
              << o.staleness
              << " every layer's gradient may be stale, which learns much worse than "
                 "--staleness 0 (docs/distributed.md, \"Data-parallel through the same "
                 "machinery\")\n";
  if (o.listen.empty()) {
    hybrid::HybridOptions options;
    options.staleness = o.staleness;
    options.tickets = o.tickets.get();
    set_wire(o, &options);
    hybrid::InProcessRun h =
        hybrid::train_in_process(spec, nn::model_input(spec.model, data.sample_shape),
                                 data.num_classes, train, valp, obs, o.clients, options, model);
    r.curve = std::move(h.curve);
    stats = std::move(h.stats);
    version = h.version;
  } else {
    stats = networked_fit(o, spec, data, train, valp, obs, model, &r.curve, &version, &by_client);
  }
  r.num_params = model->num_params();
  r.stopped_early = static_cast<int>(r.curve.size()) < spec.train.epochs;
  for (const auto& e : r.curve) r.train_seconds += e.seconds;
  if (data.test.size()) {
    const nn::LossAndAccuracy t = model->evaluate(data.test.x.view(), data.test.y.data());
    r.test_loss = t.loss;
    r.test_acc = t.accuracy;
    r.tested = true;
  }
  *report = {{"clients", o.clients},
             {"transport", o.listen.empty() ? "in-process" : "websocket"},
             {"staleness", o.staleness},
             {"wire", o.wire},
             {"error_feedback", o.wire == "int8" ? o.feedback : "off"},
             {"versions", version},
             {"rounds", stats.rounds},
             {"tickets", stats.tickets},
             {"tickets_by_client", stats.tickets_by_client},
             {"reissued", stats.reissued},
             {"late", stats.late},
             {"grads_applied", stats.grads_applied},
             {"grads_stale", stats.grads_stale},
             {"grads_dropped", stats.grads_dropped},
             {"server_seconds", stats.server_seconds},
             {"wait_seconds", stats.wait_seconds},
             {"weights_sent", stats.weights_sent},
             {"rechecks", stats.rechecks},
             {"recheck_failures", stats.recheck_failures},
             {"bytes_to_clients", stats.bytes_to_clients},
             {"bytes_from_clients", stats.bytes_from_clients},
             {"quarantined", stats.quarantined}};
  if (!by_client.is_null()) (*report)["by_client"] = std::move(by_client);
  if (o.tickets) (*report)["ticket_log"] = o.tickets->summary();
  if (!o.quiet)
    for (const std::string& line : stats.log) std::cerr << "hybrid: " << line << "\n";
  return r;
}

}  // namespace dnnlab::cli
