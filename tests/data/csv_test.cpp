// CSV tables (data/csv.hpp): the forms real files take, and every defect
// named by line, column and byte offset.
#include "data/csv.hpp"

#include <gtest/gtest.h>

#include <string>

namespace dnnlab::data {
namespace {

CsvTable parse(const std::string& text, CsvOptions o = {}) {
  return parse_csv(text, o, "t.csv");
}

// The DataError parse_csv throws: its offset and message.
std::pair<int64_t, std::string> error_of(const std::string& text, CsvOptions o = {}) {
  try {
    parse(text, o);
  } catch (const DataError& e) {
    return {e.offset(), e.what()};
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return {-2, ""};
}

TEST(Csv, HeaderNamesAndTextLabels) {
  CsvTable t = parse("a,b,y\n1,2,cat\n3,4.5,dog\n-1e2,0,cat\n");
  EXPECT_EQ(t.rows, 3);
  EXPECT_EQ(t.features, 2);
  EXPECT_EQ(t.x, (std::vector<float>{1, 2, 3, 4.5f, -100, 0}));
  EXPECT_EQ(t.columns, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.label_values, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(t.label_index, (std::vector<int32_t>{0, 1, 0}));
}

TEST(Csv, NoHeaderLabelLastOrChosenByIndexOrName) {
  CsvTable t = parse("1,2,0\n3,4,1\n");
  EXPECT_EQ(t.rows, 2);
  EXPECT_TRUE(t.columns.empty());
  EXPECT_EQ(t.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(t.label_values, (std::vector<std::string>{"0", "1"}));

  t = parse("7,2,0\n8,4,1\n", {"0", "auto"});
  EXPECT_EQ(t.x, (std::vector<float>{2, 0, 4, 1}));
  EXPECT_EQ(t.label_values, (std::vector<std::string>{"7", "8"}));

  t = parse("species,w,h\nx,1,2\ny,3,4\n", {"species", "auto"});
  EXPECT_EQ(t.columns, (std::vector<std::string>{"w", "h"}));
  EXPECT_EQ(t.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(t.label_values, (std::vector<std::string>{"x", "y"}));
}

TEST(Csv, TextLabelsWithoutAHeaderAreData) {
  CsvTable t = parse("1,2,cat\n3,4,dog\n");
  EXPECT_EQ(t.rows, 2);
  EXPECT_TRUE(t.columns.empty());
  EXPECT_EQ(t.label_values, (std::vector<std::string>{"cat", "dog"}));
}

TEST(Csv, ExplicitHeaderModes) {
  // An all-numeric first row is data under auto, a header under true.
  EXPECT_EQ(parse("1,2,3\n4,5,6\n").rows, 2);
  CsvTable t = parse("1,2,3\n4,5,6\n", {"", "true"});
  EXPECT_EQ(t.rows, 1);
  EXPECT_EQ(t.columns, (std::vector<std::string>{"1", "2"}));
  // A header under false is data: its names are not numbers.
  EXPECT_NE(error_of("a,b,y\n1,2,3\n", {"", "false"})
                .second.find("line 1, column 1: 'a' is not a number"),
            std::string::npos);
}

TEST(Csv, ScikitLearnCountsRow) {
  const std::string wine = "3,2,class_0,class_1\n1.5,2,0\n3,4,1\n5,6,1\n";
  for (const char* mode : {"auto", "counts"}) {
    CsvTable t = parse(wine, {"", mode});
    EXPECT_EQ(t.rows, 3) << mode;
    EXPECT_EQ(t.features, 2);
    EXPECT_EQ(t.class_names, (std::vector<std::string>{"class_0", "class_1"}));
    EXPECT_EQ(t.x[0], 1.5f);
  }
  // The counts are checked against the data, and point at the count.
  auto [off, msg] = error_of("4,2,a,b\n1,2,0\n3,4,1\n5,6,1\n", {"", "counts"});
  EXPECT_EQ(off, 0);
  EXPECT_NE(msg.find("line 1, column 1: the counts row says 4 samples, but the file has 3"),
            std::string::npos)
      << msg;
  std::tie(off, msg) = error_of("3,5,a\n1,2,0\n3,4,1\n5,6,1\n", {"", "counts"});
  EXPECT_EQ(off, 2);
  EXPECT_NE(msg.find("line 1, column 3: the counts row says 5 features"), std::string::npos) << msg;
  std::tie(off, msg) = error_of("n,f\n1,2,0\n", {"", "counts"});
  EXPECT_NE(msg.find("header: counts needs a first row"), std::string::npos) << msg;
}

TEST(Csv, QuotesCrLfBomAndBlankLines) {
  CsvTable t = parse(
      "\xEF\xBB\xBF\"len, cm\",\"say \"\"hi\"\"\",y\r\n\r\n 1 , \"2\" ,\"a,b\"\r\n\n3,4,c\n\n");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"len, cm", "say \"hi\""}));
  EXPECT_EQ(t.rows, 2);
  EXPECT_EQ(t.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(t.label_values, (std::vector<std::string>{"a,b", "c"}));
  // No newline at the end of the last row.
  EXPECT_EQ(parse("1,2\n3,4").rows, 2);
}

TEST(Csv, RaggedRowsNameLineAndColumn) {
  // Too many cells: the first extra one; too few: the end of the line.
  auto [off, msg] = error_of("a,b,y\n1,2,0\n3,4,1,9\n");
  EXPECT_EQ(off, 18);
  EXPECT_NE(msg.find("t.csv at byte 18: line 3, column 7: ragged row: 4 cells, but 3"),
            std::string::npos)
      << msg;
  std::tie(off, msg) = error_of("1,2,0\n\n3,4\r\n");
  EXPECT_EQ(off, 10);
  EXPECT_NE(msg.find("line 3, column 4: ragged row: 2 cells, but 3"), std::string::npos) << msg;
  // The first row sets the width ("1,2\n3,4,5\n" would be a counts row).
  std::tie(off, msg) = error_of("1,2,3\n4,5,6,7\n");
  EXPECT_EQ(off, 12);
  EXPECT_NE(msg.find("line 2, column 7: ragged row: 4 cells, but 3 in the first row"),
            std::string::npos)
      << msg;
}

TEST(Csv, BadCellsNameLineAndColumn) {
  struct Case {
    std::string text, want;
    int64_t offset;
  };
  const Case cases[] = {
      {"a,b,y\n1,2,0\n3,x,1\n", "line 3, column 3: 'x' is not a number", 14},
      {"1,2,0\n3,,1\n", "line 2, column 3: empty cell where a number belongs", 8},
      {"1,2,0\n3,nan,1\n", "line 2, column 3: NaN is not allowed", 8},
      {"1,2,0\n3,NaN,1\n", "line 2, column 3: NaN is not allowed", 8},
      {"1,2,0\n-inf,2,1\n", "line 2, column 1: an infinite value is not allowed", 6},
      {"1,2,0\n1e39,2,1\n", "line 2, column 1: '1e39' is out of float32's range", 6},
      {"1,2,0\n1e999,2,1\n", "line 2, column 1: '1e999' is out of float32's range", 6},
      {"1,2,0\n1,2,\n", "line 2, column 5: empty label cell", 10},
      {"1,2,0\n1,\"2,0\n", "line 2, column 3: unterminated quoted cell", 8},
      {"1,2,0\n1,\"2\"x,0\n", "line 2, column 6: text after a quoted cell's closing quote", 11},
      {"1,2,0\n1,0x10,0\n", "line 2, column 3: '0x10' is not a number", 8},
      {"1,2,0\n1 2,3,0\n", "line 2, column 1: '1 2' is not a number", 6},
  };
  for (const Case& c : cases) {
    auto [off, msg] = error_of(c.text);
    EXPECT_NE(msg.find(c.want), std::string::npos) << c.text << "\n-> " << msg;
    EXPECT_EQ(off, c.offset) << c.text << "\n-> " << msg;
  }
  // Underflow is a zero, not an error.
  EXPECT_EQ(parse("1e-400,2,0\n").x[0], 0.f);
}

TEST(Csv, LabelColumnProblemsAndEmptyTables) {
  EXPECT_NE(error_of("a,b\n1,2\n", {"c", "auto"})
                .second.find("label_column 'c' is not a column; the columns are: a, b"),
            std::string::npos);
  EXPECT_NE(error_of("1,2\n3,4\n", {"name", "auto"}).second.find("has no header row"),
            std::string::npos);
  EXPECT_NE(error_of("1,2\n3,4\n", {"2", "auto"}).second.find("label_column 2 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of("").second.find("empty: no rows"), std::string::npos);
  EXPECT_NE(error_of("\n \n").second.find("empty: no rows"), std::string::npos);
  EXPECT_NE(error_of("a,b,y\n").second.find("no data rows"), std::string::npos);
  EXPECT_NE(error_of("1\n2\n").second.find("at least 2 columns"), std::string::npos);
  EXPECT_NE(error_of("1,2\n", {"", "maybe"}).second.find("header must be"), std::string::npos);
}

// Every prefix and every single-byte change of a valid table parses or is a
// DataError: never a crash, never another exception.
TEST(Csv, TruncatedAndGarbledTextIsAnErrorNeverACrash) {
  const std::string good = "3,2,a,b\n\"1\",2.5,0\n1e3,-4,1\n7,8,\"1\"\r\n";
  ASSERT_EQ(parse(good).rows, 3);
  const char garbage[] = {'\0', ',', '"', '\n', '\r', 'e', '-', '9', '\xff', ' '};
  int errors = 0;
  auto attempt = [&](const std::string& text) {
    try {
      parse(text);
    } catch (const DataError&) {
      ++errors;
    }
  };
  for (size_t n = 0; n <= good.size(); ++n) attempt(good.substr(0, n));
  for (size_t i = 0; i < good.size(); ++i)
    for (char g : garbage) {
      std::string bad = good;
      bad[i] = g;
      attempt(bad);
    }
  EXPECT_GT(errors, 50);
}

}  // namespace
}  // namespace dnnlab::data
