// The report's Markdown summary (render.hpp): the same numbers as the HTML,
// as tables. Store strings are escaped for Markdown and for the HTML that
// Markdown passes through.
#include <map>
#include <set>
#include <string_view>

#include "report/render.hpp"
#include "report/svg_plot.hpp"

namespace dnnlab::report {

namespace {

// Markdown's own marks escaped (a table cell's `|` included), line breaks
// as spaces, then what Markdown passes through as HTML.
std::string md(const std::string& t) {
  std::string out;
  for (char c : t) {
    if (c == '\n' || c == '\r') {
      out += ' ';
      continue;
    }
    if (std::string_view("|\\`*_[]#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return html_escape(out, false);
}

std::string fit_cells(const std::optional<LinearFit>& f) {
  if (!f) return " – | – | – | 0 |";
  return " " + fmt_num(f->slope) + " | " + fmt_num(f->intercept) + " | " + fmt_num(f->r2, "%.4f") +
         " | " + std::to_string(f->n) + " |";
}

std::string fits(const Study& s, const Analysis& a, bool per_sample) {
  std::string m = "| " + md(s.family_param.empty() ? "trials" : s.family_param) +
                  " | seconds per " + std::string(per_sample ? "sample" : "epoch") +
                  " per unit of " + md(s.depth_param) + " | intercept (s) | R² | trials |\n" +
                  "|---|---:|---:|---:|---:|\n";
  if (s.families.size() > 1)
    for (const auto& f : a.families)
      m += "| " + md(f.overall.family) + " |" + fit_cells(per_sample ? f.sample_fit : f.epoch_fit) +
           "\n";
  return m + "| all |" + fit_cells(per_sample ? a.sample_fit : a.epoch_fit) + "\n";
}

std::string series_label(const Study& s, const SeriesResult& r) {
  std::string n;
  if (!s.family_param.empty()) n = r.family;
  if (!s.activation_param.empty()) n += (n.empty() ? "" : " / ") + r.activation;
  return n.empty() ? "all" : n;
}

}  // namespace

std::string render_markdown(const Study& s, const Analysis& a) {
  std::string m =
      "# Study report: " + md(s.name) + "\n\nExperiment " + std::to_string(s.experiment_id) + " (" +
      md(s.status) + "), " + std::to_string(s.trials.size()) + " trials: " + status_counts(s) +
      ". Depth axis: `" + s.depth_param +
      "`; family: " + (s.family_param.empty() ? "-" : "`" + s.family_param + "`") +
      "; activation: " + (s.activation_param.empty() ? "-" : "`" + s.activation_param + "`") +
      ".\n\n";
  for (const auto& n : s.notes) m += "Note: " + md(n) + ".\n\n";
  m += "## Conclusions\n\n";
  for (const auto& c : a.conclusions) m += "- " + md(c) + "\n";
  m += "\n## Training time vs " + md(s.depth_param) + " (least squares)\n\n" + fits(s, a, false);
  if (a.sample_fit) m += "\n" + fits(s, a, true);
  // Best accuracy per depth, one column per (family, activation).
  m += "\n## Best " + s.metric + " per " + md(s.depth_param) + "\n\n| " + md(s.depth_param) + " |";
  std::set<double> depths;
  for (const auto& r : a.series) {
    m += " " + md(series_label(s, r)) + " |";
    for (const auto& b : r.best) depths.insert(b.depth);
  }
  m += "\n|---:|";
  for (std::size_t i = 0; i < a.series.size(); ++i) m += "---:|";
  m += "\n";
  for (double d : depths) {
    m += "| " + fmt_num(d, "%g") + " |";
    for (const auto& r : a.series) {
      std::string cell = " ";
      for (const auto& b : r.best)
        if (b.depth == d) cell = fmt_num(b.value, "%.4f");
      m += " " + cell + " |";
    }
    m += "\n";
  }
  m += "\n## Best configuration per " + md(s.depth_param) + "\n\n| " + md(s.depth_param) +
       " | trial | parameters | status | epochs | " + s.metric +
       " |\n|---:|---:|---|---|---:|---:|\n";
  for (const auto& b : a.best) {
    const TrialRow& t = s.trials[b.trial];
    m += "| " + fmt_num(b.depth, "%g") + " | " + std::to_string(t.id) + " | " + md(t.params) +
         " | " + t.status + " | " + std::to_string(t.epochs) + " | " +
         fmt_num(*t.accuracy, "%.4f") + " |\n";
  }
  m += "\n## Failed trials\n\n";
  std::string failed;
  for (const auto& t : s.trials)
    if (t.status == "failed")
      failed += "| " + std::to_string(t.id) + " | " + md(t.params) + " | " + md(t.error) + " |\n";
  m += failed.empty() ? "None.\n" : "| trial | parameters | error |\n|---:|---|---|\n" + failed;
  m += "\n## Rules\n\n";
  for (const auto& r : rules_text(s, a)) m += "- " + md(r) + "\n";
  return m;
}

}  // namespace dnnlab::report
