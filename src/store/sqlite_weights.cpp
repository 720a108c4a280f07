// SqliteResultStore's weights: table trial_weights (schema 9) and the pin
// column of trials. Which trials keep weights is decided above the store
// (experiment/weights_retention.hpp); these calls only keep, list and drop.
#include "store/sha256.hpp"
#include "store/sqlite_result_store.hpp"
#include "store/store_checks.hpp"

namespace dnnlab::store {

void SqliteResultStore::put_weights(std::int64_t trial_id, std::string_view safetensors) {
  checks::check_id(trial_id, "trial_id");
  checks::check_weights(safetensors);
  const std::string sha = sha256_hex(safetensors);
  sqlite::WriteTransaction tx(*db_);
  auto s = db_->prepare(
      "INSERT INTO trial_weights (trial_id, experiment_id, size, sha256, created_at, bytes) "
      "SELECT id, experiment_id, ?2, ?3, ?4, ?5 FROM trials WHERE id = ?1 "
      "ON CONFLICT (trial_id) DO UPDATE SET size = excluded.size, sha256 = excluded.sha256, "
      "created_at = excluded.created_at, bytes = excluded.bytes");
  s.bind_int(1, trial_id).bind_int(2, static_cast<std::int64_t>(safetensors.size()));
  s.bind_text(3, sha).bind_double(4, sqlite::unix_now()).bind_blob(5, safetensors);
  s.run();
  if (db_->changes() == 0) require_trial(trial_id);
  tx.commit();
}

std::optional<WeightsRecord> SqliteResultStore::weights(std::int64_t trial_id) {
  checks::check_id(trial_id, "trial_id");
  auto s = db_->prepare(
      "SELECT w.trial_id, w.experiment_id, w.size, w.sha256, w.created_at, t.pinned, w.bytes "
      "FROM trial_weights w JOIN trials t ON t.id = w.trial_id WHERE w.trial_id = ?1");
  s.bind_int(1, trial_id);
  if (!s.step()) return std::nullopt;
  WeightsRecord w;
  w.trial_id = s.column_int(0);
  w.experiment_id = s.column_int(1);
  w.size = s.column_int(2);
  w.sha256 = s.column_text(3);
  w.created_at = s.column_double(4);
  w.pinned = s.column_int(5) != 0;
  w.bytes = s.column_text(6);
  return w;
}

std::vector<WeightsRecord> SqliteResultStore::weights_of(std::int64_t experiment_id) {
  checks::check_id(experiment_id, "experiment_id");
  auto s = db_->prepare(
      "SELECT w.trial_id, w.experiment_id, w.size, w.sha256, w.created_at, t.pinned, "
      "t.train_loss, t.train_acc, t.val_loss, t.val_acc, t.test_acc, t.epochs_done, t.seconds "
      "FROM trial_weights w JOIN trials t ON t.id = w.trial_id "
      "WHERE w.experiment_id = ?1 ORDER BY w.trial_id");
  s.bind_int(1, experiment_id);
  std::vector<WeightsRecord> out;
  while (s.step()) {
    WeightsRecord& w = out.emplace_back();
    w.trial_id = s.column_int(0);
    w.experiment_id = s.column_int(1);
    w.size = s.column_int(2);
    w.sha256 = s.column_text(3);
    w.created_at = s.column_double(4);
    w.pinned = s.column_int(5) != 0;
    w.metrics.train_loss = s.column_opt_double(6);
    w.metrics.train_acc = s.column_opt_double(7);
    w.metrics.val_loss = s.column_opt_double(8);
    w.metrics.val_acc = s.column_opt_double(9);
    w.metrics.test_acc = s.column_opt_double(10);
    w.metrics.epochs_done = s.column_int(11);
    w.metrics.seconds = s.column_double(12);
  }
  return out;
}

bool SqliteResultStore::delete_weights(std::int64_t trial_id) {
  checks::check_id(trial_id, "trial_id");
  auto s = db_->prepare("DELETE FROM trial_weights WHERE trial_id = ?1");
  s.bind_int(1, trial_id);
  s.run();
  return db_->changes() > 0;
}

void SqliteResultStore::set_pinned(std::int64_t trial_id, bool pinned) {
  checks::check_id(trial_id, "trial_id");
  auto s = db_->prepare("UPDATE trials SET pinned = ?2 WHERE id = ?1");
  s.bind_int(1, trial_id).bind_int(2, pinned ? 1 : 0);
  s.run();
  if (db_->changes() == 0) require_trial(trial_id);
}

}  // namespace dnnlab::store
