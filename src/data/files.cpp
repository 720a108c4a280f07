// Data sets from files by path (files.hpp): read each format into Samples,
// map labels to classes, split, normalize.
#include "data/files.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>

#include "data/csv.hpp"
#include "data/file_bytes.hpp"
#include "data/idx.hpp"
#include "data/normalize.hpp"
#include "data/npy.hpp"

namespace dnnlab::data {
namespace {

namespace fs = std::filesystem;

// Classes are numbered 0..kMaxClasses-1 (browser shards take up to 256).
constexpr int64_t kMaxClasses = 1000;

// One file's (or archive's) samples, before splitting.
struct Samples {
  std::string file;  // named in errors about the data as a whole
  nn::Shape sample;
  int64_t count = 0;
  std::vector<uint8_t> bytes;  // uint8 data (IDX, uint8 arrays), count x features
  std::vector<float> values;   // other data, count x features
  // Labels: numbers (IDX, arrays), or a CSV's label cells.
  std::vector<int64_t> labels;
  bool text_labels = false;
  std::vector<std::string> label_values;
  std::vector<int32_t> label_index;
  std::vector<std::string> class_names;  // a CSV counts row's
  int64_t features() const { return sample.numel(); }
};

// [features] for rank 1, [1, H, W] for rank 2, [C, H, W] for rank 3.
nn::Shape sample_of(const std::vector<int64_t>& dims, const std::string& file, int64_t offset) {
  const size_t r = dims.size() - 1;  // dims[0] is the sample count
  if (r < 1 || r > 3)
    throw DataError(file, offset,
                    "samples need 1 to 3 dimensions after the sample count ([N, F], [N, H, W] "
                    "or [N, C, H, W]), found " +
                        std::to_string(r));
  nn::Shape s;
  if (r == 2) s = nn::Shape{1, dims[1], dims[2]};
  for (size_t i = 1; i < dims.size() && r != 2; ++i) s[s.rank++] = dims[i];
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] <= 0) throw DataError(file, offset, "dimension " + std::to_string(i) + " is 0");
  return s;
}

Samples read_csv_file(const std::string& path, const LoadOptions& opt) {
  CsvTable t = parse_csv(read_file_bytes(path), CsvOptions{opt.label_column, opt.header}, path);
  Samples s;
  s.file = path;
  s.sample = nn::Shape{t.features};
  s.count = t.rows;
  s.values = std::move(t.x);
  s.text_labels = true;
  s.label_values = std::move(t.label_values);
  s.label_index = std::move(t.label_index);
  s.class_names = std::move(t.class_names);
  return s;
}

void check_label(double v, const std::string& file, int64_t offset, int64_t i) {
  if (!(v >= 0 && v < kMaxClasses && v == std::floor(v)))
    throw DataError(file, offset,
                    "label " + (std::isfinite(v) ? std::to_string(v) : std::string("NaN/inf")) +
                        " of sample " + std::to_string(i) + " is not a class number in [0, " +
                        std::to_string(kMaxClasses) + ")");
}

Samples read_idx_files(const std::string& images, const std::string& labels) {
  IdxArray im = read_idx(images);
  if (im.dims.size() < 2)
    throw DataError(images, 3,
                    "images need at least 2 dimensions (count, pixels...), found " +
                        std::to_string(im.dims.size()));
  Samples s;
  s.file = images;
  s.sample = sample_of(im.dims, images, 3);
  s.count = im.dims[0];
  s.bytes = std::move(im.bytes);
  IdxArray lb = read_idx(labels);
  if (lb.dims.size() != 1)
    throw DataError(labels, 3, "labels need 1 dimension, found " + std::to_string(lb.dims.size()));
  if (lb.dims[0] != s.count)
    throw DataError(labels, 4,
                    std::to_string(lb.dims[0]) + " labels but " + std::to_string(s.count) +
                        " images in " + images);
  s.labels.assign(lb.bytes.begin(), lb.bytes.end());  // bytes: always < 256 <= kMaxClasses
  return s;
}

