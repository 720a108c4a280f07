// Run-spec YAML: any text gives a RunSpec or a SpecError, nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "spec/run_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    dnnlab::nn::RunSpec s = dnnlab::spec::parse_run_spec(
        std::string(reinterpret_cast<const char*>(data), size), "f.yaml");
    // What parses must write a canonical form that parses to the same form.
    const std::string canonical = dnnlab::spec::to_yaml(s);
    if (dnnlab::spec::to_yaml(dnnlab::spec::parse_run_spec(canonical, "c.yaml")) != canonical)
      __builtin_trap();
  } catch (const dnnlab::SpecError&) {
  }
  return 0;
}
