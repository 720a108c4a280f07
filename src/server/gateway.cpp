// The browser gateway (protocol v1, docs/protocol.md): tickets from queue
// leases, epochs into the store, scheduler verdicts, result checks, a native
// verifier thread, quarantine.
#include "server/gateway.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "data/dataset.hpp"
#include "data/shard.hpp"
#include "experiment/coordinator.hpp"
#include "experiment/task.hpp"
#include "nn/model.hpp"
#include "server/static_files.hpp"
#include "server/token.hpp"
#include "store/sha256.hpp"
#include "sweep/scheduler.hpp"
#include "sweep/sweep_spec.hpp"
#include "worker/training_run.hpp"
#include "worker/worker_loop.hpp"

namespace dnnlab::server {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int kVersion = 1;
constexpr unsigned short kProtocolError = 1002, kPolicy = 1008, kTooBig = 1009;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A frame that breaks the protocol: the client gets `error` and is closed.
struct Violation {
  unsigned short code;
  std::string kind;  // error code sent to the client
  std::string message;
};

[[noreturn]] void violate(std::string kind, std::string message, unsigned short code = kPolicy) {
  throw Violation{code, std::move(kind), std::move(message)};
}

std::string truncate_reason(std::string s) {
  if (s.size() > 123) {
    s.resize(120);
    while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();
    if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.pop_back();
    s += "...";
  }
  return s;
}

GatewayReply error_reply(const Violation& v) {
  GatewayReply r;
  r.frames.push_back(
      json{{"v", kVersion}, {"type", "error"}, {"code", v.kind}, {"message", v.message}}.dump());
  r.close = true;
  r.close_code = v.code;
  r.reason = truncate_reason(v.message);
  return r;
}

// Field readers: a wrong or missing field is a violation naming it.
const json& field(const json& msg, const char* type, const char* name) {
  auto it = msg.find(name);
  if (it == msg.end()) violate("bad_message", std::string(type) + ": missing field '" + name + "'");
  return *it;
}
double number(const json& msg, const char* type, const char* name) {
  const json& v = field(msg, type, name);
  if (!v.is_number())
    violate("bad_message", std::string(type) + ": '" + name + "' must be a number");
  return v.get<double>();
}
// JSON has no NaN or infinity: browsers send them as null.
double finite_number(const json& msg, const char* type, const char* name) {
  if (auto it = msg.find(name); it != msg.end() && it->is_null())
    violate("non_finite", std::string(type) + ": non-finite result ('" + name + "' is null)");
  double d = number(msg, type, name);
  if (!std::isfinite(d))
    violate("non_finite", std::string(type) + ": non-finite result ('" + name + "')");
  return d;
}
std::string text(const json& msg, const char* type, const char* name, std::size_t max = 256) {
  const json& v = field(msg, type, name);
  if (!v.is_string())
    violate("bad_message", std::string(type) + ": '" + name + "' must be a string");
  std::string s = v.get<std::string>();
  if (s.size() > max)
    violate("bad_message", std::string(type) + ": '" + name + "' is longer than " +
                               std::to_string(max) + " characters");
  return s;
}

// Deterministic "is this trial re-run natively": splitmix64 of its id.
bool chosen_for_verification(std::int64_t trial_id, double fraction) {
  if (fraction <= 0) return false;
  if (fraction >= 1) return true;
  std::uint64_t z = static_cast<std::uint64_t>(trial_id) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 < fraction;
}

std::string data_key(const nn::DataSpec& d) {
  return d.dataset + "|" + std::to_string(d.validation) + "|" + d.normalize + "|" +
         std::to_string(d.limit_train);
}

// The client's id, made safe for a worker id.
std::string sanitize(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') out += c;
  if (out.size() > 40) out.resize(40);
  return out.empty() ? "anon" : out;
}

// Relative closeness for losses, absolute for accuracies.
bool close_rel(double a, double b, double tol) {
  if (!std::isfinite(a) || !std::isfinite(b)) return false;
  return std::fabs(a - b) <= tol * std::max({1.0, std::fabs(a), std::fabs(b)});
}

}  // namespace

json core_spec_json(const nn::RunSpec& spec, const std::vector<std::int64_t>& input, int classes) {
  json layers = json::array();
  for (const auto& l : spec.model.layers) {
    json j{{"type", l.type}};
    if (l.type == "dense") {
      j["units"] = l.units;
      if (!l.bias) j["bias"] = false;
      if (!l.init.empty()) j["init"] = l.init;
    }
    if (l.alpha != 0.f) j["alpha"] = l.alpha;
    layers.push_back(std::move(j));
  }
  const auto& t = spec.train;
  const auto& o = t.optimizer;
  json opt{{"type", o.type}, {"lr", o.lr}, {"weight_decay", o.weight_decay}};
  if (o.type == "sgd") {
    opt["momentum"] = o.momentum;
    opt["nesterov"] = o.nesterov;
  } else {
    opt["beta1"] = o.beta1;
    opt["beta2"] = o.beta2;
    opt["eps"] = o.eps;
  }
  const auto& s = t.schedule;
  json sched{{"type", s.type}, {"warmup_epochs", s.warmup_epochs}};
  if (s.type == "step") {
    sched["step_epochs"] = s.step_epochs;
    sched["gamma"] = s.gamma;
  } else if (s.type == "cosine") {
    sched["min_lr"] = s.min_lr;
  }
  return {{"input", spec.model.input.empty() ? input : spec.model.input},
          {"classes", classes},
          {"layers", std::move(layers)},
          {"init", spec.model.init},
          {"loss", spec.model.loss},
          {"optimizer", std::move(opt)},
          {"schedule", std::move(sched)},
          {"batch_size", t.batch_size},
          {"seed", std::to_string(t.seed)},  // as text: JSON.parse rounds above 2^53
          {"epochs", t.epochs}};
}

