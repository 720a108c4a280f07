// Datasets for training: locate MNIST / Fashion-MNIST on disk, read and check
// the four IDX files, split a validation set off the training set
// deterministically, and normalize pixels to float32.
//
//   dnnlab::data::LoadOptions opt;          // fashion-mnist, 5000 for validation
//   opt.dir = cli_data_flag;                // "" -> $DNNLAB_DATA_DIR/<name> or
//                                           //       /usr/share/datasets/<name>
//   dnnlab::data::Dataset ds = dnnlab::data::load(opt);
//   // ds.train.x: [55000, 784], ds.val.x: [5000, 784], ds.test.x: [10000, 784]
//   // ds.train.y[i] in [0, ds.num_classes); ds.sha256 identifies the files.
//
// Determinism: the validation split depends only on split_seed and the train
// set size (shuffle_indices uses its own splitmix64), so the same files give
// the same splits on every platform and in every trial.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/idx.hpp"
#include "nn/errors.hpp"
#include "nn/spec.hpp"
#include "nn/tensor.hpp"

namespace dnnlab::data {

struct Split {
  nn::Tensor x;            // [N, features...], normalized float32
  std::vector<int32_t> y;  // N class labels in [0, num_classes)
  // The pixel bytes behind x, N * features in split order, when the data came
  // from bytes and LoadOptions::keep_raw was set (x[i] == lut[raw[i]]).
  std::vector<uint8_t> raw;
  int64_t size() const { return static_cast<int64_t>(y.size()); }
};

struct Dataset {
  std::string name;        // "fashion-mnist"
  std::string dir;         // resolved directory
  nn::Shape sample_shape;  // one sample, no batch dim: {784} (flattened)
  int num_classes = 0;
  Split train, val, test;
  // sha256 (hex) over the four files as stored on disk, concatenated in the
  // order train-images, train-labels, t10k-images, t10k-labels.
  std::string sha256;
  std::vector<std::string> class_names;
  std::string normalize;  // "standard", "unit", or "none" (synthetic: floats as generated)
  // The normalized value of each pixel byte (256 entries; x = lut[byte], so
  // native and browser inputs are bit-identical). Empty for float data.
  std::vector<float> lut;
};

struct LoadOptions {
  std::string name = "fashion-mnist";  // or "mnist"
  std::string dir;            // empty: $DNNLAB_DATA_DIR/<name>, else /usr/share/datasets/<name>
  int64_t validation = 5000;  // taken from the END of the shuffled train set
  uint64_t split_seed = 0;    // seed of that shuffle
  std::string normalize =
      "standard";           // "standard": (x/255 - mean)/std, train-split stats; "unit": x/255
  int64_t limit_train = 0;  // >0: keep only this many train samples (after the split)
  bool keep_raw = false;    // keep each split's pixel bytes (Split::raw), e.g. for shards

  // Data files by path (files.hpp; docs/spec.md, "data"). A non-empty `path`
  // loads it instead of `name`'s data set (and `dir` is not used).
  std::string path;       // the training data: .csv[.gz], IDX images, .npy, .npz
  std::string format;     // "" = by the file's name; "csv", "idx", "npy", "npz"
  std::string labels;     // idx, npy: the labels beside `path`
  std::string test_path;  // the test split's file (and test_labels beside it)
  std::string test_labels;
  double test_fraction = 0;     // no test_path: this share of `path` is the test split
  std::string label_column;     // csv: a column name or 0-based index; "" = the last
  std::string header = "auto";  // csv: auto | true | false | counts
};

// The options that load `spec`'s data, with `data_dir` (--data) as `dir`.
LoadOptions load_options(const nn::DataSpec& spec, const std::string& data_dir);

// The directory holding the dataset's four files (each .gz or raw; the .gz is
// used, and hashed, when both are present). Throws
// DataError listing the directory and files looked for and how to get them
// (apt-get install dataset-<name>, --data, DNNLAB_DATA_DIR).
std::string resolve_dir(const std::string& name, const std::string& override_dir);

// One sample's shape and the number of classes, as load() would give them,
// from the train images' IDX header alone (a few bytes; nothing else is read
// or inflated): {1, 28, 28} and 10 for the MNIST sets, {784} and 10 for
// "synthetic". Lets a command check a model against the data (and size its
// memory) before loading it. Throws DataError as load() would for a missing
// file or images that are not 28x28.
struct SampleShape {
  nn::Shape sample;
  int num_classes = 0;
  int64_t train_samples = 0;  // before the validation hold-out (the test split taken out)
};
SampleShape sample_shape(const LoadOptions& opt);

// Reads, checks, splits and normalizes. Throws DataError for missing or bad
// files and for options that do not fit the data (validation >= train size).
// The train split keeps the shuffled order; limit_train keeps its first
// limit_train samples, so the validation split does not depend on it.
Dataset load(const LoadOptions& opt);

// sha256 (hex) over the files' bytes as stored on disk, in this order.
std::string sha256_files(const std::vector<std::string>& paths);

// Deterministic Fisher-Yates shuffle driven by splitmix64(seed): the same
// permutation on every platform and compiler.
void shuffle_indices(std::vector<int64_t>& idx, uint64_t seed);

}  // namespace dnnlab::data
