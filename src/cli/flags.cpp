// Flag validators with readable messages (see commands.hpp).
#include <unistd.h>

#include <algorithm>
#include <cctype>
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

std::optional<int64_t> parse_memory_size(std::string_view text) {
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || !std::isfinite(v) || v < 0) return std::nullopt;
  std::string_view unit(end, text.data() + text.size() - end);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  double scale = 1;
  if (!unit.empty()) {
    static constexpr std::string_view kUnits = "KMGT";
    const size_t at =
        kUnits.find(static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
    if (at == std::string_view::npos) return std::nullopt;
    scale = std::pow(1024.0, static_cast<double>(at + 1));
    unit.remove_prefix(1);
    if (unit == "iB" || unit == "B" || unit == "b") unit = {};
    if (!unit.empty()) return std::nullopt;
  }
  const double bytes = v * scale;
  if (bytes >= 9.2e18) return std::nullopt;
  return static_cast<int64_t>(bytes);
}

CLI::Validator memory_size() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (!parse_memory_size(s))
          return "must be a size like 8G, 512M or 1073741824 (bytes), got '" + s + "'";
        return {};
      },
      "SIZE");
}

int64_t machine_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

int64_t default_max_memory(int64_t slots) {
  const int64_t ram = machine_memory();
  if (ram <= 0) return INT64_MAX;  // unknown: no limit but the machine's own
  return ram / std::max<int64_t>(1, slots);
}

int64_t max_memory_bytes(const std::string& flag_value, int64_t slots) {
  if (flag_value.empty()) return default_max_memory(slots);
  return *parse_memory_size(flag_value);  // checked by memory_size()
}

std::string memory_limit_source(const std::string& flag_value, int64_t slots,
                                const std::string& slot_word) {
  if (!flag_value.empty()) return " per " + slot_word + " (--max-memory)";
  if (slots <= 1) return " (this machine's memory)";
  return " (this machine's memory shared by " + std::to_string(slots) + " " + slot_word + "s)";
}

std::filesystem::path output_file(const std::filesystem::path& dir, const std::string& name,
                                  const std::string& suffix, const std::string& what) {
  const std::string file = name + suffix;
  if (name.empty() || name == "." || name == ".." ||
      name.find_first_of("/\\") != std::string::npos ||
      std::filesystem::path(file).filename() != file)
    throw UsageError(what + " '" + name + "' would write " + file +
                     " outside the output directory " + dir.string() +
                     ": names of output files may not contain '/' or '\\' or be '..'");
  return dir / file;
}

}  // namespace dnnlab::cli