// ---------------------------------------------------------------------------

namespace {

struct ExperimentCache {
  std::unique_ptr<sweep::SweepSpec> sweep;
  std::unique_ptr<sweep::Scheduler> scheduler;
  // The data its first trial trains on (nearly always every trial's): its
  // shard is built before any of its trials is leased to a browser.
  std::optional<nn::DataSpec> data;
};

struct Shard {
  std::string sha256;
  std::shared_ptr<const std::string> bytes;
  std::vector<std::int64_t> sample_shape;
  int classes = 0;
  json provenance;
};

// A result reported by the client, waiting for its weights frame.
struct PendingResult {
  store::TrialStatus status = store::TrialStatus::finished;
  store::TrialMetrics metrics;
};

struct Ticket {
  std::string id;
  queue::TaskLease lease;
  int attempt = 0;
  std::int64_t trial_id = 0, experiment_id = 0, index = 0;
  std::int64_t num_params = 0;
  std::shared_ptr<const Shard> shard;  // its data, served while the ticket is held
  int epochs = 0;                      // planned
  bool has_val = true;                 // the run holds out validation data
  int epochs_done = 0;                 // progress frames accepted
  bool stopped = false;                // the verdict said stop (pruned)
  std::optional<double> last_val_acc;
  std::optional<PendingResult> pending;
};

struct Client {
  std::string remote;
  std::string client_key;  // from hello
  std::string worker_id;
  bool greeted = false;
  std::string kernels = "wasm-simd128";  // the core build it runs (provenance)
  std::optional<bool> fma;               // relaxed build: is its madd fused here
  std::optional<Ticket> ticket;
};

struct VerifyJob {
  std::int64_t trial_id = 0;
  int attempt = 0;
  std::string worker_id, client_key;
};

struct VerifyOutcome {
  VerifyJob job;
  bool agree = true;
  std::string detail;
};

}  // namespace

struct Gateway::Impl {
  Impl(store::ResultStore& s, queue::TaskQueue& q, GatewayOptions o)
      : store(s), queue(q), opt(std::move(o)) {}

  store::ResultStore& store;
  queue::TaskQueue& queue;
  GatewayOptions opt;
  ClientId next_id = 1;
  std::map<ClientId, Client> clients;
  std::map<std::int64_t, ExperimentCache> experiments;
  // data key -> shard, built on a thread of its own (a Fashion-MNIST shard
  // takes 1-2 s: the io thread must not wait for it)
  std::map<std::string, std::shared_future<std::shared_ptr<const Shard>>> shards_by_key;
  std::vector<std::thread> builders;                                      // joined by ~Gateway
  std::map<std::string, std::shared_ptr<const std::string>> shard_bytes;  // sha -> bytes
  std::set<std::string> quarantined_keys, quarantined_workers;
  std::vector<std::int64_t> running;
  double running_listed_at = -1;

  // Core files: hashed name -> (content type, bytes); logical name -> URL.
  std::map<std::string, GatewayAsset> core_assets;
  std::map<std::string, std::string> core_url_of;
  double core_scanned_at = -1e9;

  // Verifier thread.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<VerifyJob> jobs;
  std::vector<VerifyOutcome> outcomes;
  std::size_t busy = 0;
  bool quit = false;
  std::thread verifier;

