// Tickets from queue leases, and giving them back (gateway_tickets.hpp).
#include "server/gateway_tickets.hpp"

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

bool TicketDesk::replayed(std::int64_t id) {
  auto it = replayed_.find(id);
  if (it != replayed_.end()) return it->second;
  const std::string& hash = catalogue_.get(id).spec_hash;
  // (One whose trials never started published nothing.)
  store::TrialQuery started;
  started.sort_by = "attempt";
  started.descending = true;
  started.limit = 1;
  bool seen = false;
  for (const auto& other : store_.experiments())
    if (!seen && other.id != id && other.spec_hash == hash) {
      auto ts = store_.trials(other.id, started);
      seen = !ts.empty() && ts[0].attempt > 0;
    }
  return replayed_[id] = seen;
}

// Whether the shard of the experiment's (first trial's) data is ready;
// starts building it if not. Nothing to build yet, or a build that failed
// (its trials then fail with the error when leased), counts as ready.
bool TicketDesk::data_ready(std::int64_t exp_id) {
  try {
    const std::optional<nn::DataSpec>& data = catalogue_.first_data(exp_id);
    return !data || shards_.if_ready(*data) != nullptr;
  } catch (const std::exception&) {
    return true;
  }
}

std::optional<std::pair<Ticket, json>> TicketDesk::next(const TicketHolder& holder,
                                                        bool& preparing) {
  for (std::int64_t exp : catalogue_.running()) {
    if (!data_ready(exp)) {
      preparing = true;
      continue;
    }
    for (int tries = 0; tries < 16; ++tries) {
      experiment::TrialLease l;
      experiment::LeaseService::Got got;
      try {
        got = svc_.lease(exp, holder.worker_id, opt_.lease_seconds, l);
      } catch (const std::invalid_argument&) {
        break;  // deleted since the list was read
      }
      if (got == experiment::LeaseService::Got::kNone) break;
      svc_.commit();  // a trial the service failed (its spec cannot be resolved)
      if (got == experiment::LeaseService::Got::kSkipped) continue;
      if (auto t = issue(holder, l)) return t;
    }
  }
  return std::nullopt;
}

// Turns a lease into a ticket, or ends it (a start refused, a trial that
// cannot run) and returns nullopt.
std::optional<std::pair<Ticket, json>> TicketDesk::issue(const TicketHolder& holder,
                                                         experiment::TrialLease& l) {
  const nn::RunSpec& run = l.run;
  std::shared_ptr<const Shard> sh;
  std::int64_t num_params = 0;
  try {
    sh = shards_.get(run.data);
    nn::Shape in;
    for (std::int64_t d : sh->sample_shape) in.d[in.rank++] = d;
    num_params = nn::Model::count_params(run.model, nn::model_input(run.model, in), sh->classes);
  } catch (const std::exception& e) {
    svc_.fail(std::move(l), e.what());
    svc_.commit();
    return std::nullopt;
  }
  json prov = sh->provenance;
  prov["kernel_target"] = holder.kernels;
  prov.erase("kernel_targets");  // the server's native tables, not the browser's
  if (holder.fma) prov["relaxed_madd_fused"] = *holder.fma;  // the relaxed build's rounding
  prov["worker_kind"] = "browser";
  if (!svc_.start(l, prov)) return std::nullopt;
  // A browser's epochs never move ASHA/median before a native re-run agreed
  // with them, whoever sent them (DESIGN.md, "Trust").
  store_.set_provisional(l.trial.id, l.attempt, true);
  const std::int64_t exp_id = l.trial.experiment_id;
  Ticket t;
  t.id = "t-" + std::to_string(l.trial.id) + "-" + std::to_string(l.attempt);
  t.attempt = l.attempt;
  t.trial_id = l.trial.id;
  t.experiment_id = exp_id;
  t.index = l.trial.index;
  t.num_params = num_params;
  t.shard = sh;
  t.epochs = run.train.epochs;
  t.has_val = run.data.validation > 0;
  t.fresh = l.attempt == 1 && !replayed(exp_id);
  json j{{"type", "ticket"},
         {"ticket", t.id},
         {"trial",
          {{"id", t.trial_id}, {"experiment", exp_id}, {"index", t.index}, {"attempt", t.attempt}}},
         {"spec", core_spec_json(run, sh->sample_shape, sh->classes)},
         {"data",
          {{"url", "/shards/" + sh->sha256 + ".safetensors"},
           {"sha256", sh->sha256},
           {"bytes", sh->bytes->size()}}},
         {"lease_seconds", opt_.lease_seconds}};
  t.work = std::move(l);
  return std::pair{std::move(t), std::move(j)};
}

bool TicketDesk::would_rank(std::int64_t experiment_id, std::int64_t trial_id,
                            const store::TrialMetrics& m, int k) {
  if (k <= 0) return false;
  const sweep::SearchSpec& search = catalogue_.get(experiment_id).sweep->search;
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

bool TicketDesk::finish(Ticket& t, store::TrialStatus status, const store::TrialMetrics& m) {
  svc_.finish(std::move(t.work), status, m, {}, true);
  const std::vector<bool> counted = svc_.commit();
  return !counted.empty() && counted.back();
}

void TicketDesk::give_back(Ticket& t) {
  try {
    svc_.give_back(t.work);
  } catch (const std::exception&) {
    // The store or broker is away: the lease expires and the queue redelivers it.
  }
}

void TicketDesk::fail_for_good(std::int64_t trial_id, const std::string& worker_id,
                               const std::string& error) {
  svc_.fail_queued(trial_id, worker_id, error);
}

void TicketDesk::reopen_trials_of(const std::vector<std::string>& worker_ids) {
  svc_.reopen_trials_of(worker_ids);
}

}  // namespace dnnlab::server