Samples from_arrays(const NpyArray& x, const std::string& xname, const NpyArray& y,
                    const std::string& yname) {
  if (x.shape.size() < 2)
    throw DataError(xname, 8,
                    "the samples need at least 2 dimensions ([N, features], [N, H, W] or "
                    "[N, C, H, W]), found shape " +
                        x.shape_str());
  Samples s;
  s.file = xname;
  s.sample = sample_of(x.shape, xname, 8);
  s.count = x.shape[0];
  const int64_t n = x.count();
  if (x.kind == 'u' && x.item_size == 1) {
    s.bytes.assign(x.data.begin(), x.data.end());
  } else {
    s.values.resize(static_cast<size_t>(n));
    const int64_t f = s.features();
    for (int64_t i = 0; i < n; ++i) {
      const double v = x.value(i);
      if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max())
        throw DataError(xname, x.data_offset + i * x.item_size,
                        std::string(std::isnan(v)   ? "NaN"
                                    : std::isinf(v) ? "an infinite value"
                                                    : "a value beyond float32") +
                            " at sample " + std::to_string(i / f) + ", element " +
                            std::to_string(i % f) + " (" + x.dtype() + ")");
      s.values[static_cast<size_t>(i)] = static_cast<float>(v);
    }
  }
  const bool column = y.shape.size() == 2 && y.shape[1] == 1;
  if (y.shape.size() != 1 && !column)
    throw DataError(yname, 8, "labels need shape (N,) or (N, 1), found " + y.shape_str());
  if (y.shape[0] != s.count)
    throw DataError(yname, 8,
                    std::to_string(y.shape[0]) + " labels but " + std::to_string(s.count) +
                        " samples in " + xname);
  s.labels.resize(static_cast<size_t>(s.count));
  for (int64_t i = 0; i < s.count; ++i) {
    const double v = y.value(i);
    check_label(v, yname, y.data_offset + i * y.item_size, i);
    s.labels[static_cast<size_t>(i)] = static_cast<int64_t>(v);
  }
  return s;
}

Samples read_npy_files(const std::string& xpath, const std::string& ypath) {
  const NpyArray x = parse_npy(read_file_bytes(xpath), xpath);
  const NpyArray y = parse_npy(read_file_bytes(ypath), ypath);
  return from_arrays(x, xpath, y, ypath);
}

// The arrays `xs`/`ys` (the first of each list present) of an archive.
std::optional<Samples> npz_pair(const std::vector<NamedArray>& arrays, const std::string& file,
                                std::initializer_list<const char*> xs,
                                std::initializer_list<const char*> ys, bool required) {
  auto find = [&](std::initializer_list<const char*> names) -> const NamedArray* {
    for (const char* n : names)
      for (const NamedArray& a : arrays)
        if (a.name == n) return &a;
    return nullptr;
  };
  const NamedArray* x = find(xs);
  const NamedArray* y = find(ys);
  if (!x || !y) {
    if (!required && !x && !y) return std::nullopt;
    std::string have, want;
    for (const NamedArray& a : arrays) have += (have.empty() ? "" : ", ") + a.name;
    for (const char* n : !x ? xs : ys) want += (want.empty() ? "" : " or ") + std::string(n);
    throw DataError(file, -1,
                    "no array named " + want +
                        " in the archive (it holds: " + (have.empty() ? "nothing" : have) + ")");
  }
  return from_arrays(x->array, file + ":" + x->name + ".npy", y->array,
                     file + ":" + y->name + ".npy");
}

const std::string& need(const std::string& v, const char* key, const std::string& format) {
  if (v.empty())
    throw DataError(key, -1,
                    std::string("a ") + format + " data set needs `" + key +
                        "`: the labels file beside the samples");
  return v;
}

struct Files {
  Samples train;
  std::optional<Samples> test;
  std::vector<std::string> hashed;  // every file read, in a fixed order
};

