// /api/stats and /metrics (Prometheus text): trial counts over all
// experiments, throughput, queue depth, workers, request metrics.
#include <chrono>
#include <sstream>

#include "experiment/build_provenance.hpp"
#include "server/api_internal.hpp"

namespace dnnlab::server {

using namespace api_detail;
using nlohmann::json;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

ApiResponse Api::metrics(const Call& c) {
  ApiResponse resp;
  resp.content_type = "text/plain; version=0.0.4; charset=utf-8";
  resp.body = prometheus(c.store);
  return resp;
}

ApiResponse Api::get_stats(const Call& c) {
  return json_response(200, stats(c.store));
}

json Api::stats(store::ResultStore& store) {
  store::TrialCounts all;
  std::int64_t running = 0;
  for (const auto& e : store.experiments()) {
    add(all, counts(store, e.id));
    running += e.status == store::ExperimentStatus::running;
  }
  std::int64_t active = 0;
  for (const auto& w : store.workers()) active += !w.gone;
  return {{"time", now_seconds()},
          {"trials_per_second", runner_.trials_per_second()},
          {"queue_depth", runner_.queue_depth()},
          {"counts", counts_json(all)},
          {"experiments_running", running},
          {"workers_active", active},
          {"build", experiment::build_provenance()}};
}

json Api::throughput(store::ResultStore& store) {
  return stats(store);
}

bool Api::anything_running(store::ResultStore& store) {
  for (const auto& e : store.experiments())
    if (e.status == store::ExperimentStatus::running) return true;
  return false;
}

std::string Api::prometheus(store::ResultStore& store) {
  std::ostringstream o;
  o.precision(9);
  store::TrialCounts all;
  for (const auto& e : store.experiments()) add(all, counts(store, e.id));
  o << "# HELP dnnlab_trials Trials by state, over all experiments.\n"
       "# TYPE dnnlab_trials gauge\n";
  const std::pair<const char*, std::int64_t> states[] = {
      {"queued", all.queued}, {"running", all.running}, {"finished", all.finished},
      {"pruned", all.pruned}, {"failed", all.failed},   {"cancelled", all.cancelled}};
  for (const auto& [s, n] : states) o << "dnnlab_trials{state=\"" << s << "\"} " << n << "\n";
  o << "# HELP dnnlab_trials_per_second Trials ended per second, over the last 10 s.\n"
       "# TYPE dnnlab_trials_per_second gauge\n"
       "dnnlab_trials_per_second "
    << runner_.trials_per_second() << "\n";
  o << "# HELP dnnlab_queue_depth Tasks waiting in the queues of running experiments.\n"
       "# TYPE dnnlab_queue_depth gauge\n"
       "dnnlab_queue_depth "
    << runner_.queue_depth() << "\n";
  std::int64_t native = 0, browser = 0;
  for (const auto& w : store.workers())
    if (!w.gone) (w.kind == store::WorkerKind::native ? native : browser) += 1;
  o << "# HELP dnnlab_workers Workers that have not left, by kind.\n"
       "# TYPE dnnlab_workers gauge\n"
       "dnnlab_workers{kind=\"native\"} "
    << native << "\ndnnlab_workers{kind=\"browser\"} " << browser << "\n";
  o << metrics_.render();
  return o.str();
}

}  // namespace dnnlab::server
