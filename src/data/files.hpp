// Data sets from files by path: CSV tables, IDX image/label pairs, NumPy
// .npy arrays and .npz archives (LoadOptions::path and the keys beside it;
// docs/spec.md, "data"). Splits, normalization and hashing as for the named
// sets: the validation set (and a test_fraction) come off the end of
// shuffle_indices(0..N-1, split_seed), bytes (IDX, uint8 arrays) are
// normalized through a 256-entry table, other values per feature.
//
//   LoadOptions o;
//   o.path = "iris.csv";  o.test_fraction = 0.2;  o.validation = 20;
//   Dataset ds = load_files(o);   // ds.sample_shape {4}, ds.num_classes 3
#pragma once
#include "data/dataset.hpp"

namespace dnnlab::data {

// The format `opt.format` names, or the one `opt.path`'s name implies:
// .csv/.csv.gz -> csv, .npy -> npy, .npz -> npz, names with "idx" or ending
// in "ubyte" -> idx. Throws DataError when neither says.
std::string file_format(const LoadOptions& opt);

// Reads, checks, splits and normalizes the files. Throws DataError naming
// the file and byte offset (CSV: line and column too) of any defect, and for
// options that do not fit the data.
Dataset load_files(const LoadOptions& opt);

// One sample's shape, the classes and the train samples load_files would
// give, remembered per file (path, size, modification time) so that checking
// many specs against one file reads it once.
SampleShape files_sample_shape(const LoadOptions& opt);

}  // namespace dnnlab::data
