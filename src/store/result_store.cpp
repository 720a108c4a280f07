// Names of the store's enums, the spec hash, and open_result_store(): the one
// place that maps a URL to a ResultStore backend.
#include "store/result_store.hpp"

#include <array>
#include <filesystem>
#include <utility>

#include "queue/backend_url.hpp"
#include "queue/sqlite_task_queue.hpp"
#include "store/sha256.hpp"
#include "store/sqlite_result_store.hpp"

namespace dnnlab::store {
namespace {

template <typename Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

constexpr NameTable<ExperimentStatus, 4> kExperimentStatuses{{
    {ExperimentStatus::running, "running"},
    {ExperimentStatus::finished, "finished"},
    {ExperimentStatus::cancelled, "cancelled"},
    {ExperimentStatus::failed, "failed"},
}};
constexpr NameTable<TrialStatus, 6> kTrialStatuses{{
    {TrialStatus::queued, "queued"},
    {TrialStatus::running, "running"},
    {TrialStatus::finished, "finished"},
    {TrialStatus::pruned, "pruned"},
    {TrialStatus::failed, "failed"},
    {TrialStatus::cancelled, "cancelled"},
}};
constexpr NameTable<WorkerKind, 2> kWorkerKinds{{
    {WorkerKind::native, "native"},
    {WorkerKind::browser, "browser"},
}};

template <typename Enum, std::size_t N>
std::string_view name_of(const NameTable<Enum, N>& table, Enum value) {
  for (const auto& [e, name] : table)
    if (e == value) return name;
  return "?";
}

template <typename Enum, std::size_t N>
Enum parse(const NameTable<Enum, N>& table, std::string_view text, std::string_view field) {
  for (const auto& [e, name] : table)
    if (name == text) return e;
  std::string allowed;
  for (const auto& [e, name] : table) allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  throw std::invalid_argument(std::string(field) + ": unknown value '" + std::string(text) +
                              "' (allowed: " + allowed + ")");
}

}  // namespace

std::string_view to_string(ExperimentStatus s) {
  return name_of(kExperimentStatuses, s);
}
std::string_view to_string(TrialStatus s) {
  return name_of(kTrialStatuses, s);
}
std::string_view to_string(WorkerKind k) {
  return name_of(kWorkerKinds, k);
}

ExperimentStatus parse_experiment_status(std::string_view s, std::string_view field) {
  return parse(kExperimentStatuses, s, field);
}
TrialStatus parse_trial_status(std::string_view s, std::string_view field) {
  return parse(kTrialStatuses, s, field);
}
WorkerKind parse_worker_kind(std::string_view s, std::string_view field) {
  return parse(kWorkerKinds, s, field);
}

std::string spec_hash(std::string_view spec_text) {
  return sha256_hex(spec_text);
}

std::unique_ptr<ResultStore> open_result_store(std::string_view url) {
  const std::string scheme = backend_url::scheme(url);
  const std::string shown = backend_url::redact(url);
  if (scheme == "sqlite") {
    std::string path = backend_url::sqlite_path(url);
    if (path.empty())
      throw std::invalid_argument("result store URL '" + shown +
                                  "' has no file path (sqlite:PATH)");
    return std::make_unique<SqliteResultStore>(path);
  }
  if (scheme == "postgres" || scheme == "postgresql")
    throw BackendNotBuiltError("result store URL '" + shown +
                               "': the PostgreSQL backend is not built into this dnnlab yet; "
                               "use sqlite:PATH");
  throw std::invalid_argument("result store URL '" + shown +
                              "' is not supported: expected sqlite:PATH or postgres://HOST/DB");
}

std::unique_ptr<ResultStore> open_result_store(std::string_view url, queue::TaskQueue& queue) {
  if (auto* q = dynamic_cast<queue::SqliteTaskQueue*>(&queue);
      q && backend_url::scheme(url) == "sqlite") {
    std::error_code ec1, ec2;
    const auto mine = std::filesystem::weakly_canonical(backend_url::sqlite_path(url), ec1);
    const auto its = std::filesystem::weakly_canonical(q->database()->path(), ec2);
    if (!ec1 && !ec2 && mine == its) return std::make_unique<SqliteResultStore>(q->database());
  }
  return open_result_store(url);
}

std::optional<double> metric(const TrialMetrics& m, std::string_view name) {
  if (name == "val_acc") return m.val_acc;
  if (name == "val_loss") return m.val_loss;
  if (name == "train_acc") return m.train_acc;
  if (name == "train_loss") return m.train_loss;
  if (name == "test_acc") return m.test_acc;
  return std::nullopt;
}

std::optional<double> metric(const EpochMetrics& m, std::string_view name) {
  if (name == "val_acc") return m.val_acc;
  if (name == "val_loss") return m.val_loss;
  if (name == "train_acc") return m.train_acc;
  if (name == "train_loss") return m.train_loss;
  return std::nullopt;
}

}  // namespace dnnlab::store
