// The data root check for submitted specs: inside passes; outside, '..',
// symbolic links out, relative paths and an unset root fail, naming the field.
#include "data/data_root.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/dataset.hpp"

namespace dnnlab::data {
namespace data_root_test {

namespace fs = std::filesystem;

struct RootDir {
  fs::path base = fs::temp_directory_path() / ("dnnlab-root-" + std::to_string(::getpid()));
  fs::path root = base / "data";
  RootDir() {
    fs::create_directories(root / "sub");
    std::ofstream(root / "sub" / "a.csv") << "1,0\n";
    std::ofstream(base / "secret.csv") << "a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n";
    fs::create_symlink(base / "secret.csv", root / "out.csv");
    fs::create_symlink(root / "sub" / "a.csv", root / "in.csv");
    fs::create_symlink(base, root / "updir");
  }
  ~RootDir() {
    std::error_code ec;
    fs::remove_all(base, ec);
  }
};

std::string field_of(const nn::DataSpec& d, const std::string& root) {
  try {
    check_data_root(d, root, "template.data");
  } catch (const SpecError& e) {
    return e.field();
  }
  return "";
}

TEST(DataRoot, InsideOnlyAfterResolvingLinksAndDots) {
  RootDir r;
  const std::string root = r.root.string();
  EXPECT_TRUE(inside_root((r.root / "sub/a.csv").string(), root));
  EXPECT_TRUE(inside_root((r.root / "sub/../sub/a.csv").string(), root));
  EXPECT_TRUE(inside_root((r.root / "in.csv").string(), root));       // a link that stays in
  EXPECT_TRUE(inside_root((r.root / "not-yet.csv").string(), root));  // does not exist (yet)
  EXPECT_TRUE(inside_root((r.root / "sub/a.csv").string(), root + "/"));
  EXPECT_FALSE(inside_root((r.root / "out.csv").string(), root));  // a link out
  EXPECT_FALSE(inside_root((r.root / "updir/secret.csv").string(), root));
  EXPECT_FALSE(inside_root((r.root / "../secret.csv").string(), root));
  EXPECT_FALSE(inside_root((r.base / "data-other/x.csv").string(), root));  // a sibling prefix
  EXPECT_FALSE(inside_root("/etc/passwd", root));
  EXPECT_FALSE(inside_root((r.root / "sub/a.csv").string(), ""));
}

TEST(DataRoot, ErrorsNameTheField) {
  RootDir r;
  const std::string root = r.root.string();
  nn::DataSpec d;
  d.path = (r.root / "sub/a.csv").string();
  EXPECT_EQ(field_of(d, root), "");
  EXPECT_EQ(field_of(d, ""), "template.data.path");  // no root: no files at all
  d.test_path = (r.root / "out.csv").string();
  EXPECT_EQ(field_of(d, root), "template.data.test_path");
  d.test_path.clear();
  d.labels = "sub/a.csv";  // relative: the workers would resolve it elsewhere
  EXPECT_EQ(field_of(d, root), "template.data.labels");
  d.labels.clear();
  d.test_labels = "/etc/passwd";
  EXPECT_EQ(field_of(d, root), "template.data.test_labels");
  nn::DataSpec named;  // a data set by name reads no file the spec names
  EXPECT_EQ(field_of(named, ""), "");
}

TEST(DataRoot, ScopeRefusesToOpenFilesOutsideBeforeReadingThem) {
  RootDir r;
  std::ofstream(r.root / "t.csv") << "a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n";
  LoadOptions in;
  in.path = (r.root / "t.csv").string();
  in.validation = 1;
  LoadOptions out = in;
  out.path = (r.base / "secret.csv").string();
  {
    DataRootScope scope(r.root.string());
    EXPECT_EQ(sample_shape(in).num_classes, 2);
    try {
      sample_shape(out);
      ADD_FAILURE() << "read a file outside the root";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("outside the server's data root"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(load(out), DataError);
    LoadOptions named;  // a data set by name is not the spec's file
    named.name = "synthetic";
    named.limit_train = 16;
    named.validation = 4;
    EXPECT_NO_THROW(sample_shape(named));
  }
  EXPECT_NO_THROW(sample_shape(out));  // outside the scope: any file, as for local runs
}

}  // namespace data_root_test
}  // namespace dnnlab::data
