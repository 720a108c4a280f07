// Loading MNIST-style datasets: locate, hash, read, check, split, normalize.
#include "data/dataset.hpp"

#include <openssl/evp.h>
#include <zlib.h>

#include <array>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <numeric>

#include "data/data_root.hpp"
#include "data/files.hpp"
#include "data/normalize.hpp"

namespace dnnlab::data {
namespace {

namespace fs = std::filesystem;

// The four files, in the order they are hashed.
constexpr std::array<const char*, 4> kFiles = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
constexpr const char* kDefaultRoot = "/usr/share/datasets";
constexpr int64_t kImageSide = 28;

struct DatasetInfo {
  const char* name;
  std::vector<std::string> class_names;
};

const std::vector<DatasetInfo>& known_datasets() {
  static const std::vector<DatasetInfo> table = {
      {"fashion-mnist",
       {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
        "Ankle boot"}},
      {"mnist", {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}},
  };
  return table;
}

// Small tables that python3-sklearn installs, loaded through the CSV path.
// digits.csv.gz has no header (64 pixel counts 0..16, then the digit); the
// others open with scikit-learn's counts row, `n_samples,n_features,class
// names...`, which the CSV reader checks against the data.
struct TableInfo {
  const char* name;
  const char* file;
  const char* header;
};
constexpr TableInfo kTables[] = {
    {"digits", "digits.csv.gz", "false"},
    {"breast-cancer", "breast_cancer.csv", "counts"},
    {"wine", "wine_data.csv", "counts"},
    {"iris", "iris.csv", "counts"},
};
constexpr const char* kSklearnDataDir = "/usr/lib/python3/dist-packages/sklearn/datasets/data";

const TableInfo* table_info(const std::string& name) {
  for (const TableInfo& t : kTables)
    if (name == t.name) return &t;
  return nullptr;
}

const DatasetInfo& dataset_info(const std::string& name) {
  for (const auto& d : known_datasets())
    if (name == d.name) return d;
  throw DataError(name, -1,
                  "unknown dataset '" + name +
                      "' (known: fashion-mnist, mnist, synthetic, digits, breast-cancer, wine, "
                      "iris; or give a file with path:)");
}

// The table's file: --data <dir>/<file>, $DNNLAB_DATA_DIR/<name>/<file>,
// /usr/share/datasets/<name>/<file>, then python3-sklearn's copy.
std::string locate_table(const TableInfo& t, const std::string& override_dir) {
  std::vector<std::string> tried;
  if (!override_dir.empty()) {
    tried.push_back((fs::path(override_dir) / t.file).string());
  } else {
    if (const char* env = std::getenv("DNNLAB_DATA_DIR"); env && *env)
      tried.push_back((fs::path(env) / t.name / t.file).string());
    tried.push_back((fs::path(kDefaultRoot) / t.name / t.file).string());
    tried.push_back((fs::path(kSklearnDataDir) / t.file).string());
  }
  std::string list;
  for (const std::string& p : tried) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
    list += "\n  " + p;
  }
  throw DataError(tried.front(), -1,
                  std::string("dataset '") + t.name + "' not found; looked for:" + list +
                      "\nInstall it with `apt-get install python3-sklearn`, or point --data <dir> "
                      "at a directory holding " +
                      t.file);
}

LoadOptions table_options(const TableInfo& t, const LoadOptions& opt) {
  LoadOptions o = opt;
  o.path = locate_table(t, opt.dir);
  o.format = "csv";
  o.header = t.header;
  o.label_column.clear();
  o.labels.clear();
  o.test_path.clear();
  o.test_labels.clear();
  return o;
}

// dir/<base>.gz if present, else dir/<base>, else "".
std::string find_file(const fs::path& dir, const char* base) {
  std::error_code ec;
  fs::path gz = dir / (std::string(base) + ".gz");
  if (fs::is_regular_file(gz, ec)) return gz.string();
  fs::path raw = dir / base;
  if (fs::is_regular_file(raw, ec)) return raw.string();
  return {};
}

}  // namespace

std::string sha256_files(const std::vector<std::string>& paths) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw DataError(paths[0], -1, "cannot initialise sha256");
  std::vector<char> buf(size_t{1} << 20);
  for (const auto& p : paths) {
    std::ifstream f(p, std::ios::binary);
    if (!f) throw DataError(p, -1, "cannot open for hashing");
    while (f) {
      f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(f.gcount()));
    }
    if (f.bad()) throw DataError(p, -1, "read error while hashing");
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  std::string hex;
  static const char* digits = "0123456789abcdef";
  for (unsigned i = 0; i < len; ++i) {
    hex += digits[md[i] >> 4];
    hex += digits[md[i] & 15];
  }
  return hex;
}

