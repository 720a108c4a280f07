// PgResultStore's weights: table trial_weights (schema 9) and the pin column
// of trials, as the embedded backend's (sqlite_weights.cpp). Parameters and
// results travel in text form, so the bytes go as hex (decode/encode on the
// server): twice the size on the wire, bounded by kMaxWeightsBytes.
#include <stdexcept>

#include "store/pg_result_store.hpp"
#include "store/sha256.hpp"
#include "store/store_checks.hpp"

namespace dnnlab::store {
namespace {

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = kDigits[b >> 4];
    out[2 * i + 1] = kDigits[b & 15];
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  throw std::runtime_error("trial_weights: the server sent a byte that is not hex");
}

std::string from_hex(const std::string& hex) {
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>(hex_digit(hex[2 * i]) * 16 + hex_digit(hex[2 * i + 1]));
  return out;
}

}  // namespace

void PgResultStore::put_weights(std::int64_t trial_id, std::string_view safetensors) {
  checks::check_id(trial_id, "trial_id");
  checks::check_weights(safetensors);
  const std::string sha = sha256_hex(safetensors);
  const std::string hex = to_hex(safetensors);
  retrying(Retry::always, [&]() -> void {
    pg::Params p;
    p.add(trial_id)
        .add(static_cast<std::int64_t>(safetensors.size()))
        .add(sha)
        .add(checks::unix_now());
    p.add(hex);
    pg::Result r = db_->query(
        "INSERT INTO trial_weights (trial_id, experiment_id, size, sha256, created_at, bytes) "
        "SELECT id, experiment_id, $2, $3, $4, decode($5, 'hex') FROM trials WHERE id = $1 "
        "ON CONFLICT (trial_id) DO UPDATE SET size = excluded.size, sha256 = excluded.sha256, "
        "created_at = excluded.created_at, bytes = excluded.bytes",
        p);
    if (r.affected() == 0) require_trial(trial_id);
  });
}

std::optional<WeightsRecord> PgResultStore::weights(std::int64_t trial_id) {
  return retrying(Retry::always, [&]() -> std::optional<WeightsRecord> {
    checks::check_id(trial_id, "trial_id");
    pg::Params p;
    p.add(trial_id);
    pg::Result r = db_->query(
        "SELECT w.trial_id, w.experiment_id, w.size, w.sha256, w.created_at, t.pinned, "
        "encode(w.bytes, 'hex') FROM trial_weights w JOIN trials t ON t.id = w.trial_id "
        "WHERE w.trial_id = $1",
        p);
    if (r.rows() == 0) return std::nullopt;
    WeightsRecord w;
    w.trial_id = r.integer(0, 0);
    w.experiment_id = r.integer(0, 1);
    w.size = r.integer(0, 2);
    w.sha256 = r.text(0, 3);
    w.created_at = r.real(0, 4);
    w.pinned = r.boolean(0, 5);
    w.bytes = from_hex(r.text(0, 6));
    return w;
  });
}

std::vector<WeightsRecord> PgResultStore::weights_of(std::int64_t experiment_id) {
  return retrying(Retry::always, [&]() -> std::vector<WeightsRecord> {
    checks::check_id(experiment_id, "experiment_id");
    pg::Params p;
    p.add(experiment_id);
    pg::Result r = db_->query(
        "SELECT w.trial_id, w.experiment_id, w.size, w.sha256, w.created_at, t.pinned, "
        "t.train_loss, t.train_acc, t.val_loss, t.val_acc, t.test_acc, t.epochs_done, t.seconds "
        "FROM trial_weights w JOIN trials t ON t.id = w.trial_id "
        "WHERE w.experiment_id = $1 ORDER BY w.trial_id",
        p);
    std::vector<WeightsRecord> out(static_cast<std::size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i) {
      WeightsRecord& w = out[static_cast<std::size_t>(i)];
      w.trial_id = r.integer(i, 0);
      w.experiment_id = r.integer(i, 1);
      w.size = r.integer(i, 2);
      w.sha256 = r.text(i, 3);
      w.created_at = r.real(i, 4);
      w.pinned = r.boolean(i, 5);
      w.metrics.train_loss = r.opt_real(i, 6);
      w.metrics.train_acc = r.opt_real(i, 7);
      w.metrics.val_loss = r.opt_real(i, 8);
      w.metrics.val_acc = r.opt_real(i, 9);
      w.metrics.test_acc = r.opt_real(i, 10);
      w.metrics.epochs_done = r.integer(i, 11);
      w.metrics.seconds = r.real(i, 12);
    }
    return out;
  });
}

bool PgResultStore::delete_weights(std::int64_t trial_id) {
  return retrying(Retry::always, [&]() -> bool {
    checks::check_id(trial_id, "trial_id");
    pg::Params p;
    p.add(trial_id);
    return db_->query("DELETE FROM trial_weights WHERE trial_id = $1", p).affected() > 0;
  });
}

void PgResultStore::set_pinned(std::int64_t trial_id, bool pinned) {
  retrying(Retry::always, [&]() -> void {
    checks::check_id(trial_id, "trial_id");
    pg::Params p;
    p.add(trial_id).add(pinned);
    if (db_->query("UPDATE trials SET pinned = $2 WHERE id = $1", p).affected() == 0)
      require_trial(trial_id);
  });
}

}  // namespace dnnlab::store
