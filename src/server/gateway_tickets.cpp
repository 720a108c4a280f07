// Tickets from queue leases, and giving them back (gateway_tickets.hpp).
#include "server/gateway_tickets.hpp"

#include "db/task_codec.hpp"
#include "experiment/coordinator.hpp"
#include "nn/model.hpp"
#include "nn/registry.hpp"
#include "server/gateway_wire.hpp"

namespace dnnlab::server {

using nlohmann::json;

namespace {

// `optimizer` or `schedule`: the type and every attribute of the registry's
// rows that applies to it, as src/wasm/spec_json.cpp reads them.
template <class S>
json section_json(const nn::SectionInfo<S>& sec, const S& s) {
  json j{{"type", s.type}};
  for (const nn::SectionAttr<S>& row : sec.attrs) {
    if (!nn::applies_to(row.types, s.type)) continue;
    const std::string key(row.info.name);
    const double v = row.get(s);
    if (row.info.kind == nn::AttrKind::kBool)
      j[key] = v != 0;
    else if (row.info.kind == nn::AttrKind::kInt)
      j[key] = static_cast<std::int64_t>(v);
    else
      j[key] = static_cast<float>(v);
  }
  return j;
}

}  // namespace

// The ticket's spec, in the format src/wasm/spec_json.cpp reads.
json core_spec_json(const nn::RunSpec& spec, const std::vector<std::int64_t>& input, int classes) {
  json layers = json::array();
  for (const auto& l : spec.model.layers) {
    json j{{"type", l.type}};
    if (!l.name.empty()) j["name"] = l.name;
    if (!l.inputs.empty()) j["inputs"] = l.inputs;
    // Every attribute the registry describes, as src/wasm/spec_json.cpp reads it.
    if (const nn::LayerInfo* info = nn::find_layer(l.type))
      for (const nn::AttrInfo& a : info->attrs) {
        const std::string key(a.name);
        if (a.kind == nn::AttrKind::kEnum) {
          if (!nn::is_default(a, l)) j[key] = l.attrs.str(key);
        } else if (a.kind == nn::AttrKind::kBool) {
          j[key] = l.attrs.get(key, a.def) != 0;
        } else if (a.kind == nn::AttrKind::kInt) {
          j[key] = static_cast<std::int64_t>(l.attrs.get(key, a.def));
        } else {
          j[key] = l.attrs.get(key, a.def);
        }
      }
    layers.push_back(std::move(j));
  }
  const auto& t = spec.train;
  json opt = section_json(nn::optimizer_section(), t.optimizer);
  json sched = section_json(nn::schedule_section(), t.schedule);
  json out{{"input", spec.model.input.empty() ? input : spec.model.input},
           {"classes", classes},
           {"init", spec.model.init},
           {"loss", spec.model.loss},
           {"optimizer", std::move(opt)},
           {"schedule", std::move(sched)},
           {"batch_size", t.batch_size},
           {"seed", std::to_string(t.seed)},  // as text: JSON.parse rounds above 2^53
           {"epochs", t.epochs}};
  // Named parts as src/wasm/spec_json.cpp reads them: [{name, layers}] in order.
  if (spec.model.parts.empty()) {
    out["layers"] = std::move(layers);
  } else {
    json parts = json::array();
    for (const nn::PartSpec& p : spec.model.parts) {
      json pl = json::array();
      for (std::size_t i = p.begin; i < p.end; ++i) pl.push_back(std::move(layers[i]));
      parts.push_back({{"name", p.name}, {"layers", std::move(pl)}});
    }
    out["parts"] = std::move(parts);
  }
  return out;
}

ExperimentCache& TicketDesk::experiment(std::int64_t id) {
  auto it = experiments_.find(id);
  if (it != experiments_.end()) return it->second;
  auto e = store_.experiment(id);
  if (!e) throw std::invalid_argument("experiment " + std::to_string(id) + " does not exist");
  ExperimentCache c;
  c.sweep = std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(e->spec_text, e->spec_path));
  c.scheduler = std::make_unique<experiment::SchedulerFeed>(*c.sweep, id);
  // (One whose trials never started published nothing.)
  store::TrialQuery started;
  started.sort_by = "attempt";
  started.descending = true;
  started.limit = 1;
  for (const auto& other : store_.experiments())
    if (!c.replayed && other.id != id && other.spec_hash == e->spec_hash) {
      auto ts = store_.trials(other.id, started);
      c.replayed = !ts.empty() && ts[0].attempt > 0;
    }
  return experiments_.emplace(id, std::move(c)).first->second;
}

