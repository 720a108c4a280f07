// A sweep submitted over the REST API (`dnnlab submit` to `dnnlab serve`)
// may read data files only inside the server's data root (--data): not
// outside it, not through '..' or a symbolic link, not by a relative path;
// the error names the field. A local `dnnlab train` reads any path.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <regex>
#include <thread>

#include "cli_util.hpp"

namespace dnnlab::cli_test {
namespace data_root_cmd_test {

// 40 rows of two features and a class: enough for a split and an epoch.
std::string small_csv() {
  std::string t = "a,b,label\n";
  for (int i = 0; i < 40; ++i)
    t += std::to_string(i % 7) + "," + std::to_string((i * 3) % 5) + "," + std::to_string(i % 2) +
         "\n";
  return t;
}

std::string sweep_reading(const std::string& path) {
  return R"(name: by-path
template:
  data: {path: ")" +
         path + R"(", validation: 8}
  model:
    layers:
      - dense: ${width}
        activation: relu
      - dense: 2
  train: {epochs: 1, batch_size: 8}
search:
  method: grid
  parameters:
    width: [4]
)";
}

TEST(DataRootCmd, SubmittedSweepsReadOnlyInsideTheDataRoot) {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "data");
  dir.write("data/inside.csv", small_csv());
  const auto outside = dir.write("outside.csv", small_csv());
  std::filesystem::create_symlink(outside, dir.path / "data" / "link.csv");
  const std::string root = (dir.path / "data").string();

  pid_t pid = spawn(dir.path,
                    {"serve", "--listen", "127.0.0.1:0", "--store", "sqlite:s.db", "--data", root});
  std::string url;
  for (int i = 0; i < 300 && url.empty(); ++i) {
    std::smatch m;
    const std::string out = slurp(dir.path / "out.txt");
    if (std::regex_search(out, m, std::regex(R"(serving (http://127\.0\.0\.1:\d+))")))
      url = m[1];
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(url.empty()) << slurp(dir.path / "log.txt");
  auto submit = [&](const std::string& path, const std::string& file) {
    return run("submit " + dir.write(file, sweep_reading(path)).string() + " --server " + url +
               " --token-file " + (dir.path / "dnnlab.token").string());
  };
  struct Case {
    std::string path, why;
  };
  for (const Case& c : {Case{outside.string(), "outside the server's data root"},
                        Case{root + "/../outside.csv", "outside the server's data root"},
                        Case{root + "/link.csv", "outside the server's data root"},
                        Case{"data/inside.csv", "is relative"},
                        Case{"/etc/passwd", "outside the server's data root"}}) {
    Result r = submit(c.path, "bad.yaml");
    EXPECT_EQ(r.code, 2) << c.path << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("'template.data.path'"), std::string::npos) << c.path << ": " << r.err;
    EXPECT_NE(r.err.find(c.why), std::string::npos) << c.path << ": " << r.err;
  }
  Result ok = submit(root + "/inside.csv", "good.yaml");
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("submitted"), std::string::npos);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

TEST(DataRootCmd, LocalTrainReadsAnyPath) {
  TempDir dir;
  const auto outside = dir.write("anywhere.csv", small_csv());
  std::string spec = sweep_reading(outside.string());
  // The sweep's template as a run spec: the same data and model, no search.
  spec = std::regex_replace(spec, std::regex(R"(\$\{width\})"), "4");
  spec = spec.substr(0, spec.find("search:"));
  spec = std::regex_replace(spec, std::regex("template:\n"), "");
  spec = std::regex_replace(spec, std::regex("\n  "), "\n");
  Result r = run("train " + dir.write("run.yaml", spec).string() + " --out " + dir.path.string());
  EXPECT_EQ(r.code, 0) << spec << r.out << r.err;
}

}  // namespace data_root_cmd_test
}  // namespace dnnlab::cli_test
