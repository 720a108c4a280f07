// Scatter plots with lines as inline SVG text: what the report's figures are
// made of. No scripts, no external files; every text is escaped here.
//
// Each point is a <circle class="pt STATUS" data-trial=ID data-x=X data-y=Y>
// with a <title> (its tooltip), so a test or a reader's script can find the
// plotted values exactly (printed with %.9g). A plot of over 2,000 points
// (a 50,000-trial study) draws them instead as one <path class="pts STATUS"
// data-count=N> of round dots per status and colour, without tooltips, so
// the file stays a few MB.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dnnlab::report {

// Text for HTML/SVG content and attribute values: & < > " ' escaped (the
// quotes only with `quotes`: text outside attributes, e.g. in Markdown).
std::string html_escape(const std::string& text, bool quotes = true);

struct PlotPoint {
  double x = 0, y = 0;
  std::int64_t trial = 0;
  std::string status;  // css class: finished, pruned, running, ...
  std::string color;   // a CSS colour
  bool hollow = false;
  std::string title;  // the tooltip (plain text)
};

struct PlotLine {
  std::vector<std::pair<double, double>> points;  // drawn in this order
  std::string color;
  bool dashed = false;
  std::string label;  // data-label attribute
};

struct Plot {
  std::string title, x_label, y_label;
  bool log_x = false;  // ignored when some x <= 0
  std::optional<double> y_min, y_max;
  std::vector<PlotPoint> points;
  std::vector<PlotLine> lines;
  std::vector<std::pair<std::string, std::string>> legend;  // (colour, label)
  std::string id;                                           // the <svg> element's id
};

std::string render_svg(const Plot& plot);

// Distinct colours for series, cycling after ten.
const std::string& series_color(std::size_t i);

}  // namespace dnnlab::report
