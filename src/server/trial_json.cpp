// The trial's JSON encoders (see trial_json.hpp).
#include "server/trial_json.hpp"

#include <cmath>
#include <cstdio>

namespace dnnlab::server {

using nlohmann::json;

namespace {

json opt(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

json trial_json(const store::TrialRecord& t, bool with_curve) {
  json params = json::parse(t.config_json, nullptr, false);
  if (params.is_discarded()) params = t.config_json;
  const auto& m = t.metrics;
  json j = {{"id", t.id},
            {"experiment_id", t.experiment_id},
            {"index", t.index},
            {"params", std::move(params)},
            {"seed", std::to_string(t.seed)},  // a string: JSON numbers lose digits past 2^53
            {"status", store::to_string(t.status)},
            {"attempt", t.attempt},
            {"worker", t.worker},
            {"started_at", opt(t.started_at)},
            {"finished_at", opt(t.finished_at)},
            {"train_loss", opt(m.train_loss)},
            {"train_acc", opt(m.train_acc)},
            {"val_loss", opt(m.val_loss)},
            {"val_acc", opt(m.val_acc)},
            {"test_acc", opt(m.test_acc)},
            {"epochs_done", m.epochs_done},
            {"seconds", m.seconds},
            {"error", t.error},
            // A browser result no native re-run has agreed with yet: shown, never ranked.
            {"provisional", t.provisional}};
  if (with_curve) {
    j["provenance"] = t.provenance;
    json curve = json::array();
    for (const auto& e : t.curve)
      curve.push_back({{"epoch", e.epoch},
                       {"train_loss", opt(e.train_loss)},
                       {"train_acc", opt(e.train_acc)},
                       {"val_loss", opt(e.val_loss)},
                       {"val_acc", opt(e.val_acc)},
                       {"seconds", e.seconds},
                       {"lr", opt(e.lr)}});
    j["curve"] = std::move(curve);
  }
  return j;
}

void append_json_string(std::string& out, std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) {  // let nlohmann check (and repair) non-ASCII text
      out += json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
      return;
    }
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

namespace {

void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";  // as nlohmann writes them
    return;
  }
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
  // Keep integral doubles recognisably floating ("1.0"), as nlohmann does.
  if (std::string_view(buf, p - buf).find_first_of(".eE") == std::string_view::npos) out += ".0";
}

void append_opt(std::string& out, const std::optional<double>& v) {
  if (v)
    append_double(out, *v);
  else
    out += "null";
}

}  // namespace

void append_trial_json(std::string& out, const store::TrialRecord& t) {
  const auto& m = t.metrics;
  out += "{\"id\":";
  append_json_int(out, t.id);
  out += ",\"experiment_id\":";
  append_json_int(out, t.experiment_id);
  out += ",\"index\":";
  append_json_int(out, t.index);
  out += ",\"params\":";
  if (json::accept(t.config_json))
    out += t.config_json;
  else
    append_json_string(out, t.config_json);
  out += ",\"seed\":\"";
  append_json_int(out, t.seed);
  out += "\"";
  out += ",\"status\":";
  append_json_string(out, store::to_string(t.status));
  out += ",\"attempt\":";
  append_json_int(out, t.attempt);
  out += ",\"worker\":";
  append_json_string(out, t.worker);
  out += ",\"started_at\":";
  append_opt(out, t.started_at);
  out += ",\"finished_at\":";
  append_opt(out, t.finished_at);
  out += ",\"train_loss\":";
  append_opt(out, m.train_loss);
  out += ",\"train_acc\":";
  append_opt(out, m.train_acc);
  out += ",\"val_loss\":";
  append_opt(out, m.val_loss);
  out += ",\"val_acc\":";
  append_opt(out, m.val_acc);
  out += ",\"test_acc\":";
  append_opt(out, m.test_acc);
  out += ",\"epochs_done\":";
  append_json_int(out, m.epochs_done);
  out += ",\"seconds\":";
  append_double(out, m.seconds);
  out += ",\"error\":";
  append_json_string(out, t.error);
  out += t.provisional ? ",\"provisional\":true}" : ",\"provisional\":false}";
}

}  // namespace dnnlab::server
