// CSV tables, parsed from memory in one pass; see csv.hpp for the format.
#include "data/csv.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <unordered_map>

namespace dnnlab::data {
namespace {

struct Cell {
  std::string_view raw;  // trimmed, for an unquoted cell
  int64_t offset = 0;    // where the cell starts in the text
  bool quoted = false;
  std::string owned;  // a quoted cell's unescaped text
  std::string_view text() const { return quoted ? std::string_view(owned) : raw; }
};

class CsvReader {
 public:
  CsvReader(std::string_view text, const std::string& file) : text_(text), file_(file) {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
  }

  [[noreturn]] void fail(int64_t offset, int64_t line, int64_t line_start,
                         const std::string& message) const {
    throw DataError(file_, offset,
                    "line " + std::to_string(line) + ", column " +
                        std::to_string(offset - line_start + 1) + ": " + message);
  }

  // The next non-blank row's cells; false at the end of the text.
  bool next_row(std::vector<Cell>& cells) {
    for (;;) {
      if (pos_ >= text_.size()) return false;
      ++line_;
      line_start_ = static_cast<int64_t>(pos_);
      size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) end = text_.size();
      size_t stop = end;
      if (stop > pos_ && text_[stop - 1] == '\r') --stop;
      const std::string_view line = text_.substr(pos_, stop - pos_);
      const size_t begin = pos_;
      pos_ = end + 1;
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank
      split(line, static_cast<int64_t>(begin), cells);
      return true;
    }
  }

  int64_t line() const { return line_; }
  int64_t line_start() const { return line_start_; }
  // Where the current row ends (its last byte plus one, before any \r\n).
  int64_t row_end() const {
    int64_t e =
        std::min<int64_t>(static_cast<int64_t>(pos_) - 1, static_cast<int64_t>(text_.size()));
    if (e > line_start_ && text_[static_cast<size_t>(e - 1)] == '\r') --e;
    return e;
  }

 private:
  static bool blank(char c) { return c == ' ' || c == '\t'; }

  void split(std::string_view line, int64_t base, std::vector<Cell>& cells) {
    cells.clear();
    size_t i = 0;
    for (;;) {
      while (i < line.size() && blank(line[i])) ++i;
      Cell c;
      c.offset = base + static_cast<int64_t>(i);
      if (i < line.size() && line[i] == '"') {
        ++i;
        for (;;) {
          if (i >= line.size())
            fail(c.offset, line_, line_start_,
                 "unterminated quoted cell (a quote opens here and the line ends before it "
                 "closes)");
          if (line[i] == '"') {
            if (i + 1 < line.size() && line[i + 1] == '"') {
              c.owned += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          c.owned += line[i++];
        }
        while (i < line.size() && blank(line[i])) ++i;
        if (i < line.size() && line[i] != ',')
          fail(base + static_cast<int64_t>(i), line_, line_start_,
               "text after a quoted cell's closing quote (expected ',' or the end of the line)");
        c.quoted = true;
      } else {
        size_t e = line.find(',', i);
        if (e == std::string_view::npos) e = line.size();
        size_t t = e;
        while (t > i && blank(line[t - 1])) --t;
        c.raw = line.substr(i, t - i);
        i = e;
      }
      cells.push_back(std::move(c));
      if (i >= line.size()) return;
      ++i;  // the comma
    }
  }

  std::string_view text_;
  const std::string& file_;
  size_t pos_ = 0;
  int64_t line_ = 0, line_start_ = 0;
};

bool is_count(std::string_view s) {
  if (s.empty() || s.size() > 15) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

int64_t to_count(std::string_view s) {
  int64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

enum class NumberStatus { ok, not_a_number, nan, infinite, out_of_range };

NumberStatus parse_number(std::string_view s, float* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty()) return NumberStatus::not_a_number;
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ptr != s.data() + s.size()) return NumberStatus::not_a_number;
  if (ec == std::errc::result_out_of_range) {
    // Overflow (1e400) or underflow (1e-400, which is a 0): strtod tells them apart.
    const std::string copy(s);
    if (std::fabs(std::strtod(copy.c_str(), nullptr)) > 1.0) return NumberStatus::out_of_range;
    *out = 0.f;
    return NumberStatus::ok;
  }
  if (ec != std::errc()) return NumberStatus::not_a_number;
  if (std::isnan(v)) return NumberStatus::nan;
  if (std::isinf(v)) return NumberStatus::infinite;
  if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max()))
    return NumberStatus::out_of_range;
  *out = static_cast<float>(v);
  return NumberStatus::ok;
}

bool numeric(std::string_view s) {
  float v;
  return parse_number(s, &v) != NumberStatus::not_a_number;
}

std::string quoted(std::string_view s) {
  std::string q = "'";
  for (char c : s.substr(0, 40)) q += (static_cast<unsigned char>(c) < 0x20 ? '?' : c);
  return q + (s.size() > 40 ? "...'" : "'");
}

}  // namespace