  // ---- helpers ----
  void scan_core() {
    const double now = unix_now();
    if (now - core_scanned_at < 5) return;
    core_scanned_at = now;
    core_assets.clear();
    core_url_of.clear();
    if (opt.web_root.empty()) return;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(opt.web_root) / "core", ec)) {
      if (!e.is_regular_file(ec)) continue;
      std::ifstream f(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      auto bytes = std::make_shared<const std::string>(ss.str());
      const std::string name = e.path().filename().string();
      const std::size_t dot = name.find('.');
      const std::string stem = name.substr(0, dot);
      const std::string ext = dot == std::string::npos ? "" : name.substr(dot);
      const std::string hashed = stem + "." + store::sha256_hex(*bytes).substr(0, 16) + ext;
      core_assets["/core/" + hashed] = {std::string(content_type_for(ext)), bytes};
      core_url_of[name] = "/core/" + hashed;
    }
  }

  ExperimentCache& experiment(std::int64_t id) {
    auto it = experiments.find(id);
    if (it != experiments.end()) return it->second;
    auto e = store.experiment(id);
    if (!e) throw std::invalid_argument("experiment " + std::to_string(id) + " does not exist");
    ExperimentCache c;
    c.sweep = std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(e->spec_text, e->spec_path));
    c.scheduler = sweep::make_scheduler(*c.sweep);
    return experiments.emplace(id, std::move(c)).first->second;
  }

  static std::shared_ptr<const Shard> build_shard(const data::LoadOptions& lo) {
    data::Dataset ds = data::load(lo);
    auto s = std::make_shared<Shard>();
    s->bytes = std::make_shared<const std::string>(data::encode_shard(ds));
    s->sha256 = store::sha256_hex(*s->bytes);
    s->sample_shape.assign(ds.sample_shape.d.begin(),
                           ds.sample_shape.d.begin() + ds.sample_shape.rank);
    s->classes = ds.num_classes;
    s->provenance = worker::provenance(ds);
    return s;
  }

  // The shard for `spec`, or nullptr while it is being built: the first call
  // starts the build on its own thread. A build that failed rethrows here.
  std::shared_ptr<const Shard> shard_if_ready(const nn::DataSpec& spec) {
    const std::string key = data_key(spec);
    auto it = shards_by_key.find(key);
    if (it == shards_by_key.end()) {
      if (shards_by_key.size() >= 4) {  // bound memory: keep the shards of a few data specs
        shards_by_key.clear();
        shard_bytes.clear();
        // ... but never one a held ticket still points its client to.
        for (const auto& [_, cl] : clients)
          if (cl.ticket && cl.ticket->shard)
            shard_bytes[cl.ticket->shard->sha256] = cl.ticket->shard->bytes;
      }
      data::LoadOptions lo = worker::load_options(spec, opt.data_dir);
      lo.keep_raw = true;
      auto done = std::make_shared<std::promise<std::shared_ptr<const Shard>>>();
      it = shards_by_key.emplace(key, done->get_future().share()).first;
      builders.emplace_back([done, lo] {
        try {
          done->set_value(build_shard(lo));
        } catch (...) {
          done->set_exception(std::current_exception());
        }
      });
    }
    if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return nullptr;
    std::shared_ptr<const Shard> sh = it->second.get();
    shard_bytes[sh->sha256] = sh->bytes;
    return sh;
  }

  // The same, waiting for the build: for a trial whose data differs from its
  // experiment's first (data that depends on the trial's parameters).
  std::shared_ptr<const Shard> shard(const nn::DataSpec& spec) {
    if (auto sh = shard_if_ready(spec)) return sh;
    shards_by_key.at(data_key(spec)).wait();
    return shard_if_ready(spec);
  }

  // Whether the shard of the experiment's (first trial's) data is ready;
  // starts building it if not. Nothing to build yet, or a build that failed
  // (its trials then fail with the error when leased), counts as ready.
  bool data_ready(std::int64_t exp_id) {
    try {
      ExperimentCache& ec = experiment(exp_id);
      if (!ec.data) {
        store::TrialQuery first;
        first.limit = 1;
        first.sort_by = "index";
        auto ts = store.trials(exp_id, first);
        if (ts.empty()) return true;
        ec.data =
            ec.sweep->materialize({ts[0].index, json::parse(ts[0].config_json), ts[0].seed}).data;
      }
      return shard_if_ready(*ec.data) != nullptr;
    } catch (const std::exception&) {
      return true;
    }
  }

  const std::vector<std::int64_t>& running_experiments() {
    const double now = unix_now();
    if (now - running_listed_at > 1.0) {
      running.clear();
      for (const auto& e : store.experiments())
        if (e.status == store::ExperimentStatus::running) running.push_back(e.id);
      running_listed_at = now;
    }
    return running;
  }

  static std::string frame(json j) {
    j["v"] = kVersion;
    return j.dump();
  }

  // ---- messages ----
  GatewayReply hello(Client& c, const json& msg) {
    if (c.greeted) violate("bad_message", "hello: already said hello");
    const std::string token = text(msg, "hello", "token", 256);
    if (!bearer_matches("Bearer " + token, opt.join_token))
      violate("unauthorized", "hello: the join token is wrong");
    c.client_key = text(msg, "hello", "client", 128);
    if (quarantined_keys.count(c.client_key))
      violate("quarantined", "quarantined: this client's results disagreed with a native re-run");
    std::string agent;
    if (msg.contains("agent") && msg["agent"].is_string())
      agent = msg["agent"].get<std::string>().substr(0, 200);
    if (msg.contains("capabilities") && !msg["capabilities"].is_object())
      violate("bad_message", "hello: 'capabilities' must be an object");
    scan_core();
    // A client whose engine has relaxed SIMD loads that build when offered;
    // the trials it trains record which one.
    if (msg.contains("capabilities") &&
        msg["capabilities"].value("kernels", json()) == "wasm-relaxed-simd" &&
        core_url_of.count("dnnlab_core_relaxed.wasm")) {
      c.kernels = "wasm-relaxed-simd";
      if (auto f = msg["capabilities"].value("fma", json()); f.is_boolean()) c.fma = f.get<bool>();
    }
    std::string id = "browser-" + sanitize(c.client_key);
    for (int n = 2;; ++n) {
      bool taken = false;
      for (const auto& [_, o] : clients) taken |= o.worker_id == id;
      if (!taken) break;
      id = "browser-" + sanitize(c.client_key) + "-" + std::to_string(n);
    }
    c.worker_id = id;
    c.greeted = true;
    store::WorkerRecord w;
    w.id = id;
    w.kind = store::WorkerKind::browser;
    w.host = c.remote;
    w.started_at = unix_now();
    store.upsert_worker(w);
    store.append_event(
        "worker.joined",
        {{"worker", id}, {"kind", "browser"}, {"agent", agent}, {"kernels", c.kernels}});
    GatewayReply r;
    r.frames.push_back(frame({{"type", "welcome"},
                              {"worker", id},
                              {"heartbeat_seconds", opt.heartbeat_seconds},
                              {"max_text_bytes", opt.max_text_bytes},
                              {"max_binary_bytes", opt.max_binary_bytes},
                              {"wasm", core_urls()}}));
    return r;
  }

  json core_urls() {
    auto url = [&](const char* name) {
      auto it = core_url_of.find(name);
      return it == core_url_of.end() ? std::string() : it->second;
    };
    json urls = {{"js", url("dnnlab_core.mjs")}, {"wasm", url("dnnlab_core.wasm")}};
    // The relaxed-SIMD build shares the glue; engines that validate relaxed
    // SIMD load it instead (faster GEMM), the others ignore it.
    if (std::string relaxed = url("dnnlab_core_relaxed.wasm"); !relaxed.empty())
      urls["relaxed_wasm"] = relaxed;
    return urls;
  }

  // Leases the next trial for the client; nullopt when there is none.
  // `preparing` is set when an experiment was passed over because its data
  // shard is still being built.
  std::optional<json> next_ticket(Client& c, bool& preparing) {
    for (std::int64_t exp : running_experiments()) {
      if (!data_ready(exp)) {
        preparing = true;
        continue;
      }
      for (int tries = 0; tries < 16; ++tries) {
        auto lease = queue.lease(experiment::queue_name(exp), c.worker_id, opt.lease_seconds);
        if (!lease) break;
        if (auto t = issue(c, exp, *lease)) return t;
      }
    }
    return std::nullopt;
  }

  // Turns a lease into a ticket, or ends it (duplicate, bad trial) and returns nullopt.
  std::optional<json> issue(Client& c, std::int64_t exp_id, queue::TaskLease& lease) {
    experiment::TrialTask task;
    try {
      task = experiment::decode_task(lease.payload);
    } catch (const experiment::ProtocolError& e) {
      queue.nack(lease, false, e.what());
      return std::nullopt;
    }
    const int attempt = task.attempt(lease.attempt);
    auto trial = store.trial(task.trial_id);
    if (!trial || (trial->status != store::TrialStatus::queued &&
                   trial->status != store::TrialStatus::running)) {
      queue.ack(lease);
      return std::nullopt;
    }
    nn::RunSpec run;
    std::shared_ptr<const Shard> sh;
    std::int64_t num_params = 0;
    try {
      ExperimentCache& ec = experiment(task.experiment_id);
      run = ec.sweep->materialize({trial->index, json::parse(trial->config_json), trial->seed});
      sh = shard(run.data);
      nn::Shape in;
      for (std::int64_t d : sh->sample_shape) in.d[in.rank++] = d;
      num_params = nn::Model::build(run.model, in, sh->classes, run.train.seed).num_params();
    } catch (const std::exception& e) {
      if (store.mark_running(trial->id, attempt, c.worker_id))
        store.finish_trial(trial->id, attempt, store::TrialStatus::failed, {}, e.what());
      queue.ack(lease);
      return std::nullopt;
    }
    json prov = sh->provenance;
    prov["kernel_target"] = c.kernels;
    if (c.fma) prov["relaxed_madd_fused"] = *c.fma;  // the relaxed build's rounding
    prov["worker_kind"] = "browser";
    if (!store.mark_running(trial->id, attempt, c.worker_id, prov)) {
      queue.ack(lease);
      return std::nullopt;
    }
    Ticket t;
    t.id = "t-" + std::to_string(trial->id) + "-" + std::to_string(attempt);
    t.lease = lease;
    t.attempt = attempt;
    t.trial_id = trial->id;
    t.experiment_id = exp_id;
    t.index = trial->index;
    t.num_params = num_params;
    t.shard = sh;
    t.epochs = run.train.epochs;
    t.has_val = run.data.validation > 0;
    json j{{"type", "ticket"},
           {"ticket", t.id},
           {"trial",
            {{"id", t.trial_id}, {"experiment", exp_id}, {"index", t.index}, {"attempt", attempt}}},
           {"spec", core_spec_json(run, sh->sample_shape, sh->classes)},
           {"data",
            {{"url", "/shards/" + sh->sha256 + ".safetensors"},
             {"sha256", sh->sha256},
             {"bytes", sh->bytes->size()}}},
           {"lease_seconds", opt.lease_seconds}};
    c.ticket = std::move(t);
    return j;
  }

  Ticket& held(Client& c, const json& msg, const char* type) {
    const std::string id = text(msg, type, "ticket", 64);
    if (!c.ticket || c.ticket->id != id)
      violate("not_held", std::string(type) + ": ticket \"" + id + "\" is not held by this client");
    return *c.ticket;
  }

  // Gives the ticket's trial back: the next attempt starts afresh elsewhere.
  void release(Client& c, const std::string& why) {
    if (!c.ticket) return;
    try {
      store.release_trial(c.ticket->trial_id, c.ticket->attempt);
      queue.nack(c.ticket->lease, true, why);
    } catch (const std::exception&) {
    }
    c.ticket.reset();
  }

  GatewayReply request(Client& c) {
    if (c.ticket) violate("bad_message", "request: ticket \"" + c.ticket->id + "\" is still held");
    GatewayReply r;
    bool preparing = false;
    if (auto t = next_ticket(c, preparing)) {
      r.frames.push_back(frame(std::move(*t)));
      store.heartbeat(c.worker_id, c.ticket->trial_id);
    } else if (preparing) {
      r.frames.push_back(
          frame({{"type", "idle"}, {"retry_seconds", 1}, {"reason", "preparing data"}}));
    } else {
      r.frames.push_back(frame({{"type", "idle"}, {"retry_seconds", 1}}));
    }
    return r;
  }

  GatewayReply progress(Client& c, const json& msg) {
    Ticket& t = held(c, msg, "progress");
    if (t.pending) violate("bad_message", "progress: the result was already sent");
    const double epoch = number(msg, "progress", "epoch");
    if (epoch != t.epochs_done + 1)
      violate("bad_message", "progress: expected epoch " + std::to_string(t.epochs_done + 1));
    if (t.stopped) violate("bad_message", "progress: the verdict was to stop");
    store::EpochMetrics m;
    m.epoch = t.epochs_done + 1;
    m.train_loss = finite_number(msg, "progress", "train_loss");
    m.train_acc = finite_number(msg, "progress", "train_acc");
    if (t.has_val) {  // without validation data there is no value (a client sends 0)
      m.val_loss = finite_number(msg, "progress", "val_loss");
      m.val_acc = finite_number(msg, "progress", "val_acc");
    }
    m.seconds = finite_number(msg, "progress", "seconds");
    if (msg.contains("lr")) m.lr = finite_number(msg, "progress", "lr");
    GatewayReply r;
    auto verdict = [&](bool go, const char* reason) {
      json j{{"type", "verdict"}, {"ticket", t.id}, {"epoch", m.epoch}, {"continue", go}};
      if (reason) j["reason"] = reason;
      r.frames.push_back(frame(std::move(j)));
    };
    if (!queue.extend(t.lease, opt.lease_seconds) ||
        !store.record_epoch(t.trial_id, t.attempt, m)) {
      verdict(false, "lost");  // someone else has the trial now
      c.ticket.reset();
      return r;
    }
    store.heartbeat(c.worker_id, t.trial_id);
    t.epochs_done = static_cast<int>(m.epoch);
    t.last_val_acc = m.val_acc;
    ExperimentCache& ec = experiment(t.experiment_id);
    const bool go = worker::continue_after_epoch(store, *ec.sweep, *ec.scheduler, t.experiment_id,
                                                 t.trial_id, t.index, m.epoch, t.epochs, m);
    if (!go) t.stopped = true;
    verdict(go, go ? nullptr : "pruned");
    return r;
  }

  GatewayReply result(Client& c, const json& msg) {
    Ticket& t = held(c, msg, "result");
    if (t.pending) violate("bad_message", "result: already sent for this ticket");
    const std::string status = text(msg, "result", "status", 16);
    if (status == "failed") {
      std::string error = msg.contains("error") && msg["error"].is_string()
                              ? msg["error"].get<std::string>().substr(0, 2000)
                              : "failed in the browser";
      store::TrialMetrics none;
      none.epochs_done = t.epochs_done;
      const bool counted = store.finish_trial(t.trial_id, t.attempt, store::TrialStatus::failed,
                                              none, "browser: " + error);
      queue.ack(t.lease);
      if (counted) maybe_verify(c, t);
      return accepted(c, counted);
    }
    if (status != "finished" && status != "pruned")
      violate("bad_message", "result: 'status' must be finished, pruned or failed");
    if ((status == "pruned") != t.stopped)
      violate("bad_message", status == "pruned" ? "result: pruned without a stop verdict"
                                                : "result: finished after a stop verdict");
    const json& mj = field(msg, "result", "metrics");
    if (!mj.is_object()) violate("bad_message", "result: 'metrics' must be an object");
    PendingResult p;
    p.status = status == "pruned" ? store::TrialStatus::pruned : store::TrialStatus::finished;
    p.metrics.train_loss = finite_number(mj, "result.metrics", "train_loss");
    p.metrics.train_acc = finite_number(mj, "result.metrics", "train_acc");
    if (t.has_val) {
      p.metrics.val_loss = finite_number(mj, "result.metrics", "val_loss");
      p.metrics.val_acc = finite_number(mj, "result.metrics", "val_acc");
    }
    p.metrics.test_acc = finite_number(mj, "result.metrics", "test_acc");
    p.metrics.seconds = finite_number(mj, "result.metrics", "seconds");
    const double done = number(mj, "result.metrics", "epochs_done");
    if (done != t.epochs_done)
      violate("bad_message", "result: epochs_done " + json(done).dump() + " but " +
                                 std::to_string(t.epochs_done) + " epochs were reported");
    if (status == "finished" && t.epochs_done != t.epochs)
      violate("bad_message", "result: finished after " + std::to_string(t.epochs_done) + " of " +
                                 std::to_string(t.epochs) + " epochs");
    if (t.last_val_acc && p.metrics.val_acc && *p.metrics.val_acc != *t.last_val_acc)
      violate("bad_message", "result: val_acc differs from the last epoch's");
    p.metrics.epochs_done = t.epochs_done;
    t.pending = p;
    return {};  // the weights frame comes next
  }

  GatewayReply weights(Client& c, std::string_view bytes) {
    if (bytes.size() < 4)
      violate("bad_frame", "binary frame: shorter than its 4-byte header length");
    std::uint32_t h = 0;
    for (int i = 3; i >= 0; --i) h = h << 8 | static_cast<unsigned char>(bytes[i]);
    if (h > 4096 || 4 + std::size_t{h} > bytes.size())
      violate("bad_frame", "binary frame: header length " + std::to_string(h) + " at offset 0 is " +
                               (h > 4096 ? "over 4096" : "past the end of the frame"));
    json head = json::parse(bytes.substr(4, h), nullptr, false);
    if (head.is_discarded() || !head.is_object())
      violate("bad_frame", "binary frame: the header at offset 4 is not a JSON object");
    if (head.value("v", 0) != kVersion)
      violate("bad_version", "binary frame: unsupported protocol version; this server speaks v1",
              kProtocolError);
    Ticket& t = held(c, head, "binary frame");
    if (text(head, "binary frame", "tensor", 32) != "weights" ||
        text(head, "binary frame", "dtype", 8) != "F32")
      violate("bad_frame", "binary frame: only tensor 'weights' of dtype 'F32' is accepted");
    if (!t.pending) violate("bad_message", "binary frame: weights before the result");
    const double count = number(head, "binary frame", "count");
    const std::size_t data = bytes.size() - 4 - h;
    if (count != static_cast<double>(t.num_params) || data != std::size_t(t.num_params) * 4)
      violate("bad_frame", "binary frame: expected " + std::to_string(t.num_params) +
                               " float32 weights, got " + std::to_string(data / 4));
    const char* p = bytes.data() + 4 + h;
    for (std::size_t i = 0; i < data / 4; ++i) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      if (!std::isfinite(f))
        violate("non_finite", "binary frame: non-finite result (weight " + std::to_string(i) +
                                  " at offset " + std::to_string(4 + h + 4 * i) + ")");
    }
    const PendingResult res = *t.pending;
    const bool counted = store.finish_trial(t.trial_id, t.attempt, res.status, res.metrics);
    queue.ack(t.lease);
    if (counted) experiment(t.experiment_id).scheduler->on_finish(t.index);
    if (counted) maybe_verify(c, t);
    return accepted(c, counted);
  }

  GatewayReply accepted(Client& c, bool counted) {
    GatewayReply r;
    r.frames.push_back(
        frame({{"type", "accepted"}, {"ticket", c.ticket->id}, {"counted", counted}}));
    c.ticket.reset();
    store.heartbeat(c.worker_id, std::nullopt);
    return r;
  }

  GatewayReply heartbeat(Client& c, const json& msg) {
    if (auto it = msg.find("ticket"); it != msg.end() && !it->is_null()) {
      Ticket& t = held(c, msg, "heartbeat");
      if (!queue.extend(t.lease, opt.lease_seconds)) {
        // Lost (it expired): the next progress gets a 'lost' verdict.
      }
    }
    store.heartbeat(c.worker_id, c.ticket ? std::optional(c.ticket->trial_id) : std::nullopt);
    GatewayReply r;
    r.frames.push_back(frame({{"type", "heartbeat"}}));
    return r;
  }

  // ---- verification ----
  void maybe_verify(const Client& c, const Ticket& t) {
    if (!chosen_for_verification(t.trial_id, opt.verify_fraction)) return;
    std::lock_guard<std::mutex> lock(mu);
    jobs.push_back({t.trial_id, t.attempt, c.worker_id, c.client_key});
    if (!verifier.joinable()) verifier = std::thread([this] { verify_loop(); });
    cv.notify_one();
  }

  void verify_loop() {
    std::unique_ptr<store::ResultStore> st;
    std::map<std::string, data::Dataset> data;
    std::map<std::int64_t, std::unique_ptr<sweep::SweepSpec>> sweeps;
    for (;;) {
      VerifyJob job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return quit || !jobs.empty(); });
        if (quit) return;
        job = std::move(jobs.front());
        jobs.pop_front();
        ++busy;
      }
      VerifyOutcome out{job, true, ""};
      bool skip = false;
      try {
        if (!st) st = store::open_result_store(opt.store_url);
        auto trial = st->trial(job.trial_id);
        if (!trial || trial->attempt != job.attempt) {
          skip = true;  // it was reopened or redone since
        } else {
          auto& sw = sweeps[trial->experiment_id];
          if (!sw) {
            auto e = st->experiment(trial->experiment_id);
            sw = std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(e->spec_text, e->spec_path));
          }
          nn::RunSpec run =
              sw->materialize({trial->index, json::parse(trial->config_json), trial->seed});
          const std::string key = data_key(run.data);
          if (!data.count(key)) {
            if (data.size() >= 2) data.clear();
            data.emplace(key, data::load(worker::load_options(run.data, opt.data_dir)));
          }
          out = compare(job, *trial, run, data.at(key));
          st->append_event("trial.verified", {{"trial", job.trial_id},
                                              {"worker", job.worker_id},
                                              {"agree", out.agree},
                                              {"detail", out.detail}});
        }
      } catch (const std::exception& e) {
        skip = true;  // the verifier's own trouble is no evidence against the client
        std::cerr << "dnnlab serve: verifier: trial " << job.trial_id << ": " << e.what() << "\n";
      }
      std::lock_guard<std::mutex> lock(mu);
      --busy;
      if (!skip) outcomes.push_back(std::move(out));
    }
  }

  // Re-runs the trial natively for as many epochs as the client reported and
  // compares epoch by epoch.
  static VerifyOutcome compare(const VerifyJob& job, const store::TrialRecord& trial,
                               const nn::RunSpec& run, const data::Dataset& ds) {
    VerifyOutcome out{job, true, ""};
    struct Stop : nn::TrainObserver {
      std::size_t n;
      explicit Stop(std::size_t n) : n(n) {}
      bool on_epoch(const nn::EpochResult& r) override {
        return static_cast<std::size_t>(r.epoch) < n;
      }
    } stop(trial.curve.size() + (trial.status == store::TrialStatus::failed ? 1 : 0));
    std::vector<nn::EpochResult> native;
    bool failed = false;
    try {
      native = worker::train_run(run, ds, &stop).curve;
    } catch (const NumericError&) {
      failed = true;
    }
    if (trial.status == store::TrialStatus::failed) {
      out.agree = failed;
      if (!failed) out.detail = "the client reported a failure; the native run trained";
      return out;
    }
    if (failed) {
      out.agree = false;
      out.detail = "the native run diverged";
      return out;
    }
    if (native.size() != trial.curve.size()) {
      out.agree = false;
      out.detail = "the native run has " + std::to_string(native.size()) + " epochs, the client " +
                   std::to_string(trial.curve.size());
      return out;
    }
    for (std::size_t i = 0; i < native.size(); ++i) {
      const auto& a = native[i];
      const auto& b = trial.curve[i];
      auto check = [&](const char* name, std::optional<double> x, std::optional<double> y,
                       bool loss) {
        if (!out.agree || (!x && !y)) return;  // no validation data: neither has a value
        const bool ok = x && y && (loss ? close_rel(*x, *y, 1e-3) : std::fabs(*x - *y) <= 1e-3);
        if (!ok) {
          out.agree = false;
          out.detail = "epoch " + std::to_string(i + 1) + " " + name + ": native " +
                       (x ? json(*x).dump() : "none") + ", client " +
                       (y ? json(*y).dump() : "none");
        }
      };
      check("train_loss", a.train_loss, b.train_loss, true);
      check("val_loss", a.val_loss, b.val_loss, true);
      check("train_acc", a.train_acc, b.train_acc, false);
      check("val_acc", a.val_acc, b.val_acc, false);
    }
    return out;
  }

  // The client's results are not to be trusted: refuse it, reopen its trials.
  void quarantine(const VerifyOutcome& o, std::vector<std::pair<ClientId, GatewayReply>>& out) {
    if (!quarantined_workers.insert(o.job.worker_id).second) return;
    quarantined_keys.insert(o.job.client_key);
    // The event is the record: a restarted gateway refuses the client too.
    store.append_event("worker.quarantined", {{"worker", o.job.worker_id},
                                              {"client", o.job.client_key},
                                              {"trial", o.job.trial_id},
                                              {"reason", o.detail}});
    for (auto& [id, c] : clients)
      if (c.client_key == o.job.client_key || c.worker_id == o.job.worker_id)
        out.emplace_back(id, error_reply({kPolicy, "quarantined",
                                          "quarantined: a result disagreed with a native re-run (" +
                                              o.detail + ")"}));
    for (const auto& e : store.experiments()) {
      store::TrialQuery q;
      q.worker = o.job.worker_id;
      q.limit = 0;
      std::vector<std::string> payloads;
      for (const auto& t : store.trials(e.id, q)) {
        if (t.status != store::TrialStatus::finished && t.status != store::TrialStatus::pruned &&
            t.status != store::TrialStatus::failed)
          continue;
        if (auto attempt = store.reopen_trial(t.id)) {
          experiment::TrialTask task{e.id, t.id, t.index};
          task.attempt_base = *attempt;
          payloads.push_back(experiment::encode_task(task));
        }
      }
      if (payloads.empty()) continue;
      queue.publish_batch(experiment::queue_name(e.id), payloads);
      if (e.status != store::ExperimentStatus::running)
        store.set_status(e.id, store::ExperimentStatus::running);
      running_listed_at = -1;
    }
  }
};

