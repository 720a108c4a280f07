// Inline SVG scatter plots (svg_plot.hpp).
#include "report/svg_plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace dnnlab::report {

std::string html_escape(const std::string& text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += quotes ? "&quot;" : "\"";
        break;
      case '\'':
        out += quotes ? "&#39;" : "'";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const std::string& series_color(std::size_t i) {
  static const std::array<std::string, 10> colors = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                                     "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
                                                     "#bcbd22", "#17becf"};
  return colors[i % colors.size()];
}

namespace {

// Above this many points a plot draws dots in bulk (render_svg).
constexpr std::size_t kDetailedPoints = 2000;
constexpr double kWidth = 640, kHeight = 360, kLeft = 64, kRight = 16, kTop = 28, kBottom = 48;

std::string num(double v, const char* f = "%.9g") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// 1, 2 or 5 times a power of ten, about `count` of them over [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int count = 5) {
  std::vector<double> out;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / count;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return out;
}

struct Scale {
  double lo = 0, hi = 1, px0 = 0, px1 = 1;
  bool log = false;
  double operator()(double v) const {
    const double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi;
    const double t = ((log ? std::log10(v) : v) - a) / (b - a);
    return px0 + t * (px1 - px0);
  }
};

}  // namespace

std::string render_svg(const Plot& p) {
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  auto take = [&](double x, double y) {
    xlo = std::min(xlo, x);
    xhi = std::max(xhi, x);
    ylo = std::min(ylo, y);
    yhi = std::max(yhi, y);
  };
  for (const auto& pt : p.points) take(pt.x, pt.y);
  for (const auto& l : p.lines)
    for (auto [x, y] : l.points) take(x, y);
  if (!std::isfinite(xlo)) xlo = 0, xhi = 1, ylo = 0, yhi = 1;
  const bool log_x = p.log_x && xlo > 0;
  if (p.y_min) ylo = std::min(ylo, *p.y_min);
  if (p.y_max) yhi = std::max(yhi, *p.y_max);
  if (yhi <= ylo) yhi = ylo + 1;
  if (xhi <= xlo) {
    xlo = log_x ? xlo / 2 : xlo - 1;
    xhi = log_x ? xhi * 2 : xhi + 1;
  }
  Scale sx{xlo, xhi, kLeft, kWidth - kRight, log_x};
  if (log_x)
    sx.lo /= 1.15, sx.hi *= 1.15;
  else {
    const double pad = (xhi - xlo) * 0.04;
    sx.lo -= pad, sx.hi += pad;
  }
  const double ypad = (yhi - ylo) * 0.05;
  Scale sy{p.y_min ? *p.y_min : ylo - ypad, p.y_max ? *p.y_max : yhi + ypad, kHeight - kBottom,
           kTop, false};

  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\"";
  if (!p.id.empty()) s += " id=\"" + html_escape(p.id) + "\"";
  s += " viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) + "\" role=\"img\" aria-label=\"" +
       html_escape(p.title) + "\">\n";
  s += "<text class=\"title\" x=\"" + num(kWidth / 2) + "\" y=\"18\" text-anchor=\"middle\">" +
       html_escape(p.title) + "</text>\n";
  // Axes, ticks and grid.
  std::vector<double> xt;
  if (log_x) {
    std::set<double> xs;
    for (const auto& pt : p.points) xs.insert(pt.x);
    if (xs.size() <= 12 && !xs.empty())
      xt.assign(xs.begin(), xs.end());
    else
      for (double t = std::pow(10.0, std::floor(std::log10(xlo))); t <= xhi * 1.0001; t *= 10)
        if (t >= xlo / 1.0001) xt.push_back(t);
  } else {
    xt = nice_ticks(xlo, xhi);
  }
  s += "<g class=\"axes\" stroke=\"#999\" stroke-width=\"1\">\n";
  s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kHeight - kBottom) + "\" x2=\"" +
       num(kWidth - kRight) + "\" y2=\"" + num(kHeight - kBottom) + "\"/>\n";
  s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(kLeft) + "\" y2=\"" +
       num(kHeight - kBottom) + "\"/>\n</g>\n<g class=\"ticks\" font-size=\"11\" fill=\"#333\">\n";
  for (double t : xt) {
    const double x = sx(t);
    s += "<line x1=\"" + num(x, "%.2f") + "\" y1=\"" + num(kHeight - kBottom) + "\" x2=\"" +
         num(x, "%.2f") + "\" y2=\"" + num(kHeight - kBottom + 4) + "\" stroke=\"#999\"/>";
    s += "<text x=\"" + num(x, "%.2f") + "\" y=\"" + num(kHeight - kBottom + 16) +
         "\" text-anchor=\"middle\">" + num(t, "%g") + "</text>\n";
  }
  for (double t : nice_ticks(sy.lo, sy.hi)) {
    const double y = sy(t);
    s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(y, "%.2f") + "\" x2=\"" +
         num(kWidth - kRight) + "\" y2=\"" + num(y, "%.2f") + "\" stroke=\"#eee\"/>";
    s += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(y + 4, "%.2f") +
         "\" text-anchor=\"end\">" + num(t, "%g") + "</text>\n";
  }
  s += "</g>\n";
  s += "<text class=\"xlabel\" x=\"" + num((kLeft + kWidth - kRight) / 2) + "\" y=\"" +
       num(kHeight - 10) + "\" text-anchor=\"middle\" font-size=\"12\">" + html_escape(p.x_label) +
       (log_x ? " (log scale)" : "") + "</text>\n";
  s += "<text class=\"ylabel\" transform=\"translate(14," + num((kTop + kHeight - kBottom) / 2) +
       ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" + html_escape(p.y_label) +
       "</text>\n";
  for (const auto& l : p.lines) {
    if (l.points.empty()) continue;
    s += "<polyline class=\"line\" data-label=\"" + html_escape(l.label) +
         "\" fill=\"none\" stroke=\"" + html_escape(l.color) + "\" stroke-width=\"1.5\"" +
         (l.dashed ? " stroke-dasharray=\"5 4\"" : "") + " points=\"";
    for (auto [x, y] : l.points) s += num(sx(x), "%.2f") + "," + num(sy(y), "%.2f") + " ";
    s += "\"/>\n";
  }
  if (p.points.size() <= kDetailedPoints) {
    for (const auto& pt : p.points) {
      s += "<circle class=\"pt " + html_escape(pt.status) + "\" data-trial=\"" +
           std::to_string(pt.trial) + "\" data-x=\"" + num(pt.x) + "\" data-y=\"" + num(pt.y) +
           "\" cx=\"" + num(sx(pt.x), "%.2f") + "\" cy=\"" + num(sy(pt.y), "%.2f") + "\" r=\"" +
           (pt.hollow ? "4" : "3.5") + "\" " +
           (pt.hollow
                ? "fill=\"white\" stroke=\"" + html_escape(pt.color) + "\" stroke-width=\"1.5\""
                : "fill=\"" + html_escape(pt.color) + "\" fill-opacity=\"0.8\"") +
           "><title>" + html_escape(pt.title) + "</title></circle>\n";
    }
  } else {
    // Many points: one path of round dots per status and colour (about 14
    // bytes a point against 300 with a circle and its tooltip), hollow
    // marks as faint dots under the full ones.
    std::map<std::tuple<bool, std::string, std::string>, std::pair<std::size_t, std::string>> dots;
    for (const auto& pt : p.points) {
      auto& [n, d] = dots[{!pt.hollow, pt.status, pt.color}];
      ++n;
      d += 'M';
      d += num(sx(pt.x), "%.1f");
      d += ' ';
      d += num(sy(pt.y), "%.1f");
      d += "h0";
    }
    for (const auto& [key, v] : dots) {
      const auto& [solid, status, color] = key;
      s += "<path class=\"pts " + html_escape(status) + "\" data-count=\"" +
           std::to_string(v.first) + "\" fill=\"none\" stroke=\"" + html_escape(color) +
           "\" stroke-linecap=\"round\" stroke-width=\"" +
           (solid ? "6\" stroke-opacity=\"0.6" : "5\" stroke-opacity=\"0.25") + "\" d=\"" +
           v.second + "\"/>\n";
    }
    s += "<text class=\"note\" x=\"" + num(kLeft + 6) + "\" y=\"" + num(kTop + 12) +
         "\" font-size=\"11\" fill=\"#666\">" + std::to_string(p.points.size()) +
         " trials, drawn as dots without tooltips (over " + std::to_string(kDetailedPoints) +
         "); faint: stopped early</text>\n";
  }
  double ly = kTop + 4;
  for (const auto& [color, label] : p.legend) {
    s += "<g class=\"legend\"><rect x=\"" + num(kWidth - kRight - 150) + "\" y=\"" + num(ly) +
         "\" width=\"10\" height=\"10\" fill=\"" + html_escape(color) + "\"/><text x=\"" +
         num(kWidth - kRight - 136) + "\" y=\"" + num(ly + 9) + "\" font-size=\"11\">" +
         html_escape(label) + "</text></g>\n";
    ly += 15;
  }
  return s + "</svg>\n";
}

}  // namespace dnnlab::report