namespace {

struct RawSplit {
  IdxArray images, labels;
  std::string images_path, labels_path;
  int64_t count = 0;
  int64_t features = 0;
};

// Checks one images/labels pair and the label range.
RawSplit read_pair(const std::string& images_path, const std::string& labels_path,
                   const std::string& dataset, int num_classes) {
  RawSplit s{read_idx(images_path), read_idx(labels_path), images_path, labels_path};
  const auto& idims = s.images.dims;
  if (idims.size() < 2)
    throw DataError(images_path, 3,
                    "images need at least 2 dimensions (count, pixels...), found " +
                        std::to_string(idims.size()));
  if (s.labels.dims.size() != 1)
    throw DataError(labels_path, 3,
                    "labels need 1 dimension, found " + std::to_string(s.labels.dims.size()));
  if (idims.size() != 3 || idims[1] != kImageSide || idims[2] != kImageSide) {
    std::string got;
    for (size_t i = 1; i < idims.size(); ++i) got += (i > 1 ? "x" : "") + std::to_string(idims[i]);
    throw DataError(images_path, 8, dataset + " images must be 28x28, found " + got);
  }
  s.count = idims[0];
  s.features = 1;
  for (size_t i = 1; i < idims.size(); ++i) s.features *= idims[i];
  if (s.labels.dims[0] != s.count)
    throw DataError(labels_path, 4,
                    std::to_string(s.labels.dims[0]) + " labels but " + std::to_string(s.count) +
                        " images in " + images_path);
  const uint8_t* y = s.labels.bytes.data();
  for (int64_t i = 0; i < s.count; ++i)
    if (y[i] >= num_classes)
      throw DataError(labels_path, 8 + i,
                      "label " + std::to_string(y[i]) + " of sample " + std::to_string(i) +
                          " is out of range [0, " + std::to_string(num_classes) + ")");
  return s;
}

// The dims in an IDX header, or {} when it cannot be read; used only to size
// buffers early, never to judge the file (read_idx does that).
std::vector<int64_t> peek_idx_dims(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return {};
  uint8_t h[4 + 4 * 4];
  int got = gzread(f, h, 4);
  std::vector<int64_t> dims;
  if (got == 4 && h[0] == 0 && h[1] == 0 && h[3] >= 1 && h[3] <= 4 &&
      gzread(f, h + 4, 4u * h[3]) == 4 * h[3]) {
    for (int i = 0; i < h[3]; ++i) {
      const uint8_t* b = h + 4 + 4 * i;
      dims.push_back((int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3]);
    }
  }
  gzclose(f);
  return dims;
}

// x = lut[pixel] for each chosen row (and the bytes themselves when keep_raw).
// `storage` may already hold enough memory (allocated while inflating).
Split make_split(const RawSplit& raw, const int64_t* rows, int64_t n, const float* lut,
                 bool keep_raw, nn::Tensor storage) {
  Split s;
  const int64_t f = raw.features;
  assert(f == kImageSide * kImageSide);
  s.x = std::move(storage);
  s.x.resize(nn::Shape{n, 1, kImageSide, kImageSide});  // f == 28 * 28, checked on reading
  s.y.resize(static_cast<size_t>(n));
  if (keep_raw) s.raw.resize(static_cast<size_t>(n * f));
  float* dst = s.x.data();
  const uint8_t* src = raw.images.bytes.data();
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* in = src + rows[r] * f;
    normalize_bytes(in, f, lut, dst + r * f);
    if (keep_raw) std::memcpy(s.raw.data() + r * f, in, static_cast<size_t>(f));
    s.y[static_cast<size_t>(r)] = raw.labels.bytes[static_cast<size_t>(rows[r])];
  }
  return s;
}

}  // namespace

void shuffle_indices(std::vector<int64_t>& idx, uint64_t seed) {
  uint64_t state = seed;
  auto next = [&state]() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (size_t i = idx.size(); i > 1; --i) {
    // Unbiased draw from [0, i) by rejection, in plain uint64 arithmetic.
    const uint64_t bound = i;
    const uint64_t threshold = (0 - bound) % bound;
    uint64_t r;
    do r = next();
    while (r < threshold);
    std::swap(idx[i - 1], idx[static_cast<size_t>(r % bound)]);
  }
}