Gateway::Gateway(store::ResultStore& store, queue::TaskQueue& queue, GatewayOptions options)
    : impl_(std::make_unique<Impl>(store, queue, std::move(options))) {
  if (impl_->opt.join_token.empty()) throw std::invalid_argument("gateway: a join token is needed");
  if (!(impl_->opt.verify_fraction >= 0 && impl_->opt.verify_fraction <= 1))
    throw std::invalid_argument("verify-fraction: must be in [0, 1]");
  impl_->scan_core();
  // Quarantines outlive the process: they are rebuilt from the store.
  for (const auto& e : store.events_of_type("worker.quarantined")) {
    if (e.data.contains("client") && e.data["client"].is_string())
      impl_->quarantined_keys.insert(e.data["client"].get<std::string>());
    if (e.data.contains("worker") && e.data["worker"].is_string())
      impl_->quarantined_workers.insert(e.data["worker"].get<std::string>());
  }
}

Gateway::~Gateway() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->quit = true;
  }
  impl_->cv.notify_all();
  if (impl_->verifier.joinable()) impl_->verifier.join();
  for (auto& b : impl_->builders) b.join();  // a shard still being built
}

Gateway::ClientId Gateway::open(std::string remote_address) {
  const ClientId id = impl_->next_id++;
  impl_->clients[id].remote = std::move(remote_address);
  return id;
}