// Whether the shard of the experiment's (first trial's) data is ready;
// starts building it if not. Nothing to build yet, or a build that failed
// (its trials then fail with the error when leased), counts as ready.
bool TicketDesk::data_ready(std::int64_t exp_id) {
  try {
    ExperimentCache& ec = experiment(exp_id);
    if (!ec.data) {
      store::TrialQuery first;
      first.limit = 1;
      first.sort_by = "index";
      auto ts = store_.trials(exp_id, first);
      if (ts.empty()) return true;
      ec.data =
          ec.sweep->materialize({ts[0].index, json::parse(ts[0].config_json), ts[0].seed}).data;
    }
    return shards_.if_ready(*ec.data) != nullptr;
  } catch (const std::exception&) {
    return true;
  }
}

const std::vector<std::int64_t>& TicketDesk::running_experiments() {
  const double now = wire::unix_now();
  if (now - running_listed_at_ > 1.0) {
    running_.clear();
    for (const auto& e : store_.experiments())
      if (e.status == store::ExperimentStatus::running) running_.push_back(e.id);
    running_listed_at_ = now;
  }
  return running_;
}

std::optional<std::pair<Ticket, json>> TicketDesk::next(const TicketHolder& holder,
                                                        bool& preparing) {
  for (std::int64_t exp : running_experiments()) {
    if (!data_ready(exp)) {
      preparing = true;
      continue;
    }
    for (int tries = 0; tries < 16; ++tries) {
      auto lease = queue_.lease(db::queue_name(exp), holder.worker_id, opt_.lease_seconds);
      if (!lease) break;
      if (auto t = issue(holder, exp, *lease)) return t;
    }
  }
  return std::nullopt;
}

// Turns a lease into a ticket, or ends it (duplicate, bad trial) and returns nullopt.
std::optional<std::pair<Ticket, json>> TicketDesk::issue(const TicketHolder& holder,
                                                         std::int64_t exp_id,
                                                         queue::TaskLease& lease) {
  db::TrialTask task;
  try {
    task = db::decode_task(lease.payload);
  } catch (const db::ProtocolError& e) {
    queue_.nack(lease, false, e.what());
    return std::nullopt;
  }
  const int attempt = task.attempt(lease.attempt);
  auto trial = store_.trial(task.trial_id);
  if (!trial || (trial->status != store::TrialStatus::queued &&
                 trial->status != store::TrialStatus::running)) {
    queue_.ack(lease);
    return std::nullopt;
  }
  nn::RunSpec run;
  std::shared_ptr<const Shard> sh;
  std::int64_t num_params = 0;
  try {
    ExperimentCache& ec = experiment(task.experiment_id);
    run = ec.sweep->materialize({trial->index, json::parse(trial->config_json), trial->seed});
    sh = shards_.get(run.data);
    nn::Shape in;
    for (std::int64_t d : sh->sample_shape) in.d[in.rank++] = d;
    num_params =
        nn::Model::build(run.model, nn::model_input(run.model, in), sh->classes, run.train.seed)
            .num_params();
  } catch (const std::exception& e) {
    if (store_.mark_running(trial->id, attempt, holder.worker_id))
      store_.finish_trial(trial->id, attempt, store::TrialStatus::failed, {}, e.what());
    queue_.ack(lease);
    return std::nullopt;
  }
  json prov = sh->provenance;
  prov["kernel_target"] = holder.kernels;
  prov.erase("kernel_targets");  // the server's native tables, not the browser's
  if (holder.fma) prov["relaxed_madd_fused"] = *holder.fma;  // the relaxed build's rounding
  prov["worker_kind"] = "browser";
  if (!store_.mark_running(trial->id, attempt, holder.worker_id, prov)) {
    queue_.ack(lease);
    return std::nullopt;
  }
  // A browser's epochs never move ASHA/median before a native re-run agreed
  // with them, whoever sent them (DESIGN.md, "Trust").
  store_.set_provisional(trial->id, attempt, true);
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
  t.fresh = attempt == 1 && !experiment(exp_id).replayed;
  json j{{"type", "ticket"},
         {"ticket", t.id},
         {"trial",
          {{"id", t.trial_id}, {"experiment", exp_id}, {"index", t.index}, {"attempt", attempt}}},
         {"spec", core_spec_json(run, sh->sample_shape, sh->classes)},
         {"data",
          {{"url", "/shards/" + sh->sha256 + ".safetensors"},
           {"sha256", sh->sha256},
           {"bytes", sh->bytes->size()}}},
         {"lease_seconds", opt_.lease_seconds}};
  return std::pair{std::move(t), std::move(j)};
}