Files read_files(const LoadOptions& opt) {
  const std::string format = file_format(opt);
  Files f;
  for (const std::string* p : {&opt.path, &opt.labels, &opt.test_path, &opt.test_labels})
    if (!p->empty()) f.hashed.push_back(*p);
  if (format == "csv") {
    f.train = read_csv_file(opt.path, opt);
    if (!opt.test_path.empty()) f.test = read_csv_file(opt.test_path, opt);
  } else if (format == "idx") {
    f.train = read_idx_files(opt.path, need(opt.labels, "labels", "idx"));
    if (!opt.test_path.empty())
      f.test = read_idx_files(opt.test_path, need(opt.test_labels, "test_labels", "idx"));
  } else if (format == "npy") {
    f.train = read_npy_files(opt.path, need(opt.labels, "labels", "npy"));
    if (!opt.test_path.empty())
      f.test = read_npy_files(opt.test_path, need(opt.test_labels, "test_labels", "npy"));
  } else {  // npz
    const std::vector<NamedArray> arrays = read_npz(read_file_bytes(opt.path), opt.path);
    f.train = *npz_pair(arrays, opt.path, {"x_train", "x"}, {"y_train", "y"}, true);
    if (!opt.test_path.empty()) {
      const std::vector<NamedArray> t = read_npz(read_file_bytes(opt.test_path), opt.test_path);
      f.test = npz_pair(t, opt.test_path, {"x_test", "x"}, {"y_test", "y"}, true);
    } else {
      f.test = npz_pair(arrays, opt.path, {"x_test"}, {"y_test"}, false);
      if (f.test && opt.test_fraction > 0)
        throw DataError(opt.path, -1,
                        "the archive has x_test and y_test, and test_fraction asks to take a "
                        "test split from x_train as well: drop one");
    }
  }
  if (f.test) {
    if (!(f.test->sample == f.train.sample))
      throw DataError(f.test->file, -1,
                      "test samples are " + f.test->sample.str() + " but training samples are " +
                          f.train.sample.str() + " (" + f.train.file + ")");
    // uint8 beside other values: both as floats.
    if (f.train.bytes.empty() != f.test->bytes.empty())
      for (Samples* s : {&f.train, &*f.test})
        if (!s->bytes.empty()) {
          s->values.assign(s->bytes.begin(), s->bytes.end());
          s->bytes.clear();
        }
  }
  return f;
}

bool integral_label(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 6) return false;
  int64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  *v = n;
  return true;
}

// Labels to class numbers, for both splits; the class names.
std::vector<std::string> assign_classes(Files& f) {
  std::vector<Samples*> all = {&f.train};
  if (f.test) all.push_back(&*f.test);
  int64_t classes = 0;
  std::vector<std::string> names;
  if (!f.train.text_labels) {
    for (Samples* s : all)
      for (int64_t y : s->labels) classes = std::max(classes, y + 1);
    for (int64_t c = 0; c < classes; ++c) names.push_back(std::to_string(c));
    return names;
  }
  // CSV: numbers 0..k-1 when every label cell is a whole number, else names.
  bool numbers = true;
  for (Samples* s : all)
    for (const std::string& v : s->label_values) {
      int64_t n = 0;
      numbers = numbers && integral_label(v, &n);
      if (numbers) classes = std::max(classes, n + 1);
    }
  if (numbers) {
    if (classes > kMaxClasses)
      throw DataError(f.train.file, -1,
                      "labels go up to " + std::to_string(classes - 1) + ", beyond the " +
                          std::to_string(kMaxClasses) + " classes dnnlab takes");
    for (Samples* s : all) {
      s->labels.resize(s->label_index.size());
      for (size_t i = 0; i < s->label_index.size(); ++i)
        integral_label(s->label_values[static_cast<size_t>(s->label_index[i])], &s->labels[i]);
    }
    if (static_cast<int64_t>(f.train.class_names.size()) == classes) return f.train.class_names;
    for (int64_t c = 0; c < classes; ++c) names.push_back(std::to_string(c));
    return names;
  }
  std::set<std::string> distinct;
  for (Samples* s : all) distinct.insert(s->label_values.begin(), s->label_values.end());
  if (static_cast<int64_t>(distinct.size()) > kMaxClasses)
    throw DataError(f.train.file, -1,
                    std::to_string(distinct.size()) + " distinct labels, more than the " +
                        std::to_string(kMaxClasses) + " classes dnnlab takes");
  names.assign(distinct.begin(), distinct.end());  // sorted: the same classes on every run
  for (Samples* s : all) {
    std::vector<int64_t> id(s->label_values.size());
    for (size_t i = 0; i < id.size(); ++i)
      id[i] = std::lower_bound(names.begin(), names.end(), s->label_values[i]) - names.begin();
    s->labels.resize(s->label_index.size());
    for (size_t i = 0; i < s->label_index.size(); ++i)
      s->labels[i] = id[static_cast<size_t>(s->label_index[i])];
  }
  return names;
}

// How the rows of the training file divide: test (a fraction), then
// validation, come off the end of the shuffled order.
struct Plan {
  std::vector<int64_t> order;
  int64_t n_test = 0, n_val = 0, n_train = 0, available = 0;
};