CsvTable parse_csv(std::string_view text, const CsvOptions& options, const std::string& file) {
  const std::string& mode = options.header;
  if (mode != "auto" && mode != "true" && mode != "false" && mode != "counts")
    throw DataError(file, -1, "header must be auto, true, false or counts, got '" + mode + "'");
  CsvReader in(text, file);
  std::vector<Cell> first, row;
  if (!in.next_row(first)) throw DataError(file, 0, "empty: no rows");
  const int64_t first_line = in.line(), first_start = in.line_start(), first_end = in.row_end();
  const std::vector<Cell> head = std::move(first);
  const bool has_second = in.next_row(row);

  const bool counts_form = head.size() >= 2 && is_count(head[0].text()) && is_count(head[1].text());
  bool counts = mode == "counts", names = mode == "true";
  if (mode == "auto") {
    // scikit-learn's tables open with `n_samples,n_features,class names...`:
    // a row of a different length whose second count is the features'.
    if (counts_form && has_second && head.size() != row.size() &&
        to_count(head[1].text()) + 1 == static_cast<int64_t>(row.size()))
      counts = true;
    else
      // A header's names stand above numbers: a text label column alone
      // (text in both rows) does not make the first row a header.
      for (size_t j = 0; j < head.size(); ++j)
        if (!numeric(head[j].text()) && (!has_second || (j < row.size() && numeric(row[j].text()))))
          names = true;
  }
  if (counts && !counts_form)
    in.fail(head[0].offset, first_line, first_start,
            "header: counts needs a first row `n_samples,n_features[,class names]`, found " +
                quoted(head[0].text()) + (head.size() > 1 ? "," + quoted(head[1].text()) : ""));

  CsvTable t;
  size_t ncols = head.size();
  if (counts) {
    if (!has_second) throw DataError(file, static_cast<int64_t>(text.size()), "no data rows");
    ncols = row.size();
    for (size_t i = 2; i < head.size(); ++i) t.class_names.emplace_back(head[i].text());
  }
  if (ncols < 2)
    in.fail(
        head[0].offset, first_line, first_start,
        "a table needs at least 2 columns (features and a label), found " + std::to_string(ncols));

  // The label column.
  size_t label = ncols - 1;
  const std::string& lc = options.label_column;
  if (!lc.empty()) {
    if (is_count(lc)) {
      label = static_cast<size_t>(to_count(lc));
      if (label >= ncols)
        throw DataError(file, -1,
                        "label_column " + lc + " is out of range: the table has " +
                            std::to_string(ncols) + " columns (0-based indices 0.." +
                            std::to_string(ncols - 1) + ")");
    } else if (!names) {
      throw DataError(file, -1,
                      "label_column '" + lc +
                          "' names a column, but the file has no header row (its first row "
                          "is data); give a 0-based column index instead, or header: true");
    } else {
      label = ncols;
      std::string all;
      for (size_t i = 0; i < head.size(); ++i) {
        if (head[i].text() == lc) label = i;
        all += (i ? ", " : "") + std::string(head[i].text());
      }
      if (label == ncols)
        throw DataError(file, -1,
                        "label_column '" + lc + "' is not a column; the columns are: " + all);
    }
  }
  if (names)
    for (size_t i = 0; i < head.size(); ++i)
      if (i != label) t.columns.emplace_back(head[i].text());
  t.features = static_cast<int64_t>(ncols) - 1;

  std::unordered_map<std::string, int32_t> label_ids;
  auto take = [&](const std::vector<Cell>& cells, int64_t line, int64_t line_start,
                  int64_t row_end) {
    if (cells.size() != ncols) {
      const std::string msg = "ragged row: " + std::to_string(cells.size()) + " cells, but " +
                              std::to_string(ncols) +
                              (counts ? " in the second row" : " in the first row");
      if (cells.size() > ncols) in.fail(cells[ncols].offset, line, line_start, msg);
      in.fail(row_end, line, line_start, msg);
    }
    for (size_t j = 0; j < ncols; ++j) {
      const Cell& c = cells[j];
      if (j == label) {
        if (c.text().empty()) in.fail(c.offset, line, line_start, "empty label cell");
        auto [it, added] =
            label_ids.emplace(std::string(c.text()), static_cast<int32_t>(t.label_values.size()));
        if (added) {
          if (t.label_values.size() >= 100000)
            in.fail(c.offset, line, line_start,
                    "more than 100000 distinct labels: is the label column the right one?");
          t.label_values.emplace_back(c.text());
        }
        t.label_index.push_back(it->second);
        continue;
      }
      float v = 0;
      switch (parse_number(c.text(), &v)) {
        case NumberStatus::ok:
          break;
        case NumberStatus::not_a_number:
          in.fail(c.offset, line, line_start,
                  c.text().empty() ? "empty cell where a number belongs"
                                   : quoted(c.text()) + " is not a number");
        case NumberStatus::nan:
          in.fail(c.offset, line, line_start, "NaN is not allowed in the features");
        case NumberStatus::infinite:
          in.fail(c.offset, line, line_start, "an infinite value is not allowed in the features");
        case NumberStatus::out_of_range:
          in.fail(c.offset, line, line_start, quoted(c.text()) + " is out of float32's range");
      }
      t.x.push_back(v);
    }
    ++t.rows;
  };
  if (!names && !counts) take(head, first_line, first_start, first_end);
  if (has_second) {
    do take(row, in.line(), in.line_start(), in.row_end());
    while (in.next_row(row));
  }
  if (t.rows == 0) throw DataError(file, static_cast<int64_t>(text.size()), "no data rows");
  if (counts) {
    const int64_t n = to_count(head[0].text()), f = to_count(head[1].text());
    if (n != t.rows)
      in.fail(head[0].offset, first_line, first_start,
              "the counts row says " + std::to_string(n) + " samples, but the file has " +
                  std::to_string(t.rows));
    if (f != t.features)
      in.fail(head[1].offset, first_line, first_start,
              "the counts row says " + std::to_string(f) + " features, but rows have " +
                  std::to_string(t.features));
  }
  return t;
}

}  // namespace dnnlab::data
