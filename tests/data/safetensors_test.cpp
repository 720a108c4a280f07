// The generic safetensors reader and writer (src/nn/safetensors.hpp), which
// shards are built on: F32 and U8 tensors with metadata, and every malformed
// header or data range as a DataError with its byte offset.
#include "nn/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace dnnlab::nn {
namespace {

// The file with the header replaced by `json` (padded to keep its length).
std::string with_header(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json + data;
}

DataError read_error(const std::string& bytes) {
  try {
    read_safetensors(bytes, "t.safetensors");
  } catch (const DataError& e) {
    return e;
  }
  ADD_FAILURE() << "no DataError";
  return DataError("", -1, "");
}

TEST(Safetensors, WritesAndReadsF32AndU8) {
  std::vector<uint8_t> px = {1, 2, 3};
  std::vector<float> w = {1.5f, -2.f, 0.f, 3.25f, 4.f, 5.f};
  // U8 first: the writer still puts the F32 data first, aligned.
  const std::string bytes =
      write_safetensors({{"px", "U8", {3}, bytes_of(px)}, {"w", "F32", {2, 3}, bytes_of(w)}},
                        {{"a", "quote\"d"}, {"b", "line\nbreak"}});
  SafetensorsFile f = read_safetensors(bytes);
  EXPECT_EQ(f.metadata.at("a"), "quote\"d");
  EXPECT_EQ(f.metadata.at("b"), "line\nbreak");
  ASSERT_EQ(f.tensors.size(), 2u);
  const SafetensorsTensor& tw = f.tensors.at("w");
  EXPECT_EQ(tw.dtype, "F32");
  EXPECT_EQ(tw.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tw.numel(), 6);
  EXPECT_EQ(tw.offset % 8, 0);
  EXPECT_EQ(tw.f32(), w);
  const SafetensorsTensor& tp = f.tensors.at("px");
  EXPECT_EQ(tp.dtype, "U8");
  EXPECT_EQ(tp.offset, tw.offset + 24);
  EXPECT_EQ(std::string(tp.data), std::string("\x01\x02\x03"));
  EXPECT_THROW(tp.f32(), std::invalid_argument);
}

TEST(Safetensors, WriterRejectsProgrammerErrors) {
  std::vector<float> w = {1, 2};
  EXPECT_THROW(write_safetensors({{"w", "F32", {3}, bytes_of(w)}}), std::invalid_argument);
  EXPECT_THROW(write_safetensors({{"w", "F16", {2}, bytes_of(w)}}), std::invalid_argument);
  EXPECT_THROW(write_safetensors({{"w", "F32", {2}, bytes_of(w)}, {"w", "F32", {2}, bytes_of(w)}}),
               std::invalid_argument);
}

TEST(Safetensors, EmptyFileAndScalars) {
  const std::string empty = write_safetensors({});
  SafetensorsFile f = read_safetensors(empty);
  EXPECT_TRUE(f.tensors.empty());
  std::vector<float> one = {7.f};
  // The tensors are views into the bytes: those must outlive `f` (ASan caught
  // this test reading a destroyed temporary).
  const std::string bytes = write_safetensors({{"s", "F32", {}, bytes_of(one)}});
  f = read_safetensors(bytes);
  EXPECT_EQ(f.tensors.at("s").f32(), one);
}

TEST(Safetensors, MalformedInputNamesTheOffset) {
  const std::string data(8, '\0');
  auto hdr = [](const std::string& tensors) { return "{" + tensors + "}"; };
  {
    DataError e = read_error("abc");
    EXPECT_EQ(e.offset(), 3);
  }
  {
    std::string b = with_header(hdr(""), "");
    b[0] = 100;  // longer than the file
    EXPECT_NE(std::string(read_error(b).what()).find("exceeds the file"), std::string::npos);
  }
  {
    DataError e = read_error(with_header("{\"x\":", ""));
    EXPECT_NE(std::string(e.what()).find("t.safetensors at byte"), std::string::npos) << e.what();
    EXPECT_EQ(e.offset(), 8 + 5);
  }
  struct Case {
    std::string header, expect;
  };
  const std::vector<Case> cases = {
      {hdr(R"("x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]})"), "dtype F64"},
      {hdr(R"("x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), "needs 12"},
      {hdr(R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,12]})"), "outside the 8 data bytes"},
      {hdr(R"("x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), "4 bytes after the last"},
      {hdr(R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), "gap"},
      {hdr(R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("y":{"dtype":"U8","shape":[4],"data_offsets":[4,8]})"),
       "overlaps"},
      {hdr(R"("x":{"dtype":"F32","shape":[99999999999,99999999999],"data_offsets":[0,8]})"),
       "larger than the file"},
      {hdr(R"("x":{"dtype":"F32","shape":[-],"data_offsets":[0,8]})"), "expected a digit"},
      {hdr(R"("x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]})"), "must be integers"},
      {hdr(R"("x":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]})"),
       "must be integers"},
      {hdr(R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]})"), "data_offsets outside"},
      {hdr(R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}]})"), "expected '}'"},
      {std::string(40, '[') + std::string(40, ']'), "nested too deeply"},
      {hdr(R"("x":{"dtype":"F32","shape":[2]})"), "needs dtype, shape and data_offsets"},
      {hdr(R"("x":[1])"), "is not an object"},
      {hdr(R"("__metadata__":{"a":1})"), "'a' is not a string"},
      {hdr(R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"),
       "appears twice"},
      {R"(["x"])", "not a JSON object"},
      {hdr(R"("a\q":1)"), "bad escape"},
      {hdr(R"("a\u12G4":1)"), "bad \\u escape"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    DataError e = read_error(with_header(c.header, data));
    EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    EXPECT_GE(e.offset(), 0);
  }
}

TEST(Safetensors, ParamFunctionsStillWork) {
  Param a{"dense0.weight", Tensor(Shape{2, 2}), {}, {}, {}};
  for (int i = 0; i < 4; ++i) a.value[i] = static_cast<float>(i) + 0.5f;
  std::string bytes = to_safetensors({&a}, {{"k", "v"}});
  Param b{"dense0.weight", Tensor(Shape{2, 2}), {}, {}, {}};
  auto meta = from_safetensors(bytes, {&b});
  EXPECT_EQ(meta.at("k"), "v");
  EXPECT_EQ(0, std::memcmp(a.value.data(), b.value.data(), 16));
  Param c{"dense0.weight", Tensor(Shape{4}), {}, {}, {}};
  EXPECT_THROW(from_safetensors(bytes, {&c}), DataError);
  Param d{"other", Tensor(Shape{2, 2}), {}, {}, {}};
  EXPECT_THROW(from_safetensors(bytes, {&d}), DataError);
}

}  // namespace
}  // namespace dnnlab::nn
