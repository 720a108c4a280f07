// The error policy (see docs/errors.md): typed exceptions end a request or a
// trial; expected outcomes are return values; asserts are for programmer bugs.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace dnnlab {

// Where in a spec file a problem is. line/column are 1-based; 0 means unknown.
struct SpecLocation {
  std::string file;
  int line = 0;
  int column = 0;
  std::string str() const {
    std::string s = file.empty() ? std::string("<spec>") : file;
    if (line > 0) {
      s += ':';
      s += std::to_string(line);
      s += ':';
      s += std::to_string(column);
    }
    return s;
  }
};

// A spec (model, training, sweep) that cannot be used: names the field and,
// where known, file:line:column.
class SpecError : public std::runtime_error {
 public:
  SpecError(SpecLocation where, std::string field, const std::string& message)
      : std::runtime_error(compose(where, field, message)),
        where_(std::move(where)),
        field_(std::move(field)) {}
  const SpecLocation& where() const { return where_; }
  const std::string& field() const { return field_; }

 private:
  static std::string compose(const SpecLocation& where, const std::string& field,
                             const std::string& message) {
    std::string s = where.str();
    s += ": ";
    if (!field.empty()) {
      s += '\'';
      s += field;
      s += "': ";
    }
    s += message;
    return s;
  }
  SpecLocation where_;
  std::string field_;
};

// A data file that is missing, truncated or corrupt: names the file and the
// byte offset (in the decompressed stream) where reading failed.
class DataError : public std::runtime_error {
 public:
  DataError(const std::string& file, int64_t offset, const std::string& message)
      : std::runtime_error(file + (offset >= 0 ? " at byte " + std::to_string(offset) : "") + ": " +
                           message),
        file_(file),
        offset_(offset) {}
  const std::string& file() const { return file_; }
  int64_t offset() const { return offset_; }

 private:
  std::string file_;
  int64_t offset_;
};

// A layer stack whose shapes do not fit together, or a tensor of the wrong
// shape handed to a model at run time.
class ShapeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Training produced a non-finite loss or parameter.
class NumericError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace dnnlab
