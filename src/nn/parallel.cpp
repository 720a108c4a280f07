// The parallel-for hook (see parallel.hpp).
#include "nn/parallel.hpp"

#include <utility>

namespace dnnlab::nn {
namespace {

ParallelFor& hook() {
  static ParallelFor fn;
  return fn;
}

}  // namespace

void set_parallel_for(ParallelFor fn) {
  hook() = std::move(fn);
}

void parallel_for(int n, const std::function<void(int)>& body) {
  if (n <= 0) return;
  const ParallelFor& fn = hook();
  if (n == 1 || !fn) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
  fn(n, body);
}

}  // namespace dnnlab::nn
