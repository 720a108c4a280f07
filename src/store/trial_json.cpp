// The trial encoder (see trial_json.hpp): one field list, written straight
// into a string.
#include "store/trial_json.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace dnnlab::store {

using nlohmann::json;

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

void append_epoch(std::string& out, const EpochMetrics& e) {
  out += "{\"epoch\":";
  append_json_int(out, e.epoch);
  out += ",\"train_loss\":";
  append_opt(out, e.train_loss);
  out += ",\"train_acc\":";
  append_opt(out, e.train_acc);
  out += ",\"val_loss\":";
  append_opt(out, e.val_loss);
  out += ",\"val_acc\":";
  append_opt(out, e.val_acc);
  out += ",\"seconds\":";
  append_double(out, e.seconds);
  out += ",\"lr\":";
  append_opt(out, e.lr);
  out += '}';
}

}  // namespace

void append_trial_json(std::string& out, const TrialRecord& t, bool with_curve) {
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
  append_json_string(out, to_string(t.status));
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
  // A browser result no native re-run has agreed with yet: shown, never ranked.
  out += t.provisional ? ",\"provisional\":true" : ",\"provisional\":false";
  if (with_curve) {
    // Pinned by the user: its weights are kept whatever its rank.
    out += t.pinned ? ",\"pinned\":true" : ",\"pinned\":false";
    out += ",\"provenance\":";
    out += t.provenance.dump(-1, ' ', false, json::error_handler_t::replace);
    out += ",\"curve\":[";
    for (std::size_t i = 0; i < t.curve.size(); ++i) {
      if (i) out += ',';
      append_epoch(out, t.curve[i]);
    }
    out += ']';
  }
  out += '}';
}

}  // namespace dnnlab::store
