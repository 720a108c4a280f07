// Run specs: one YAML file says what is trained (model), on what (data) and
// how (train). This is the only place that turns spec text into nn::RunSpec;
// the format is documented with a full example in docs/spec.md.
//
//   nn::RunSpec run = spec::load_run_spec("examples/fashion-mlp.yaml");
//   // run.model.layers is expanded: `repeat:` blocks and `activation:`
//   // shorthands are gone, and each layer knows the file:line:column it came from.
//   nn::Shape sample;
//   int64_t classes = 0;
//   spec::dataset_shape(run.data.dataset, &sample, &classes);     // {1, 28, 28}, 10
//   nn::Model model = nn::Model::build(run.model, sample, classes, run.train.seed);
//   std::string canonical = spec::to_yaml(run);   // stored beside the results
//
// Every problem (YAML syntax, unknown key, wrong type, value out of range,
// unknown name, impossible shapes) throws dnnlab::SpecError naming the file,
// line and column and the field's dotted path, e.g. `model.layers[3].dense`.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "nn/spec.hpp"
#include "nn/tensor.hpp"

namespace dnnlab::spec {

// Parses a run spec. `file` is used in error messages and, when the spec has
// no `name:`, gives the default name (its stem). The result has passed
// nn::Model::validate against the data set's shape.
nn::RunSpec parse_run_spec(const std::string& text, const std::string& file);

// A value from the command line for one field of a run spec (`--lr 0.001`
// sets train.optimizer.lr). It is read and checked exactly like the file's
// own value: same type, same range, same checks between fields.
struct Override {
  std::string field;  // dotted path: "train.epochs", "train.optimizer.lr", "data.limit_train"
  std::string value;  // as typed
  std::string flag;   // "--lr": named in errors
};

// Parses a run spec with `overrides` in place of (or added to) the file's
// fields. The file must be valid by itself (its errors are reported as they
// are); an override's bad value is a SpecError located at its flag
// (`--epochs: 'train.epochs': must be >= 1, got 0`), and any other error the
// overrides cause (a cosine floor above an overridden lr) is reported at the
// file's location and says which overrides were given.
//
//   std::vector<spec::Override> flags = {{"train.optimizer.lr", "0.001", "--lr"}};
//   nn::RunSpec run = spec::parse_run_spec(text, "mlp.yaml", flags);
//   std::string trained = spec::to_yaml(run);  // the run as trained, overrides included
nn::RunSpec parse_run_spec(const std::string& text, const std::string& file,
                           std::span<const Override> overrides);

// Reads and parses a spec file (with optional overrides, as above); a missing
// or unreadable file is a SpecError naming it.
nn::RunSpec load_run_spec(const std::string& path, std::span<const Override> overrides = {});

// A known data set's sample shape, as training feeds it, and number of
// classes ("fashion-mnist", "mnist" -> {1, 28, 28}, 10; "synthetic" -> {784},
// 10). Specs are validated against it. False (outputs untouched) if the name
// is unknown.
bool dataset_shape(const std::string& name, nn::Shape* sample, int64_t* classes);

// The same for a run's data, named or by path (a path's files are read, or
// remembered from an earlier read: data::sample_shape). False (outputs
// untouched) for an unknown name or files that cannot be read.
bool data_shape(const nn::DataSpec& data, nn::Shape* sample, int64_t* classes);

// The canonical YAML form of a run: every field written out, runs of equal
// layers folded back into `repeat:` blocks. parse_run_spec(to_yaml(s)) gives
// back s (apart from `where` locations and `source`). Fields that do not apply
// to the chosen optimizer or schedule type (sgd's momentum under adam, say)
// are not written.
std::string to_yaml(const nn::RunSpec& run);

}  // namespace dnnlab::spec
