// The study written out: one self-contained HTML file (inline SVG figures
// and CSS; no scripts, nothing fetched: a Content-Security-Policy of
// default-src 'none' says so to the browser) and a Markdown summary with
// the same numbers. Every string from the store is escaped.
//
//   report::Study s = report::gather(store, id, {});
//   report::Analysis a = report::analyse(s);
//   std::ofstream("depth-report.html") << report::render_html(s, a);
//   std::ofstream("depth-report.md") << report::render_markdown(s, a);
#pragma once
#include <string>

#include "report/study.hpp"

namespace dnnlab::report {

std::string render_html(const Study& study, const Analysis& analysis);
std::string render_markdown(const Study& study, const Analysis& analysis);

// The rules the conclusions follow, as sentences (both renderers print them).
std::vector<std::string> rules_text(const Study& study, const Analysis& analysis);
// "finished 10, pruned 3, failed 1": the trials by status.
std::string status_counts(const Study& study);

}  // namespace dnnlab::report
