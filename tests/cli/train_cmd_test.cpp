// `dnnlab train` end to end: bad specs and bad data give clear errors and
// non-zero exits; good runs are reproducible bit for bit and record how they
// were made.
#include <zlib.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli_util.hpp"

namespace dnnlab::cli_test {
namespace {

const std::string kSpec = R"(name: tiny
data: {dataset: fashion-mnist, validation: 500, limit_train: 2000}
model:
  layers:
    - dense: 32
      activation: relu
    - dense: 10
train:
  epochs: 1
  batch_size: 32
  seed: 5
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
)";

struct BadSpec {
  const char* name;
  std::string text;
  const char* expect_location;  // file-relative "line:column"
  const char* expect_field;
};

class BadSpecTest : public ::testing::TestWithParam<BadSpec> {};

TEST_P(BadSpecTest, ExitsTwoNamingFileLineAndField) {
  const BadSpec& c = GetParam();
  TempDir dir;
  auto path = dir.write("bad.yaml", c.text);
  Result r = run("train " + path.string() + " --out " + dir.path.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("bad.yaml:" + std::string(c.expect_location)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(c.expect_field), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "tiny.safetensors"));
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  s.replace(s.find(from), from.size(), to);
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Specs, BadSpecTest,
    ::testing::Values(
        BadSpec{"unknown_key", replace(kSpec, "    - dense: 10", "    - dense: 10\n      units: 3"),
                "8:7", "units"},
        BadSpec{"negative_lr", replace(kSpec, "lr: 0.05", "lr: -1"), "12:", "lr"},
        BadSpec{"bad_activation", replace(kSpec, "activation: relu", "activation: relux"), "6:19",
                "activation"},
        BadSpec{"wrong_classes", replace(kSpec, "dense: 10", "dense: 7"), "7:", "classes"},
        BadSpec{"not_a_number", replace(kSpec, "epochs: 1", "epochs: many"), "9:11",
                "train.epochs"},
        BadSpec{"yaml_syntax", replace(kSpec, "seed: 5", "seed: [5"), "12:", "YAML syntax"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(TrainCmd, MissingSpecFile) {
  Result r = run("train /nonexistent/spec.yaml");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/spec.yaml"), std::string::npos) << r.err;
}

TEST(TrainCmd, UnknownFlagAndHelp) {
  EXPECT_NE(run("train --bogus x.yaml").code, 0);
  Result h = run("train --help");
  EXPECT_EQ(h.code, 0);
  for (const char* flag : {"--out", "--epochs", "--seed", "--data", "--batch-size", "--lr",
                           "--limit-train", "--kernels", "--threads", "--quiet"})
    EXPECT_NE(h.out.find(flag), std::string::npos) << flag << " is not documented";
}

TEST(TrainCmd, ThreadsOutOfRangeNamesTheFlag) {
  for (const char* bad : {"0", "-2", "257", "two"}) {
    Result r = run(std::string("train x.yaml --threads ") + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.err.find("--threads"), std::string::npos) << bad << ": " << r.err;
  }
}

// A small CNN trained on 1 and on 3 threads: the conv kernels split each
// batch by shape only, so the weights are the same bits.
TEST(TrainCmd, ThreadsGiveTheSameWeights) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir a, b;
  auto spec = a.write("cnn.yaml", R"(name: cnn
data: {dataset: fashion-mnist, validation: 100, limit_train: 512}
model:
  input: [1, 28, 28]
  layers:
    - {conv2d: 4, padding: 1}
    - batchnorm             # its channels are split over the threads too
    - relu
    - max_pool2d: 2
    - {conv2d: 8, stride: 2}
    - relu
    - global_avg_pool
    - dense: 10
train:
  epochs: 1
  batch_size: 32
  seed: 3
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
)");
  Result r1 = run("train -q " + spec.string() + " --threads 1 --out " + a.path.string());
  Result r3 = run("train -q " + spec.string() + " --threads 3 --out " + b.path.string());
  ASSERT_EQ(r1.code, 0) << r1.err;
  ASSERT_EQ(r3.code, 0) << r3.err;
  const std::string w1 = slurp(a.path / "cnn.safetensors"), w3 = slurp(b.path / "cnn.safetensors");
  EXPECT_GT(w1.size(), 4u * (4 * 9 + 4 + 8 * 36 + 8 + 8 * 10 + 10));
  EXPECT_EQ(w1, w3) << "--threads changed the weights";
  EXPECT_EQ(r1.out, r3.out);
}

TEST(TrainCmd, MissingDataDirectory) {
  TempDir dir;
  auto spec = dir.write("tiny.yaml", kSpec);
  Result r = run("train " + spec.string() + " --data " + (dir.path / "nothing").string());
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("nothing"), std::string::npos) << r.err;
  Result e = run("train " + spec.string(), "DNNLAB_DATA_DIR=" + (dir.path / "nowhere").string());
  EXPECT_EQ(e.code, 3) << e.err;
}

void write_gz(const std::filesystem::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::string idx(uint8_t ndim, std::initializer_list<uint32_t> dims, size_t data_bytes) {
  std::string b = {0, 0, 8, static_cast<char>(ndim)};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b += static_cast<char>((d >> s) & 0xff);
  return b + std::string(data_bytes, '\x01');
}

TEST(TrainCmd, TruncatedImageFileNamesTheOffset) {
  TempDir dir;
  auto spec =
      dir.write("tiny.yaml", replace(kSpec, "validation: 500, limit_train: 2000", "validation: 2"));
  const auto d = dir.path / "fm";
  std::filesystem::create_directories(d);
  // 10 train images declared, only 7.5 present: data ends at byte 16 + 7.5*784.
  write_gz(d / "train-images-idx3-ubyte.gz", idx(3, {10, 28, 28}, 784 * 7 + 392));
  write_gz(d / "train-labels-idx1-ubyte.gz", idx(1, {10}, 10));
  write_gz(d / "t10k-images-idx3-ubyte.gz", idx(3, {4, 28, 28}, 784 * 4));
  write_gz(d / "t10k-labels-idx1-ubyte.gz", idx(1, {4}, 4));
  Result r = run("train " + spec.string() + " --data " + d.string());
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("train-images-idx3-ubyte.gz"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(16 + 784 * 7 + 392)), std::string::npos) << r.err;
}

TEST(TrainCmd, CorruptGzipIsADataError) {
  TempDir dir;
  auto spec = dir.write("tiny.yaml", kSpec);
  const auto d = dir.path / "fm";
  std::filesystem::create_directories(d);
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    std::ofstream(d / f) << "\x1f\x8b\x08 this is not deflate data";
  Result r = run("train " + spec.string() + " --data " + d.string());
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("-ubyte.gz at byte"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("corrupt gzip"), std::string::npos) << r.err;
}

TEST(TrainCmd, SameSeedSameWeightsAndProvenance) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir a, b, c;
  auto spec = a.write("tiny.yaml", kSpec);
  Result ra = run("train -q " + spec.string() + " --out " + a.path.string());
  Result rb = run("train -q " + spec.string() + " --out " + b.path.string());
  Result rc = run("train -q " + spec.string() + " --seed 6 --out " + c.path.string());
  ASSERT_EQ(ra.code, 0) << ra.err;
  ASSERT_EQ(rb.code, 0) << rb.err;
  ASSERT_EQ(rc.code, 0) << rc.err;
  EXPECT_NE(ra.out.find("test accuracy: "), std::string::npos) << ra.out;
  const std::string wa = slurp(a.path / "tiny.safetensors"),
                    wb = slurp(b.path / "tiny.safetensors"),
                    wc = slurp(c.path / "tiny.safetensors");
  EXPECT_GT(wa.size(), 32u * 785 * 4);
  EXPECT_EQ(wa, wb) << "same spec and seed must give the same weights bit for bit";
  EXPECT_NE(wa, wc);
  EXPECT_EQ(ra.out, rb.out);

  auto m = nlohmann::json::parse(slurp(a.path / "tiny.metrics.json"));
  EXPECT_EQ(m["seed"], 5);
  EXPECT_EQ(m["epochs"].size(), 1u);
  EXPECT_GT(m["test_acc"].get<double>(), 0.5);
  for (const char* k : {"build_id", "compiler", "kernel_target", "dataset_sha256"})
    EXPECT_FALSE(m["provenance"][k].get<std::string>().empty()) << k;
  EXPECT_EQ(m["provenance"]["dataset_sha256"].get<std::string>().size(), 64u);
  EXPECT_NE(m["spec"].get<std::string>().find("dense"), std::string::npos);
}

// A spec on synthetic data (no data set needed) with a cosine floor.
const std::string kSynthetic = R"(name: syn
data: {dataset: synthetic, validation: 64, limit_train: 256}
model:
  layers:
    - dense: 16
      activation: relu
    - dense: 10
train:
  epochs: 3
  batch_size: 32
  seed: 5
  optimizer: sgd
  schedule: {type: cosine, min_lr: 0.005}
)";