Plan plan(const Samples& train, bool has_test, const LoadOptions& opt) {
  Plan p;
  const int64_t n = train.count;
  if (!(opt.test_fraction >= 0 && opt.test_fraction < 1))
    throw DataError(opt.path, -1, "test_fraction must be in [0, 1)");
  if (!has_test && opt.test_fraction > 0)
    p.n_test = std::max<int64_t>(1, std::llround(opt.test_fraction * static_cast<double>(n)));
  p.available = n - p.n_test;
  if (p.available < 1)
    throw DataError(opt.path, -1,
                    "test_fraction " + std::to_string(opt.test_fraction) + " of " +
                        std::to_string(n) + " samples leaves none to train on");
  if (opt.validation < 0 || opt.validation >= p.available)
    throw DataError(opt.path, -1,
                    "validation " + std::to_string(opt.validation) +
                        " must be in [0, number of train samples = " + std::to_string(p.available) +
                        ")");
  p.n_val = opt.validation;
  p.n_train = p.available - p.n_val;
  if (opt.limit_train > 0 && opt.limit_train < p.n_train) p.n_train = opt.limit_train;
  p.order.resize(static_cast<size_t>(n));
  std::iota(p.order.begin(), p.order.end(), int64_t{0});
  shuffle_indices(p.order, opt.split_seed);
  return p;
}

// Per-feature x' = (x - shift) * scale for float data.
struct FeatureScale {
  std::vector<double> shift, scale;
};

FeatureScale feature_scale(const Samples& s, const int64_t* rows, int64_t n,
                           const std::string& normalize) {
  const int64_t f = s.features();
  FeatureScale fs{std::vector<double>(static_cast<size_t>(f), 0.0),
                  std::vector<double>(static_cast<size_t>(f), 1.0)};
  if (n == 0) return fs;
  if (normalize == "standard") {
    std::vector<double> sum(static_cast<size_t>(f), 0.0), sq(static_cast<size_t>(f), 0.0);
    for (int64_t r = 0; r < n; ++r) {
      const float* row = s.values.data() + rows[r] * f;
      for (int64_t j = 0; j < f; ++j) sum[j] += row[j];
    }
    for (int64_t j = 0; j < f; ++j) fs.shift[j] = sum[j] / static_cast<double>(n);
    for (int64_t r = 0; r < n; ++r) {
      const float* row = s.values.data() + rows[r] * f;
      for (int64_t j = 0; j < f; ++j) {
        const double d = row[j] - fs.shift[j];
        sq[j] += d * d;
      }
    }
    for (int64_t j = 0; j < f; ++j) {
      const double sd = std::sqrt(sq[j] / static_cast<double>(n));
      fs.scale[j] = sd > 1e-12 ? 1.0 / sd : 1.0;  // a constant feature: only centred
    }
  } else {  // unit: [min, max] of the train split -> [0, 1]
    std::vector<double> lo(static_cast<size_t>(f), std::numeric_limits<double>::infinity()),
        hi(static_cast<size_t>(f), -std::numeric_limits<double>::infinity());
    for (int64_t r = 0; r < n; ++r) {
      const float* row = s.values.data() + rows[r] * f;
      for (int64_t j = 0; j < f; ++j) {
        lo[j] = std::min<double>(lo[j], row[j]);
        hi[j] = std::max<double>(hi[j], row[j]);
      }
    }
    for (int64_t j = 0; j < f; ++j) {
      fs.shift[j] = lo[j];
      fs.scale[j] = hi[j] - lo[j] > 1e-12 ? 1.0 / (hi[j] - lo[j]) : 1.0;
    }
  }
  return fs;
}

Split make_split(const Samples& s, const int64_t* rows, int64_t n, const std::vector<float>& lut,
                 const FeatureScale& fs, bool keep_raw) {
  Split out;
  const int64_t f = s.features();
  nn::Shape shape;
  shape[shape.rank++] = n;
  for (int i = 0; i < s.sample.rank; ++i) shape[shape.rank++] = s.sample[i];
  out.x.resize(shape);
  out.y.resize(static_cast<size_t>(n));
  float* dst = out.x.data();
  const bool bytes = !s.bytes.empty();
  if (bytes && keep_raw) out.raw.resize(static_cast<size_t>(n * f));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t row = rows[r];
    if (bytes) {
      const uint8_t* in = s.bytes.data() + row * f;
      normalize_bytes(in, f, lut.data(), dst + r * f);
      if (keep_raw) std::copy(in, in + f, out.raw.begin() + r * f);
    } else {
      const float* in = s.values.data() + row * f;
      for (int64_t j = 0; j < f; ++j)
        dst[r * f + j] = static_cast<float>((in[j] - fs.shift[j]) * fs.scale[j]);
    }
    out.y[static_cast<size_t>(r)] = static_cast<int32_t>(s.labels[static_cast<size_t>(row)]);
  }
  return out;
}

}  // namespace