GatewayReply Gateway::on_text(ClientId id, std::string_view frame) {
  auto it = impl_->clients.find(id);
  if (it == impl_->clients.end()) return {};
  Client& c = it->second;
  try {
    if (frame.size() > impl_->opt.max_text_bytes)
      violate("too_big",
              "frame too big: text frames are limited to " +
                  std::to_string(impl_->opt.max_text_bytes) + " bytes",
              kTooBig);
    json msg;
    try {
      msg = json::parse(frame);
    } catch (const json::parse_error& e) {
      violate("bad_json", "malformed JSON at byte " + std::to_string(e.byte));
    } catch (const json::out_of_range& e) {  // 1e999: a number JSON cannot hold
      violate("non_finite", std::string("non-finite result: ") + e.what());
    }
    if (!msg.is_object()) violate("bad_json", "a text frame must be a JSON object");
    auto v = msg.find("v");
    if (v == msg.end() || !v->is_number_integer())
      violate("bad_version", "missing 'v': this server speaks protocol v1", kProtocolError);
    if (*v != kVersion)
      violate("bad_version",
              "unsupported protocol version " + v->dump() + "; this server speaks v1",
              kProtocolError);
    const std::string type = text(msg, "message", "type", 32);
    if (type == "hello") return impl_->hello(c, msg);
    if (!c.greeted) violate("bad_message", type + ": the first message must be hello");
    if (type == "request") return impl_->request(c);
    if (type == "progress") return impl_->progress(c, msg);
    if (type == "result") return impl_->result(c, msg);
    if (type == "heartbeat") return impl_->heartbeat(c, msg);
    violate("bad_message", "unknown message type '" + type.substr(0, 32) + "'");
  } catch (const Violation& v) {
    if (v.kind == "non_finite") impl_->release(c, "non-finite result");
    return error_reply(v);
  } catch (const std::exception& e) {
    return error_reply({1011, "internal", std::string("internal error: ") + e.what()});
  }
}