bool TicketDesk::would_rank(std::int64_t experiment_id, std::int64_t trial_id,
                            const store::TrialMetrics& m, int k) {
  if (k <= 0) return false;
  const sweep::SearchSpec& search = experiment(experiment_id).sweep->search;
  const std::optional<double> v = store::metric(m, search.metric);
  if (!v) return false;  // nothing to rank it by
  const bool maximize = search.maximize();
  store::TrialQuery q;
  q.sort_by = search.metric;
  q.descending = maximize;
  q.limit = k + 32;
  int better = 0;  // counted trials at least as good
  for (;; q.offset += q.limit) {
    auto page = store_.trials(experiment_id, q);
    for (const auto& o : page) {
      if (o.provisional || o.id == trial_id ||
          (o.status != store::TrialStatus::finished && o.status != store::TrialStatus::pruned))
        continue;
      const std::optional<double> ov = store::metric(o.metrics, search.metric);
      if (!ov || !(maximize ? *ov >= *v : *ov <= *v)) return better < k;
      if (++better >= k) return false;
    }
    if (static_cast<std::int64_t>(page.size()) < q.limit) return true;
  }
}

void TicketDesk::give_back(const Ticket& t) {
  try {
    queue_.write_together([&] {
      if (!queue_.ack(t.lease)) return;  // lost: the queue has redelivered it
      store_.release_trial(t.trial_id, t.attempt);
      // No values carried: the worker that leases it reads the trial.
      db::TrialTask task{t.experiment_id, t.trial_id, t.index, t.attempt, {}, 0};
      queue_.publish(db::queue_name(t.experiment_id), db::encode_task(task));
    });
  } catch (const std::exception&) {
  }
}

void TicketDesk::fail_for_good(std::int64_t trial_id, const std::string& worker_id,
                               const std::string& error) {
  auto trial = store_.trial(trial_id);
  if (!trial || trial->status != store::TrialStatus::queued) return;  // running again, or ended
  if (store_.mark_running(trial_id, trial->attempt + 1, worker_id))
    store_.finish_trial(trial_id, trial->attempt + 1, store::TrialStatus::failed, {}, error);
}

void TicketDesk::reopen_trials_of(const std::vector<std::string>& worker_ids) {
  for (const auto& e : store_.experiments()) {
    std::vector<std::string> payloads;
    for (const auto& w : worker_ids) {
      store::TrialQuery q;
      q.worker = w;
      q.limit = 0;
      for (const auto& t : store_.trials(e.id, q)) {
        if (t.status != store::TrialStatus::finished && t.status != store::TrialStatus::pruned &&
            t.status != store::TrialStatus::failed)
          continue;
        if (auto attempt = store_.reopen_trial(t.id)) {
          db::TrialTask task{e.id, t.id, t.index, *attempt, t.config_json, t.seed};
          payloads.push_back(db::encode_task(task));
        }
      }
    }
    if (payloads.empty()) continue;
    queue_.publish_batch(db::queue_name(e.id), payloads);
    if (e.status != store::ExperimentStatus::running)
      store_.set_status(e.id, store::ExperimentStatus::running);
    running_listed_at_ = -1;
  }
}

}  // namespace dnnlab::server