double accuracy_line(const std::string& out, const std::string& label) {
  const auto at = out.find(label);
  return at == std::string::npos ? -1 : std::stod(out.substr(at + label.size()));
}

struct BadOverride {
  const char* name;
  const char* flags;
  const char* expect;  // in the message, besides the flag
  const char* flag;
};

class BadOverrideTest : public ::testing::TestWithParam<BadOverride> {};

// Overrides go through the spec's own checks: exit 2 naming the flag and field.
TEST_P(BadOverrideTest, ExitsTwoNamingTheFlag) {
  const BadOverride& c = GetParam();
  TempDir dir;
  auto spec = dir.write("syn.yaml", kSynthetic);
  Result r = run("train -q " + spec.string() + " --out " + dir.path.string() + " " + c.flags);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(c.flag), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("1.797"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "syn.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(
    Flags, BadOverrideTest,
    ::testing::Values(
        BadOverride{"lr_below_cosine_floor", "--lr 0.001", "min_lr", "--lr 0.001"},
        BadOverride{"lr_zero", "--lr 0", "train.optimizer.lr", "--lr"},
        BadOverride{"lr_nan", "--lr nan", "train.optimizer.lr", "--lr"},
        BadOverride{"epochs_zero", "--epochs 0", "must be in [1, 1000000]", "--epochs"},
        BadOverride{"epochs_too_many", "--epochs 1000001", "train.epochs", "--epochs"},
        BadOverride{"epochs_fraction", "--epochs 1.5", "integer", "--epochs"},
        BadOverride{"batch_size_zero", "--batch-size 0", "train.batch_size", "--batch-size"},
        BadOverride{"batch_size_huge", "--batch-size 2000000", "train.batch_size", "--batch-size"},
        BadOverride{"limit_train_too_many", "--limit-train 2000000", "training samples",
                    "--limit-train"},
        BadOverride{"limit_train_negative", "--limit-train -5", "data.limit_train",
                    "--limit-train"},
        BadOverride{"seed_negative", "--seed -1", "train.seed", "--seed"},
        BadOverride{"seed_2_64", "--seed 18446744073709551616", "2^64", "--seed"},
        BadOverride{"seed_text", "--seed abc", "train.seed", "--seed"},
        BadOverride{"two_flags_one_bad", "--epochs 2 --batch-size 0", "train.batch_size",
                    "--batch-size"}),
    [](const auto& info) { return std::string(info.param.name); });

// Every seed a sweep can draw (half of them >= 2^63) is accepted and recorded as given.
TEST(TrainCmd, SeedsUpTo2To64Minus1AreKept) {
  TempDir dir;
  auto spec = dir.write("syn.yaml", kSynthetic);
  for (const std::string seed :
       {"0", "9223372036854775807", "9223372036854775808", "18446744073709551615"}) {
    TempDir out;
    Result r = run("train -q " + spec.string() + " --epochs 1 --seed " + seed + " --out " +
                   out.path.string());
    ASSERT_EQ(r.code, 0) << seed << ": " << r.err;
    auto m = nlohmann::json::parse(slurp(out.path / "syn.metrics.json"));
    EXPECT_EQ(m["seed"].dump(), seed);
    EXPECT_NE(m["spec"].get<std::string>().find("seed: " + seed), std::string::npos);
  }
  TempDir a, b;
  run("train -q " + spec.string() + " --epochs 1 --seed 9223372036854775808 --out " +
      a.path.string());
  run("train -q " + spec.string() + " --epochs 1 --seed 18446744073709551615 --out " +
      b.path.string());
  EXPECT_NE(slurp(a.path / "syn.safetensors"), slurp(b.path / "syn.safetensors"))
      << "two seeds above 2^63 trained the same model";
}

// `model.input` reshapes the data set's samples: the synthetic set is [784],
// and a conv net reading it as [1, 28, 28] trains (before, the model always
// took the data set's shape and refused a conv layer on [784]). The
// parameter count shows the conv layer saw a 28x28 image.
TEST(TrainCmd, SyntheticDataFollowsModelInputShape) {
  TempDir dir;
  auto spec = dir.write("syncnn.yaml", R"(name: syncnn
data: {dataset: synthetic, validation: 64, limit_train: 256}
model:
  input: [1, 28, 28]
  layers:
    - {conv2d: 4, kernel: 3}
    - relu
    - max_pool2d: 2
    - dense: 10
train: {epochs: 2, batch_size: 32, seed: 3, optimizer: {type: adam, lr: 0.01}}
)");
  Result r = run("train -q " + spec.string() + " --out " + dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto m = nlohmann::json::parse(slurp(dir.path / "syncnn.metrics.json"));
  // conv 1->4 3x3 (+bias): 40; [4, 13, 13] -> dense 10: 6770.
  EXPECT_EQ(m["num_params"].get<int64_t>(), 40 + 4 * 13 * 13 * 10 + 10);
  EXPECT_GT(accuracy_line(r.out, "test accuracy: "), 0.5) << r.out;  // chance is 0.1

  // A shape whose size is not the samples' is refused, naming the field.
  auto bad =
      dir.write("bad.yaml", replace(slurp(spec), "input: [1, 28, 28]", "input: [1, 28, 27]"));
  Result b = run("train " + bad.string() + " --out " + dir.path.string());
  EXPECT_EQ(b.code, 2) << b.err;
  EXPECT_NE(b.err.find("model.input"), std::string::npos) << b.err;
}

// The recorded spec is what was trained: training it again without flags
// gives the same weights bit for bit.
TEST(TrainCmd, RecordedSpecIncludesOverridesAndReproducesTheRun) {
  TempDir a, b;
  auto spec = a.write("syn.yaml", kSynthetic);
  Result r = run("train -q " + spec.string() +
                 " --lr 0.2 --epochs 2 --batch-size 16 --limit-train 128 --seed 7 --out " +
                 a.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto m = nlohmann::json::parse(slurp(a.path / "syn.metrics.json"));
  const std::string recorded = m["spec"];
  for (const char* want : {"lr: 0.2", "epochs: 2", "batch_size: 16", "limit_train: 128", "seed: 7"})
    EXPECT_NE(recorded.find(want), std::string::npos) << want << " missing from\n" << recorded;
  EXPECT_EQ(m["epochs"].size(), 2u);
  const std::string weights = slurp(a.path / "syn.safetensors");
  EXPECT_NE(weights.find("limit_train: 128"), std::string::npos) << "safetensors metadata";

  auto again = b.write("syn.yaml", recorded);
  Result r2 = run("train -q " + again.string() + " --out " + b.path.string());
  ASSERT_EQ(r2.code, 0) << r2.err;
  EXPECT_EQ(r2.out, r.out);
  EXPECT_EQ(slurp(b.path / "syn.safetensors"), weights);
}

// The issue's bar: the published 256-128-100 MLP reaches 0.8833; ours must
// reach 0.885 within 10 epochs.
TEST(Examples, FashionMlpReachesTestAccuracy0885) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir dir;
  Result r = run("train -q " + std::string(DNNLAB_SOURCE_DIR) +
                 "/examples/fashion-mlp.yaml --out " + dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GE(accuracy_line(r.out, "test accuracy: "), 0.885) << r.out;
  auto m = nlohmann::json::parse(slurp(dir.path / "fashion-mlp.metrics.json"));
  EXPECT_LE(m["epochs"].size(), 10u);
}

TEST(Examples, SevenHundredLayerMlpTrainsWithoutNanOrInf) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir dir;
  Result r =
      run("train -q " + std::string(DNNLAB_SOURCE_DIR) +
          "/examples/deep-mlp.yaml --epochs 2 --limit-train 3000 --out " + dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;  // 4 would mean a non-finite loss
  auto m = nlohmann::json::parse(slurp(dir.path / "deep-mlp.metrics.json"));
  EXPECT_GT(m["num_params"].get<int64_t>(), 700 * 64 * 64);
  for (const auto& e : m["epochs"]) {
    EXPECT_TRUE(std::isfinite(e["train_loss"].get<double>()));
    EXPECT_TRUE(std::isfinite(e["val_loss"].get<double>()));
  }
  EXPECT_TRUE(std::isfinite(m["test_loss"].get<double>()));
}

// The depth study's question, on the example's own data (the first 10,000
// training images, 5 epochs; see the example's header): 700 residual blocks
// with batchnorm learn, the plain 700-layer net of deep-mlp.yaml stays near
// chance. Together about 70 CPU-s (42 + 29, measured on a loaded machine).
TEST(Examples, DeepResidualMlpReachesValidation085In5Epochs) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir dir;
  Result r = run("train -q " + std::string(DNNLAB_SOURCE_DIR) +
                 "/examples/deep-residual-mlp.yaml --out " + dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GE(accuracy_line(r.out, "validation accuracy: "), 0.85) << r.out;
  auto m = nlohmann::json::parse(slurp(dir.path / "deep-residual-mlp.metrics.json"));
  EXPECT_LE(m["epochs"].size(), 5u);
  // dense 784->64; 700 x (dense 64->64, batchnorm 64); batchnorm; dense 64->10.
  EXPECT_EQ(m["num_params"].get<int64_t>(),
            784 * 64 + 64 + 700 * (64 * 64 + 64 + 2 * 64) + 2 * 64 + 64 * 10 + 10);
  const std::string spec = m["spec"];
  EXPECT_NE(spec.find("add: null"), std::string::npos) << spec;  // the skips
  EXPECT_NE(spec.find("limit_train: 10000"), std::string::npos) << spec;
}

TEST(Examples, PlainSevenHundredLayerMlpStaysAtChanceOnTheSameData) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir dir;
  Result r =
      run("train -q " + std::string(DNNLAB_SOURCE_DIR) +
          "/examples/deep-mlp.yaml --epochs 5 --limit-train 10000 --out " + dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  // 10 balanced classes: chance is 0.1 (loss ln 10 = 2.30). Measured: 0.187
  // in every epoch, loss 2.08: it tells apart little more than one class.
  EXPECT_LT(accuracy_line(r.out, "validation accuracy: "), 0.25) << r.out;
  auto m = nlohmann::json::parse(slurp(dir.path / "deep-mlp.metrics.json"));
  EXPECT_EQ(m["epochs"].size(), 5u);
  for (const auto& e : m["epochs"]) {
    EXPECT_LT(e["val_acc"].get<double>(), 0.25) << e;
    EXPECT_GT(e["val_loss"].get<double>(), 2.0) << e;
  }
}

}  // namespace
}  // namespace dnnlab::cli_test
