// The report as one HTML file (render.hpp): figures as inline SVG, tables,
// conclusions. Everything from the store goes through html_escape.
#include <algorithm>
#include <map>

#include "report/render.hpp"
#include "report/svg_plot.hpp"

namespace dnnlab::report {

std::vector<std::string> rules_text(const Study& s, const Analysis& a) {
  const std::string& dn = s.depth_param;
  std::vector<std::string> r;
  r.push_back("Accuracy is " + s.metric +
              " at the last epoch a trial reported: a finished trial's final value, a pruned "
              "one's where it stopped. Bests and conclusions count finished and pruned trials "
              "(not unverified browser results); failed ones are listed apart.");
  if (s.classes > 0)
    r.push_back("Chance is 1/classes = " + fmt_num(s.chance(), "%.4f") + " (" +
                std::to_string(s.classes) + " classes). A " + dn +
                " is at chance when its best accuracy is at most chance + " +
                fmt_num(a.rules.chance_fraction, "%g") + " × (1 − chance) = " +
                fmt_num(s.chance() + a.rules.chance_fraction * (1 - s.chance()), "%.4f") +
                "; a family falls to chance at the smallest " + dn + " from which every measured " +
                dn + " is at chance.");
  r.push_back("Plateau: with the peak the best accuracy over all " + dn +
              " values, the plateau starts at the smallest " + dn + " within " +
              fmt_num(a.rules.plateau_tolerance, "%g") +
              " of the peak, if every larger one stays within it; otherwise accuracy peaks "
              "and declines, or is still rising when that " +
              dn + " is the largest tried.");
  r.push_back("Cost per unit of " + dn +
              ": the slope of an ordinary least-squares line through every trial's mean "
              "training seconds per epoch (and per training sample) against " +
              dn + "; R² = 1 − SS_res/SS_tot.");
  if (!a.plain_family.empty())
    r.push_back("Gaps: a family's best accuracy minus " + s.family_param + " " + a.plain_family +
                "'s best, at each " + dn + " both measured.");
  return r;
}

std::string status_counts(const Study& s) {
  std::map<std::string, int> n;
  for (const auto& t : s.trials) ++n[t.status];
  std::string out;
  for (const char* st : {"finished", "pruned", "failed", "running", "queued", "cancelled"})
    if (n.count(st))
      out += (out.empty() ? "" : ", ") + std::string(st) + " " + std::to_string(n[st]);
  return out.empty() ? "no trials" : out;
}

namespace {

std::string e(const std::string& t) {
  return html_escape(t);
}

std::string series_name(const Study& s, const std::string& family, const std::string& act) {
  std::string n;
  if (!s.family_param.empty()) n = family;
  if (!s.activation_param.empty()) n += (n.empty() ? "" : " / ") + act;
  return n.empty() ? "all" : n;
}

std::string trial_title(const Study& s, const TrialRow& t) {
  std::string title = "trial " + std::to_string(t.id) + " (" + t.params + "): " + t.status;
  if (t.status == "pruned") title += " at epoch " + std::to_string(t.epochs);
  if (t.accuracy) title += ", " + s.metric + " " + fmt_num(*t.accuracy, "%.4f");
  if (t.provisional) title += ", unverified browser result";
  return title;
}

std::string accuracy_plot(const Study& s, const Analysis& a, const std::string& family,
                          std::size_t n) {
  Plot p;
  p.id = "accuracy-" + std::to_string(n);
  p.title = s.family_param.empty() ? "Accuracy vs " + s.depth_param : s.family_param + " " + family;
  p.x_label = s.depth_param;
  p.y_label = s.metric;
  p.log_x = true;
  p.y_min = 0;
  p.y_max = 1;
  for (std::size_t i = 0; i < s.activations.size(); ++i) {
    const std::string& act = s.activations[i];
    const std::string color = series_color(i);
    bool any = false;
    for (const auto& t : s.trials)
      if (t.family == family && t.activation == act && t.accuracy) {
        any = true;
        p.points.push_back({t.depth, *t.accuracy, t.id, t.status, color,
                            t.status != "finished" || t.provisional, trial_title(s, t)});
      }
    for (const auto& r : a.series)
      if (r.family == family && r.activation == act) {
        PlotLine l{{}, color, false, "best " + series_name(s, family, act)};
        for (const auto& b : r.best) l.points.emplace_back(b.depth, b.value);
        p.lines.push_back(std::move(l));
      }
    if (any) p.legend.emplace_back(color, s.activation_param.empty() ? "trials" : act);
  }
  if (s.classes > 0 && !p.points.empty()) {
    double lo = p.points[0].x, hi = lo;
    for (const auto& pt : p.points) lo = std::min(lo, pt.x), hi = std::max(hi, pt.x);
    p.lines.push_back({{{lo, s.chance()}, {hi, s.chance()}}, "#555", true, "chance"});
    p.legend.emplace_back("#555", "chance (dashed)");
  }
  return render_svg(p);
}

std::string time_plot(const Study& s, const Analysis& a, bool per_sample) {
  Plot p;
  p.id = per_sample ? "time-per-sample" : "time-per-epoch";
  p.title = per_sample ? "Training time per sample" : "Training time per epoch";
  p.x_label = s.depth_param;
  p.y_label = per_sample ? "seconds per sample" : "seconds per epoch";
  p.y_min = 0;
  for (std::size_t i = 0; i < s.families.size(); ++i) {
    const std::string color = series_color(i);
    bool any = false;
    for (const auto& t : s.trials) {
      const auto& v = per_sample ? t.sample_seconds : t.epoch_seconds;
      if (t.family != s.families[i] || !v || t.provisional) continue;
      any = true;
      p.points.push_back({t.depth, *v, t.id, t.status, color, t.status != "finished",
                          trial_title(s, t) + ", " + fmt_num(*v) + " s"});
    }
    const auto& fit = per_sample ? a.families[i].sample_fit : a.families[i].epoch_fit;
    if (any) {
      p.legend.emplace_back(color, s.family_param.empty() ? "trials" : s.families[i]);
      if (fit && s.families.size() > 1) {
        double lo = 1e300, hi = -1e300;
        for (const auto& pt : p.points)
          if (pt.color == color) lo = std::min(lo, pt.x), hi = std::max(hi, pt.x);
        p.lines.push_back(
            {{{lo, fit->intercept + fit->slope * lo}, {hi, fit->intercept + fit->slope * hi}},
             color,
             true,
             "fit " + s.families[i]});
      }
    }
  }
  const auto& fit = per_sample ? a.sample_fit : a.epoch_fit;
  if (fit && !p.points.empty()) {
    double lo = p.points[0].x, hi = lo;
    for (const auto& pt : p.points) lo = std::min(lo, pt.x), hi = std::max(hi, pt.x);
    p.lines.push_back(
        {{{lo, fit->intercept + fit->slope * lo}, {hi, fit->intercept + fit->slope * hi}},
         "#000",
         false,
         "fit all"});
    p.legend.emplace_back("#000", "least-squares fit, all");
  }
  return render_svg(p);
}

std::string fit_row(const std::string& who, const std::optional<LinearFit>& f) {
  if (!f) return "<tr><td>" + e(who) + "</td><td colspan=\"4\">too few points</td></tr>\n";
  return "<tr><td>" + e(who) + "</td><td class=\"slope\">" + fmt_num(f->slope) + "</td><td>" +
         fmt_num(f->intercept) + "</td><td class=\"r2\">" + fmt_num(f->r2, "%.4f") + "</td><td>" +
         std::to_string(f->n) + "</td></tr>\n";
}

std::string fit_table(const Study& s, const Analysis& a, bool per_sample) {
  std::string h = "<table class=\"fits\"><tr><th>" +
                  e(s.family_param.empty() ? "trials" : s.family_param) +
                  "</th><th>seconds per unit of " + e(s.depth_param) +
                  "</th><th>intercept (s)</th><th>R²</th><th>trials</th></tr>\n";
  if (s.families.size() > 1)
    for (const auto& f : a.families)
      h += fit_row(f.overall.family, per_sample ? f.sample_fit : f.epoch_fit);
  h += fit_row("all", per_sample ? a.sample_fit : a.epoch_fit);
  return h + "</table>\n";
}

const char* kStyle =
    R"(body{font-family:system-ui,sans-serif;max-width:70rem;margin:1rem auto;padding:0 1rem;color:#222}
svg.plot{width:100%;max-width:640px;height:auto;border:1px solid #ddd;margin:.5rem 0}
.figs{display:flex;flex-wrap:wrap;gap:1rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left}
td.num{text-align:right}.note{color:#555}
@media (max-width:640px){table{font-size:.8rem;display:block;overflow-x:auto}}
)";

}  // namespace

std::string render_html(const Study& s, const Analysis& a) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
      "'unsafe-inline'\">\n<meta name=\"viewport\" content=\"width=device-width, "
      "initial-scale=1\">\n<title>dnnlab report: " +
      e(s.name) + "</title>\n<style>" + kStyle + "</style></head><body>\n";
  h += "<h1>Study report: " + e(s.name) + "</h1>\n<p>Experiment " +
       std::to_string(s.experiment_id) + " (" + e(s.status) + "), " +
       std::to_string(s.trials.size()) + " trials: " + e(status_counts(s)) + ". Depth axis: <b>" +
       e(s.depth_param) + "</b>; family: <b>" + e(s.family_param.empty() ? "-" : s.family_param) +
       "</b>; activation: <b>" + e(s.activation_param.empty() ? "-" : s.activation_param) +
       "</b>.</p>\n";
  for (const auto& n : s.notes) h += "<p class=\"note\">Note: " + e(n) + ".</p>\n";
  h += "<h2>Conclusions</h2>\n<ul class=\"conclusions\">\n";
  for (const auto& c : a.conclusions) h += "<li>" + e(c) + "</li>\n";
  h += "</ul>\n<h2>Accuracy vs " + e(s.depth_param) +
       "</h2>\n<p>Every trial that reported an accuracy: filled circles finished, hollow ones "
       "pruned (at the epoch where they stopped) or still running; lines join the best per " +
       e(s.depth_param) + ".</p>\n<div class=\"figs\">\n";
  for (std::size_t i = 0; i < s.families.size(); ++i) h += accuracy_plot(s, a, s.families[i], i);
  h += "</div>\n<h2>Training time vs " + e(s.depth_param) + "</h2>\n";
  h += "<p>Mean training seconds per epoch of each trial (evaluation excluded), with a "
       "least-squares line.</p>\n" +
       time_plot(s, a, false) + fit_table(s, a, false);
  if (a.sample_fit || std::any_of(s.trials.begin(), s.trials.end(),
                                  [](const TrialRow& t) { return t.sample_seconds.has_value(); }))
    h += "<p>Per training sample (" + (s.samples ? std::to_string(*s.samples) : "?") +
         " per epoch).</p>\n" + time_plot(s, a, true) + fit_table(s, a, true);
  h += "<h2>Best configuration per " + e(s.depth_param) + "</h2>\n<table class=\"best\"><tr><th>" +
       e(s.depth_param) +
       "</th><th>trial</th><th>parameters</th><th>status</th><th>epochs</th><th>" + e(s.metric) +
       "</th></tr>\n";
  for (const auto& b : a.best) {
    const TrialRow& t = s.trials[b.trial];
    h += "<tr><td class=\"num\">" + fmt_num(b.depth, "%g") + "</td><td class=\"num\">" +
         std::to_string(t.id) + "</td><td>" + e(t.params) + "</td><td>" + e(t.status) +
         "</td><td class=\"num\">" + std::to_string(t.epochs) + "</td><td class=\"num\">" +
         fmt_num(*t.accuracy, "%.4f") + "</td></tr>\n";
  }
  h += "</table>\n<h2>Failed trials</h2>\n";
  std::string failed;
  for (const auto& t : s.trials)
    if (t.status == "failed")
      failed += "<tr><td class=\"num\">" + std::to_string(t.id) + "</td><td>" + e(t.params) +
                "</td><td>" + e(t.error) + "</td></tr>\n";
  h += failed.empty()
           ? "<p>None.</p>\n"
           : "<table class=\"failed\"><tr><th>trial</th><th>parameters</th><th>error</th>"
             "</tr>\n" +
                 failed + "</table>\n";
  h += "<h2>Rules</h2>\n<ul class=\"rules\">\n";
  for (const auto& r : rules_text(s, a)) h += "<li>" + e(r) + "</li>\n";
  return h +
         "</ul>\n<p class=\"note\">Written by <code>dnnlab report</code> from the store.</p>\n"
         "</body></html>\n";
}

}  // namespace dnnlab::report
