// `dnnlab train`, `run` and `worker` on the inputs of issue 24: cyclic YAML,
// models too large for memory, outputs outside --out, unknown kernels, and a
// sweep whose trials all fail. The checks that must come before any data is
// read run against a data directory whose files are IDX headers with no
// data: reading it would fail with exit 3.
#include <zlib.h>

#include "cli_util.hpp"
#include "data/dataset.hpp"
#include "experiment/backends.hpp"
#include "experiment/coordinator.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::cli_test {
namespace {

// An IDX header (ubyte) with these dims and no data.
std::string idx_header(std::initializer_list<uint32_t> dims) {
  std::string h = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) h += static_cast<char>((d >> s) & 0xff);
  return h;
}

// A Fashion-MNIST directory whose four files end after their headers.
std::string headers_only(const TempDir& dir) {
  std::filesystem::create_directories(dir.path / "hdr");
  dir.write("hdr/train-images-idx3-ubyte", idx_header({60000, 28, 28}));
  dir.write("hdr/train-labels-idx1-ubyte", idx_header({60000}));
  dir.write("hdr/t10k-images-idx3-ubyte", idx_header({10000, 28, 28}));
  dir.write("hdr/t10k-labels-idx1-ubyte", idx_header({10000}));
  return (dir.path / "hdr").string();
}

std::string spec_with(const std::string& layers, const std::string& train = "batch_size: 32",
                      const std::string& name = "h") {
  return "name: \"" + name + "\"\ndata: {dataset: fashion-mnist, validation: 100}\nmodel:\n" +
         "  layers:\n" + layers + "train: {epochs: 1, " + train + "}\n";
}

