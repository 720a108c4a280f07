// Coordinators (ticked on the server's runner thread), and the throughput figures.
#include "server/experiment_runner.hpp"

#include <iostream>

#include "db/task_codec.hpp"
#include "experiment/coordinator.hpp"

namespace dnnlab::server {

using store::ExperimentStatus;

ExperimentRunner::ExperimentRunner(store::ResultStore& store, queue::TaskQueue& queue,
                                   bool run_coordinators)
    : store_(store), queue_(queue), run_coordinators_(run_coordinators) {}

ExperimentRunner::~ExperimentRunner() = default;

void ExperimentRunner::resume_running() {
  if (!run_coordinators_) return;
  std::lock_guard lock(mu_);
  for (const auto& e : store_.experiments()) {
    if (e.status != ExperimentStatus::running || adopted_.count(e.id) || coordinators_.count(e.id))
      continue;
    try {
      coordinators_[e.id] = std::make_unique<experiment::Coordinator>(store_, queue_, e.id);
    } catch (const std::exception& ex) {
      std::cerr << "dnnlab serve: cannot resume experiment " << e.id << ": " << ex.what() << "\n";
    }
  }
}

std::int64_t ExperimentRunner::submit(const std::string& sweep_text, const std::string& name) {
  std::lock_guard lock(mu_);
  std::int64_t id = experiment::Coordinator::submit(store_, queue_, sweep_text, name,
                                                    experiment::SubmitMode::kNew);
  if (run_coordinators_ && !adopted_.count(id))
    coordinators_[id] = std::make_unique<experiment::Coordinator>(store_, queue_, id);
  return id;
}

std::shared_ptr<sweep::SweepSpec> ExperimentRunner::parse(const std::string& sweep_text,
                                                          const std::string& name) {
  return std::make_shared<sweep::SweepSpec>(sweep::parse_sweep(sweep_text, name));
}

std::int64_t ExperimentRunner::submit_parsed(std::shared_ptr<sweep::SweepSpec> sweep,
                                             const std::string& sweep_text,
                                             const std::string& name) {
  std::lock_guard lock(mu_);
  std::int64_t id = experiment::Coordinator::create(store_, *sweep, sweep_text, name);
  if (run_coordinators_ && !adopted_.count(id))
    coordinators_[id] = std::make_unique<experiment::Coordinator>(
        store_, queue_, id, std::make_unique<sweep::SweepSpec>(std::move(*sweep)), std::string());
  return id;
}

bool ExperimentRunner::cancel(std::int64_t id) {
  std::lock_guard lock(mu_);
  auto e = store_.experiment(id);
  if (!e) return false;
  if (auto it = coordinators_.find(id); it != coordinators_.end()) {
    it->second->cancel();
    forget(id);
    return true;
  }
  queue_.cancel(db::queue_name(id));
  if (e->status == ExperimentStatus::running) {
    store_.cancel_trials(id);
    store_.set_status(id, ExperimentStatus::cancelled);
  }
  return true;
}

void ExperimentRunner::adopt(std::int64_t id) {
  std::lock_guard lock(mu_);
  adopted_.insert(id);
  forget(id);
}

void ExperimentRunner::forget(std::int64_t id) {
  coordinators_.erase(id);
  std::lock_guard lock(planned_mu_);
  planned_.erase(id);
}

void ExperimentRunner::tick() {
  std::lock_guard lock(mu_);
  std::vector<std::int64_t> ended_here;
  for (auto& [id, c] : coordinators_) {
    try {
      experiment::Progress p = c->tick();
      if (p.done) {
        ended_here.push_back(id);
        continue;
      }
      std::lock_guard plock(planned_mu_);
      planned_[id] = p.planned;
    } catch (const std::exception& ex) {
      // One broken experiment must not stop the others (or the server).
      std::cerr << "dnnlab serve: experiment " << id << ": " << ex.what() << "\n";
      ended_here.push_back(id);
    }
  }
  for (std::int64_t id : ended_here) forget(id);
  sample();
}

void ExperimentRunner::sample() {
  auto now = std::chrono::steady_clock::now();
  if (last_sample_ != std::chrono::steady_clock::time_point{} &&
      now - last_sample_ < std::chrono::seconds(1))
    return;
  last_sample_ = now;
  std::int64_t total = 0, depth = 0;
  for (const auto& e : store_.experiments()) {
    total += ended(store_.trial_counts(e.id));
    if (e.status == ExperimentStatus::running) depth += queue_.waiting(db::queue_name(e.id));
  }
  depth_ = depth;
  ended_samples_.emplace_back(now, total);
  while (ended_samples_.size() > 1 && now - ended_samples_.front().first > std::chrono::seconds(10))
    ended_samples_.pop_front();
  const auto& [t0, n0] = ended_samples_.front();
  double dt = std::chrono::duration<double>(now - t0).count();
  rate_ = dt > 0 && total >= n0 ? static_cast<double>(total - n0) / dt : 0.0;
}

std::optional<std::int64_t> ExperimentRunner::planned(std::int64_t id) const {
  // Documented as present only while this server drives the experiment.
  std::lock_guard lock(planned_mu_);
  auto it = planned_.find(id);
  if (it == planned_.end()) return std::nullopt;
  return it->second;
}

}  // namespace dnnlab::server