GatewayReply Gateway::on_binary(ClientId id, std::string_view frame) {
  auto it = impl_->clients.find(id);
  if (it == impl_->clients.end()) return {};
  Client& c = it->second;
  try {
    if (frame.size() > impl_->opt.max_binary_bytes)
      violate("too_big",
              "frame too big: binary frames are limited to " +
                  std::to_string(impl_->opt.max_binary_bytes) + " bytes",
              kTooBig);
    if (!c.greeted) violate("bad_message", "binary frame: the first message must be hello");
    return impl_->weights(c, frame);
  } catch (const Violation& v) {
    if (v.kind == "non_finite") impl_->release(c, "non-finite result");
    return error_reply(v);
  } catch (const std::exception& e) {
    return error_reply({1011, "internal", std::string("internal error: ") + e.what()});
  }
}

void Gateway::close(ClientId id) {
  auto it = impl_->clients.find(id);
  if (it == impl_->clients.end()) return;
  Client& c = it->second;
  impl_->release(c, "connection closed");
  if (c.greeted) {
    try {
      impl_->store.mark_worker_gone(c.worker_id);
      impl_->store.append_event("worker.left", {{"worker", c.worker_id}});
    } catch (const std::exception&) {
    }
  }
  impl_->clients.erase(it);
}