TEST(HardenedTrain, CyclicYamlExitsTwoInsteadOfCrashing) {
  TempDir dir;
  for (const char* text :
       {"a: &x [*x]\n", "model:\n  layers: &x [{layers: *x}]\n",
        "model:\n  layers:\n    - &e {repeat: 2, layers: [{dense: 10}, *e]}\n"}) {
    auto path = dir.write("cycle.yaml", text);
    Result r = run("train " + path.string() + " --out " + dir.path.string());
    EXPECT_EQ(r.code, 2) << text << r.err;
    EXPECT_NE(r.err.find("cycle.yaml:"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("a cycle"), std::string::npos) << r.err;
  }
  auto deep = dir.write("deep.yaml",
                        "model: " + std::string(100000, '[') + std::string(100000, ']') + "\n");
  Result r = run("train " + deep.string());
  EXPECT_EQ(r.code, 2) << r.err.substr(0, 300);
  EXPECT_NE(r.err.find("deep.yaml:1:"), std::string::npos) << r.err.substr(0, 300);
}

TEST(HardenedTrain, ModelOverTheMemoryLimitIsRefusedBeforeTheDataIsRead) {
  TempDir dir;
  const std::string data = headers_only(dir);
  // 784 -> 1000000 -> 10 at batch 2^20: about 7.6 TiB of activations.
  auto huge = dir.write(
      "huge.yaml", spec_with("    - dense: 1000000\n    - dense: 10\n", "batch_size: 1048576"));
  Result r = run("train " + huge.string() + " --data " + data + " --out " + dir.path.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("needs an estimated"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("activations"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("this machine's memory"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("loading"), std::string::npos) << r.err;

  // A small model under a smaller --max-memory: the limit is the flag's.
  auto small = dir.write("small.yaml", spec_with("    - dense: 64\n    - dense: 10\n"));
  Result s = run("train " + small.string() + " --max-memory 1M --data " + data);
  EXPECT_EQ(s.code, 2) << s.err;
  EXPECT_NE(s.err.find("limit of 1.0 MiB (--max-memory)"), std::string::npos) << s.err;
  // Under the limit it goes on to read the data, which has none: exit 3.
  Result ok = run("train " + small.string() + " --max-memory 1G --data " + data + " --out " +
                  dir.path.string());
  EXPECT_EQ(ok.code, 3) << ok.err;
  EXPECT_NE(run("train " + small.string() + " --max-memory lots").code, 0);
}

TEST(HardenedTrain, DryRunShowsTheEstimateWithoutReadingTheData) {
  TempDir dir;
  const std::string data = headers_only(dir);
  auto spec = dir.write("cnn.yaml", spec_with("    - {conv2d: 8, padding: 1}\n    - relu\n"
                                              "    - max_pool2d: 2\n    - dense: 10\n"));
  Result r = run("train --dry-run " + spec.string() + " --data " + data +
                 " --max-memory 2G --out " + dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  // A conv layer and no `input:`: checked against the header's [1, 28, 28].
  EXPECT_NE(r.out.find("input [1,28,28]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory estimate: weights"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory limit: 2.0 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("h.safetensors"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "h.safetensors"));
  // A dry run writes nothing, not even the --out directory.
  Result n = run("train --dry-run " + spec.string() + " --data " + data + " --out " +
                 (dir.path / "new").string());
  EXPECT_EQ(n.code, 0) << n.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "new"));
}

TEST(HardenedTrain, DataOfAnotherShapeIsRefusedFromItsHeader) {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "d");
  dir.write("d/train-images-idx3-ubyte", idx_header({60000, 32, 32}));
  dir.write("d/train-labels-idx1-ubyte", idx_header({60000}));
  dir.write("d/t10k-images-idx3-ubyte", idx_header({10000, 32, 32}));
  dir.write("d/t10k-labels-idx1-ubyte", idx_header({10000}));
  auto spec = dir.write("s.yaml", spec_with("    - dense: 10\n"));
  Result r = run("train --dry-run " + spec.string() + " --data " + (dir.path / "d").string());
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("must be 28x28, found 32x32"), std::string::npos) << r.err;
}

TEST(HardenedTrain, SpecShapeMatchesTheRealDataHeader) {
  DNNLAB_NEED_FASHION_MNIST();
  data::LoadOptions o;
  o.name = "fashion-mnist";
  const data::SampleShape real = data::sample_shape(o);
  nn::Shape declared;
  int64_t classes = 0;
  ASSERT_TRUE(spec::dataset_shape("fashion-mnist", &declared, &classes));
  EXPECT_EQ(real.sample, declared);
  EXPECT_EQ(real.num_classes, classes);
}

TEST(HardenedTrain, OutputsOutsideOutAreRefusedBeforeTraining) {
  TempDir dir;
  const std::string data = headers_only(dir);
  std::filesystem::create_directories(dir.path / "out");
  auto escape = dir.write("e.yaml", spec_with("    - dense: 10\n", "batch_size: 32", "../escaped"));
  Result r =
      run("train " + escape.string() + " --data " + data + " --out " + (dir.path / "out").string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("'name'"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "escaped.safetensors"));

  // An --out that cannot be written is found before the data is read (else: exit 3).
  auto ok = dir.write("ok.yaml", spec_with("    - dense: 10\n"));
  dir.write("a-file", "x");
  Result f = run("train " + ok.string() + " --data " + data + " --out " +
                 (dir.path / "a-file" / "sub").string());
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--out"), std::string::npos) << f.err;
}

TEST(HardenedTrain, UnknownKernelsExitTwoListingTheBuildsKernels) {
  Result r = run("train x.yaml --kernels neon");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--kernels: 'neon'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("available: auto"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("scalar"), std::string::npos) << r.err;
}

const std::string kSweep = R"(name: failing
template:
  data: {dataset: fashion-mnist, validation: 100, limit_train: 500}
  model:
    layers:
      - dense: ${w}
      - dense: 10
  train: {epochs: 1, batch_size: 32}
search:
  method: grid
  parameters:
    w: [8, 16]
)";

TEST(HardenedRun, SweepWhoseTrialsAllFailExitsSixWithReasons) {
  TempDir dir;
  auto sweep = dir.write("failing.yaml", kSweep);
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  Result r = run("run -q --no-server -w 1 --data " + (dir.path / "no-such-data").string() +
                 " --store " + db + " " + sweep.string());
  EXPECT_EQ(r.code, 6) << r.err;
  EXPECT_NE(r.err.find("2 of 2 trials failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  2 x "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not found"), std::string::npos) << r.err;

  Result help = run("run --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("Exit status"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("6 the sweep ended with failed trials"), std::string::npos) << help.out;
}

TEST(HardenedRun, CyclicOrTooLargeSweepIsRefusedBeforeAnythingIsStored) {
  TempDir dir;
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  auto cyclic = dir.write("cyclic.yaml",
                          "name: c\ntemplate: &t\n  model: {layers: [*t]}\n"
                          "search: {method: grid, parameters: {}}\n");
  Result c = run("run -q --no-server -w 1 --store " + db + " " + cyclic.string());
  EXPECT_EQ(c.code, 2) << c.err;
  EXPECT_NE(c.err.find("cyclic.yaml:3:"), std::string::npos) << c.err;

  std::string wide = kSweep;
  wide.replace(wide.find("w: [8, 16]"), 10, "w: [8, 100000]");
  auto big = dir.write("wide.yaml", wide);
  Result m = run("run -q --no-server -w 1 --max-memory 100M --store " + db + " " + big.string());
  EXPECT_EQ(m.code, 2) << m.err;
  EXPECT_NE(m.err.find("largest trial (w=100000)"), std::string::npos) << m.err;
  EXPECT_NE(m.err.find("limit of 100.0 MiB per worker (--max-memory)"), std::string::npos) << m.err;
  auto s = store::open_result_store(db);
  EXPECT_TRUE(s->experiments().empty());
}

TEST(HardenedWorker, ExperimentOverTheMemoryLimitIsRefusedBeforeLeasing) {
  TempDir dir;
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  std::string wide = kSweep;
  wide.replace(wide.find("w: [8, 16]"), 10, "w: [8, 1000000]");
  wide.replace(wide.find("batch_size: 32"), 14, "batch_size: 1048576");
  int64_t exp = 0;
  {
    auto b = experiment::open_backends(db, db);
    exp = experiment::Coordinator::submit(*b.store, *b.queue, wide, "wide.yaml");
  }
  Result r = run("worker --experiment " + std::to_string(exp) + " --store " + db);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("largest trial (w=1000000)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(this machine's memory)"), std::string::npos) << r.err;
  Result two = run("worker --experiment " + std::to_string(exp) + " --slots 2 --store " + db);
  EXPECT_EQ(two.code, 2) << two.err;
  EXPECT_NE(two.err.find("(this machine's memory shared by 2 slots)"), std::string::npos)
      << two.err;
  Result m = run("worker --experiment " + std::to_string(exp) + " --max-memory 1M --store " + db);
  EXPECT_EQ(m.code, 2) << m.err;
  EXPECT_NE(m.err.find("per slot (--max-memory)"), std::string::npos) << m.err;
  auto s = store::open_result_store(db);
  for (const auto& t : all_trials(*s, exp))
    EXPECT_EQ(t.status, store::TrialStatus::queued) << "trial " << t.index;
}

}  // namespace
}  // namespace dnnlab::cli_test
