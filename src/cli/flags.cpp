// Flag validators with readable messages (see commands.hpp).
#include <charconv>
#include <cmath>
#include <string>

#include "cli/commands.hpp"

namespace dnnlab::cli {
namespace {

std::string bounds(double lo, double hi, bool whole) {
  auto text = [whole](double v) {
    if (whole) return std::to_string(static_cast<int64_t>(v));
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
    return s;
  };
  if (hi >= static_cast<double>(INT64_MAX)) return ">= " + text(lo);
  return "in [" + text(lo) + ", " + text(hi) + "]";
}

}  // namespace

CLI::Validator whole_number(int64_t lo, int64_t hi) {
  const std::string range = bounds(static_cast<double>(lo), static_cast<double>(hi), true);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        int64_t v = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
          return "must be a whole number " + range + ", got '" + s + "'";
        return {};
      },
      "INT " + range);
}

CLI::Validator number_in(double lo, double hi) {
  const std::string range = bounds(lo, hi, false);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        double v = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) ||
            v < lo || v > hi)
          return "must be a number " + range + ", got '" + s + "'";
        return {};
      },
      "NUMBER " + range);
}

}  // namespace dnnlab::cli
