// build_provenance(): the build facts of build_info.hpp (made by CMake) and
// the kernel tables nn offers, in one object.
#include "experiment/build_provenance.hpp"

#include "dnnlab/build_info.hpp"
#include "nn/kernels.hpp"

namespace dnnlab::experiment {

nlohmann::json build_provenance() {
  nlohmann::json targets = nlohmann::json::array();
  for (std::string_view t : nn::kernel_targets()) targets.push_back(std::string(t));
  return {{"version", build::kVersion},          {"build_id", build::kGitId},
          {"compiler", build::kCompiler},        {"build_type", build::kBuildType},
          {"kernel_target", nn::kernels().name}, {"kernel_targets", std::move(targets)}};
}

std::string version_text() {
  nlohmann::json p = build_provenance();
  std::string targets;
  for (const auto& t : p["kernel_targets"]) {
    if (!targets.empty()) targets += ", ";
    targets += t.get<std::string>();
  }
  return "dnnlab " + p["version"].get<std::string>() + "\nbuild " +
         p["build_id"].get<std::string>() + " (" + p["build_type"].get<std::string>() +
         ")\ncompiler " + p["compiler"].get<std::string>() + "\nkernels " +
         p["kernel_target"].get<std::string>() + " (targets: " + targets + ")\n";
}

}  // namespace dnnlab::experiment