std::string resolve_dir(const std::string& name, const std::string& override_dir) {
  std::string dir, source;
  if (!override_dir.empty()) {
    dir = override_dir;
    source = "from --data";
  } else if (const char* env = std::getenv("DNNLAB_DATA_DIR"); env && *env) {
    dir = (fs::path(env) / name).string();
    source = "from DNNLAB_DATA_DIR=" + std::string(env);
  } else {
    dir = (fs::path(kDefaultRoot) / name).string();
    source = "the default";
  }
  std::string wanted;
  for (const char* f : kFiles) wanted += std::string("\n  ") + f + "[.gz]";
  const std::string help = "\nInstall it with `apt-get install dataset-" + name +
                           "`, or point --data <dir> or DNNLAB_DATA_DIR (which holds <name>/ "
                           "subdirectories) at a directory containing these files.";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw DataError(dir, -1,
                    "dataset '" + name + "' not found: no such directory (" + source +
                        "); looked for:" + wanted + help);
  std::string missing;
  for (const char* f : kFiles)
    if (find_file(dir, f).empty()) missing += std::string("\n  ") + f + "[.gz]";
  if (!missing.empty())
    throw DataError(
        dir, -1, "dataset '" + name + "' incomplete (" + source + "); missing:" + missing + help);
  return dir;
}

namespace {

// "synthetic": 784 features, 10 classes, generated from a fixed seed: each
// class shifts its own block of 78 features, so models can learn it. Sizes:
// limit_train (default 1000) train, `validation` val and as many test samples. For
// tests and scheduling benchmarks that should not depend on files.
Split synthetic_split(int64_t n, uint64_t seed) {
  Split s;
  s.x.resize(nn::Shape{n, 784});
  s.y.resize(n);
  uint64_t state = seed;
  auto next = [&state] {  // splitmix64: the same numbers everywhere
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int64_t i = 0; i < n; ++i) {
    const int32_t label = static_cast<int32_t>(next() % 10);
    s.y[i] = label;
    float* row = s.x.data() + i * 784;
    for (int j = 0; j < 784; ++j) {
      const float u = static_cast<float>(next() >> 40) * 0x1.0p-24f;  // [0, 1)
      row[j] = 2.f * u - 1.f + (j / 78 == label ? 1.f : 0.f);
    }
  }
  return s;
}

Dataset synthetic(const LoadOptions& opt) {
  if (opt.validation < 0) throw DataError("synthetic", -1, "validation must be >= 0");
  Dataset ds;
  ds.name = "synthetic";
  ds.dir = "(generated)";
  ds.sample_shape = nn::Shape{784};
  ds.num_classes = 10;
  for (int c = 0; c < 10; ++c) ds.class_names.push_back(std::to_string(c));
  ds.train = synthetic_split(opt.limit_train > 0 ? opt.limit_train : 1000, 1);
  ds.val = synthetic_split(opt.validation, 2);
  ds.test = synthetic_split(opt.validation, 3);
  ds.sha256 = "synthetic-v1";
  ds.normalize = "none";
  return ds;
}

}  // namespace

LoadOptions load_options(const nn::DataSpec& spec, const std::string& data_dir) {
  LoadOptions o;
  o.name = spec.dataset;
  o.dir = data_dir;
  o.validation = spec.validation;
  o.normalize = spec.normalize;
  o.limit_train = spec.limit_train;
  o.path = spec.path;
  o.format = spec.format;
  o.labels = spec.labels;
  o.test_path = spec.test_path;
  o.test_labels = spec.test_labels;
  o.test_fraction = spec.test_fraction;
  o.label_column = spec.label_column;
  o.header = spec.header;
  return o;
}

SampleShape sample_shape(const LoadOptions& opt) {
  if (!opt.path.empty()) {
    check_scoped_root(opt.path, opt.labels, opt.test_path, opt.test_labels);
    return files_sample_shape(opt);
  }
  if (const TableInfo* t = table_info(opt.name)) return files_sample_shape(table_options(*t, opt));
  if (opt.name == "synthetic")
    return {nn::Shape{784}, 10, opt.limit_train > 0 ? opt.limit_train : 1000};
  const DatasetInfo& info = dataset_info(opt.name);
  const std::string dir = resolve_dir(opt.name, opt.dir);
  const std::string path = find_file(dir, kFiles[0]);
  if (path.empty()) throw DataError(dir, -1, std::string("no ") + kFiles[0] + "[.gz] in it");
  std::vector<int64_t> dims = peek_idx_dims(path);
  // Unreadable: the full reader names what is wrong and where (a corrupt
  // gzip stream, a bad header byte); it fails within the first bytes.
  if (dims.empty()) dims = read_idx(path).dims;
  if (dims.size() != 3 || dims[1] != kImageSide || dims[2] != kImageSide) {
    std::string got;
    for (size_t i = 1; i < dims.size(); ++i) got += (i > 1 ? "x" : "") + std::to_string(dims[i]);
    throw DataError(path, 8, opt.name + " images must be 28x28, found " + got);
  }
  return {nn::Shape{1, dims[1], dims[2]}, static_cast<int>(info.class_names.size()), dims[0]};
}

