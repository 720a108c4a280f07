// Sweep YAML (as POST /api/experiments receives it): a SweepSpec or a SpecError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sweep/sweep_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    dnnlab::sweep::parse_sweep(std::string(reinterpret_cast<const char*>(data), size), "f.yaml");
  } catch (const dnnlab::SpecError&) {
  }
  return 0;
}
