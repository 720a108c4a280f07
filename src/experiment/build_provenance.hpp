// Where this binary came from, described once: `dnnlab --version`, the
// server's /api/stats and the provenance every experiment and trial records
// all read it from here.
//
//   std::cout << experiment::version_text();        // dnnlab 0.1.0 / build ... / ...
//   nlohmann::json p = experiment::build_provenance();
//   p["build_id"];                                   // git describe of the build
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace dnnlab::experiment {

// {"version", "build_id", "compiler", "build_type", "kernel_target" (the
// table in use now), "kernel_targets" (every table this build offers on
// this CPU, best first)}.
nlohmann::json build_provenance();

// The same facts as lines of text, for `dnnlab --version`.
std::string version_text();

}  // namespace dnnlab::experiment
