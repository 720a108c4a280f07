// Names of the store's enums, the spec hash, and open_result_store(): the one
// place that maps a URL to a ResultStore backend.
#include "store/result_store.hpp"

#include <array>
#include <utility>

#include "db/backend_url.hpp"
#include "db/connections.hpp"
#include "db/sqlite_db.hpp"
#include "store/sha256.hpp"
#ifdef DNNLAB_WITH_POSTGRES
#include "store/pg_result_store.hpp"
#endif
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

std::unique_ptr<ResultStore> open_result_store(std::string_view url, db::Connections* shared,
                                               const StoreOptions& options) {
  const std::string scheme = backend_url::scheme(url);
  const std::string shown = backend_url::redact(url);
  (void)options;  // only a server backend has a connection to lose
  if (scheme == "sqlite") {
    std::string path = backend_url::sqlite_path(url);
    if (path.empty())
      throw std::invalid_argument("result store URL '" + shown +
                                  "' has no file path (sqlite:PATH)");
    const double busy = sqlite::DatabaseOptions{}.busy_timeout_seconds;
    return std::make_unique<SqliteResultStore>(shared ? shared->sqlite(path, busy)
                                                      : std::make_shared<sqlite::Database>(path));
  }
  if (scheme == "postgres" || scheme == "postgresql") {
#ifdef DNNLAB_WITH_POSTGRES
    // Its own connection: nothing else speaks to this server in-process, and
    // a queue on another backend cannot share a transaction with it anyway.
    return std::make_unique<PgResultStore>(std::string(url), options);
#else
    throw BackendNotBuiltError("result store URL '" + shown +
                               "': the PostgreSQL backend is not built into this dnnlab "
                               "(configure with -DDNNLAB_WITH_POSTGRES=ON); use sqlite:PATH");
#endif
  }
  throw std::invalid_argument("result store URL '" + shown +
                              "' is not supported: expected sqlite:PATH or postgres://HOST/DB");
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