std::string file_format(const LoadOptions& opt) {
  if (!opt.format.empty()) {
    if (opt.format == "csv" || opt.format == "idx" || opt.format == "npy" || opt.format == "npz")
      return opt.format;
    throw DataError(opt.path, -1, "format must be csv, idx, npy or npz, got '" + opt.format + "'");
  }
  std::string name = fs::path(opt.path).filename().string();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto ends = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends(".csv") || ends(".csv.gz")) return "csv";
  if (ends(".npy")) return "npy";
  if (ends(".npz")) return "npz";
  if (name.find("idx") != std::string::npos || ends("ubyte") || ends("ubyte.gz")) return "idx";
  throw DataError(opt.path, -1,
                  "cannot tell the format from the file's name (.csv, .csv.gz, .npy, .npz, or "
                  "an IDX name with 'idx' or ending in 'ubyte'); set format: csv, idx, npy or npz");
}

Dataset load_files(const LoadOptions& opt) {
  if (opt.normalize != "standard" && opt.normalize != "unit")
    throw DataError(opt.path, -1,
                    "normalize must be \"standard\" or \"unit\", got \"" + opt.normalize + "\"");
  Files f = read_files(opt);
  Dataset ds;
  ds.name = fs::path(opt.path).filename().string();
  ds.dir = fs::path(opt.path).parent_path().string();
  ds.class_names = assign_classes(f);
  ds.num_classes = static_cast<int>(ds.class_names.size());
  ds.sample_shape = f.train.sample;
  ds.sha256 = sha256_files(f.hashed);
  ds.normalize = opt.normalize;

  const Plan p = plan(f.train, f.test.has_value(), opt);
  const int64_t* train_rows = p.order.data();
  const int64_t* val_rows = p.order.data() + (p.available - p.n_val);
  const int64_t* test_rows = p.order.data() + p.available;

  FeatureScale fs;
  if (!f.train.bytes.empty()) {
    std::array<int64_t, 256> hist{};
    const int64_t n = f.train.features();
    for (int64_t r = 0; r < p.n_train; ++r) {
      const uint8_t* row = f.train.bytes.data() + train_rows[r] * n;
      for (int64_t k = 0; k < n; ++k) ++hist[row[k]];
    }
    ds.lut = byte_lut(hist, opt.normalize);
  } else {
    fs = feature_scale(f.train, train_rows, p.n_train, opt.normalize);
  }
  ds.train = make_split(f.train, train_rows, p.n_train, ds.lut, fs, opt.keep_raw);
  ds.val = make_split(f.train, val_rows, p.n_val, ds.lut, fs, opt.keep_raw);
  if (f.test) {
    std::vector<int64_t> rows(static_cast<size_t>(f.test->count));
    std::iota(rows.begin(), rows.end(), int64_t{0});
    ds.test = make_split(*f.test, rows.data(), f.test->count, ds.lut, fs, opt.keep_raw);
  } else {
    ds.test = make_split(f.train, test_rows, p.n_test, ds.lut, fs, opt.keep_raw);
  }
  return ds;
}

SampleShape files_sample_shape(const LoadOptions& opt) {
  // Remembered by everything that decides the answer, the files' size and
  // modification time included (a changed file is read again).
  std::string key = opt.format + "|" + opt.label_column + "|" + opt.header + "|" +
                    std::to_string(opt.test_fraction);
  for (const std::string* p : {&opt.path, &opt.labels, &opt.test_path, &opt.test_labels}) {
    std::error_code ec;
    const auto size = fs::file_size(*p, ec);
    const auto time = fs::last_write_time(*p, ec).time_since_epoch().count();
    key += "|" + std::to_string(p->size()) + ":" + *p + ":" + std::to_string(ec ? 0 : size) + ":" +
           std::to_string(ec ? 0 : time);
  }
  static std::mutex mu;
  static std::map<std::string, SampleShape> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  Files f = read_files(opt);
  SampleShape s;
  s.sample = f.train.sample;
  s.num_classes = static_cast<int>(assign_classes(f).size());
  LoadOptions no_validation = opt;
  no_validation.validation = 0;
  s.train_samples = plan(f.train, f.test.has_value(), no_validation).available;
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= 64) cache.clear();
  cache[key] = s;
  return s;
}

}  // namespace dnnlab::data