std::vector<std::pair<Gateway::ClientId, GatewayReply>> Gateway::poll() {
  std::vector<VerifyOutcome> done;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    done.swap(impl_->outcomes);
  }
  std::vector<std::pair<ClientId, GatewayReply>> out;
  for (const auto& o : done)
    if (!o.agree) impl_->quarantine(o, out);
  return out;
}

std::optional<GatewayAsset> Gateway::asset(std::string_view path) {
  if (path.rfind("/core/", 0) == 0) {
    impl_->scan_core();
    auto it = impl_->core_assets.find(std::string(path));
    if (it == impl_->core_assets.end()) return std::nullopt;
    return it->second;
  }
  constexpr std::string_view kShards = "/shards/", kExt = ".safetensors";
  if (path.rfind(kShards, 0) == 0 && path.size() > kShards.size() + kExt.size() &&
      path.substr(path.size() - kExt.size()) == kExt) {
    std::string sha(path.substr(kShards.size(), path.size() - kShards.size() - kExt.size()));
    auto it = impl_->shard_bytes.find(sha);
    if (it == impl_->shard_bytes.end()) return std::nullopt;
    return GatewayAsset{"application/octet-stream", it->second};
  }
  return std::nullopt;
}

nlohmann::json Gateway::core_urls() const {
  return impl_->core_urls();
}

std::size_t Gateway::clients() const {
  return impl_->clients.size();
}

std::size_t Gateway::verifications_pending() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->jobs.size() + impl_->busy + impl_->outcomes.size();
}

}  // namespace dnnlab::server
