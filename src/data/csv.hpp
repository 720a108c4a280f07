// CSV tables: one sample per line, numeric feature cells and one label cell.
// Parsed from memory (data::read_file_bytes gives a file's text, gzip or
// not); every defect is a DataError naming the line and column, and the byte
// offset in the text.
//
//   CsvTable t = parse_csv("a,b,y\n1,2,cat\n3,4,dog\n", {}, "pets.csv");
//   // t.rows == 2, t.features == 2, t.x == {1, 2, 3, 4}, t.columns == {"a", "b"},
//   // t.label_values == {"cat", "dog"}, t.label_index == {0, 1}
//
// Format: cells separated by commas; a cell may be double-quoted ("" inside
// is a quote; no line breaks inside); spaces and tabs around a cell, a UTF-8
// byte-order mark and \r\n line ends are ignored, and so are blank lines.
// Every row has the same number of cells. Feature cells are finite numbers
// (as strtod reads them) within float32's range; the label cell is any
// non-empty text (numbers or names: mapping them to classes is the caller's).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nn/errors.hpp"

namespace dnnlab::data {

struct CsvOptions {
  // The label's column: a header name, or a 0-based index; "" is the last.
  std::string label_column;
  // The first row: "auto" (a header when a cell in it is not a number where
  // the second row has one; or a counts row, below), "true", "false", or
  // "counts": scikit-learn's form
  // `n_samples,n_features[,class names...]`, whose counts must match the data.
  std::string header = "auto";
};

struct CsvTable {
  int64_t rows = 0;
  int64_t features = 0;
  std::vector<float> x;                   // rows x features, row-major
  std::vector<std::string> label_values;  // distinct label cells, in first-seen order
  std::vector<int32_t> label_index;       // per row: its label's index in label_values
  std::vector<std::string> columns;       // feature names, from a header row (else empty)
  std::vector<std::string> class_names;   // from a counts row's names (else empty)
};

// Throws DataError(file, offset, "line L, column C: ...") for ragged rows,
// non-numeric, empty, NaN or infinite feature cells, an unterminated quote, a
// label column that is not there, a counts row that does not match, and a
// table with no data rows or fewer than two columns.
CsvTable parse_csv(std::string_view text, const CsvOptions& options, const std::string& file);

}  // namespace dnnlab::data
