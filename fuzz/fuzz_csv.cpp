// CSV tables: a table or a DataError naming line, column and byte offset.
// The first byte chooses the options (header mode, label column), the rest
// is the text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "data/csv.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kHeaders[] = {"auto", "true", "false", "counts"};
  static const char* const kLabels[] = {"", "0", "1", "a"};
  dnnlab::data::CsvOptions o;
  o.header = kHeaders[data[0] & 3];
  o.label_column = kLabels[(data[0] >> 2) & 3];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const dnnlab::data::CsvTable t = dnnlab::data::parse_csv(text, o, "fuzz.csv");
    // What a table promises its readers.
    if (t.rows < 1 || t.features < 1) __builtin_trap();
    if (static_cast<int64_t>(t.x.size()) != t.rows * t.features) __builtin_trap();
    if (static_cast<int64_t>(t.label_index.size()) != t.rows) __builtin_trap();
    for (int32_t i : t.label_index)
      if (i < 0 || static_cast<size_t>(i) >= t.label_values.size()) __builtin_trap();
    for (float v : t.x)
      if (!(v == v) || v > 3.5e38f || v < -3.5e38f) __builtin_trap();
  } catch (const dnnlab::DataError& e) {
    if (e.offset() > static_cast<int64_t>(text.size())) __builtin_trap();
  }
  return 0;
}