Dataset load(const LoadOptions& opt) {
  if (!opt.path.empty()) {
    check_scoped_root(opt.path, opt.labels, opt.test_path, opt.test_labels);
    return load_files(opt);
  }
  if (const TableInfo* t = table_info(opt.name)) {
    Dataset ds = load_files(table_options(*t, opt));
    ds.name = opt.name;
    return ds;
  }
  if (opt.name == "synthetic") return synthetic(opt);
  const DatasetInfo& info = dataset_info(opt.name);
  Dataset ds;
  ds.name = opt.name;
  ds.dir = resolve_dir(opt.name, opt.dir);
  ds.num_classes = static_cast<int>(info.class_names.size());
  ds.class_names = info.class_names;
  if (opt.normalize != "standard" && opt.normalize != "unit")
    throw DataError(ds.dir, -1,
                    "normalize must be \"standard\" or \"unit\", got \"" + opt.normalize + "\"");

  std::array<std::string, 4> paths;
  for (size_t i = 0; i < kFiles.size(); ++i) paths[i] = find_file(ds.dir, kFiles[i]);
  // Inflating the train images is the long pole; hash and read the test set
  // beside it. Results do not depend on the threads.
  auto train_future =
      std::async(std::launch::async, read_pair, paths[0], paths[1], opt.name, ds.num_classes);
  RawSplit test;
  nn::Tensor train_x, val_x, test_x;
  try {
    ds.sha256 = sha256_files({paths.begin(), paths.end()});
    test = read_pair(paths[2], paths[3], opt.name, ds.num_classes);
    // Fresh memory costs a page fault per 4 KiB, as much as filling it: take
    // those faults now, beside the inflate. The size is trusted only up to
    // deflate's largest ratio (1032:1) times the file's size.
    std::vector<int64_t> dims = peek_idx_dims(paths[0]);
    std::error_code ec;
    const auto disk = static_cast<int64_t>(fs::file_size(paths[0], ec));
    if (!ec && dims.size() == 3 && dims[0] > opt.validation && opt.validation >= 0 &&
        dims[0] * dims[1] * dims[2] <= 1032 * disk && dims[1] * dims[2] == test.features) {
      int64_t n_train = dims[0] - opt.validation;
      if (opt.limit_train > 0 && opt.limit_train < n_train) n_train = opt.limit_train;
      train_x.resize(nn::Shape{n_train, 1, kImageSide, kImageSide});
      val_x.resize(nn::Shape{opt.validation, 1, kImageSide, kImageSide});
    }
    test_x.resize(nn::Shape{test.count, 1, kImageSide, kImageSide});
  } catch (...) {
    train_future.wait();
    throw;
  }
  RawSplit train = train_future.get();
  if (test.features != train.features)  // unreachable while both must be 28x28
    throw DataError(paths[2], 8, "test images differ in size from train images");
  // Images keep their shape end to end ([channels, height, width]); Dense
  // flattens whatever it gets, convolutions need it.
  ds.sample_shape = nn::Shape{1, kImageSide, kImageSide};

  if (opt.validation < 0 || opt.validation >= train.count)
    throw DataError(paths[0], -1,
                    "validation " + std::to_string(opt.validation) +
                        " must be in [0, number of train samples = " + std::to_string(train.count) +
                        ")");
  std::vector<int64_t> order(static_cast<size_t>(train.count));
  std::iota(order.begin(), order.end(), int64_t{0});
  shuffle_indices(order, opt.split_seed);
  const int64_t n_val = opt.validation;
  int64_t n_train = train.count - n_val;
  if (opt.limit_train > 0 && opt.limit_train < n_train) n_train = opt.limit_train;
  const int64_t* train_rows = order.data();
  const int64_t* val_rows = order.data() + (train.count - n_val);

  // Exact statistics from a histogram of the train split's bytes.
  std::array<int64_t, 256> hist{};
  if (opt.normalize == "standard") {
    const uint8_t* px = train.images.bytes.data();
    for (int64_t r = 0; r < n_train; ++r) {
      const uint8_t* row = px + train_rows[r] * train.features;
      for (int64_t k = 0; k < train.features; ++k) ++hist[row[k]];
    }
  }
  ds.normalize = opt.normalize;
  ds.lut = byte_lut(hist, opt.normalize);
  const float* lut = ds.lut.data();

  // Fill the train split on a second thread.
  auto train_split = std::async(std::launch::async, make_split, std::cref(train), train_rows,
                                n_train, lut, opt.keep_raw, std::move(train_x));
  std::vector<int64_t> test_rows(static_cast<size_t>(test.count));
  std::iota(test_rows.begin(), test_rows.end(), int64_t{0});
  ds.val = make_split(train, val_rows, n_val, lut, opt.keep_raw, std::move(val_x));
  ds.test = make_split(test, test_rows.data(), test.count, lut, opt.keep_raw, std::move(test_x));
  ds.train = train_split.get();
  return ds;
}

}  // namespace dnnlab::data
