// Hybrid trainer frames (src/hybrid/wire.hpp): decoded, or a FrameError
// whose offset lies within the input; a decoded frame encodes back to the
// same bytes, but an int8 one, which the encoder quantises afresh: that
// decodes to the same frame with every value within half a step of its
// block (the scale the encoder gives the decoded values).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "hybrid/wire.hpp"

namespace {

void check_int8_round_trip(const dnnlab::hybrid::Frame& f, const dnnlab::hybrid::Bytes& again) {
  using namespace dnnlab::hybrid;
  namespace nn = dnnlab::nn;
  const Frame g = decode(again);  // a FrameError here escapes: the encoder wrote a bad frame
  if (g.kind != f.kind || g.version != f.version || g.ticket != f.ticket || g.dtype != f.dtype ||
      g.feedback != f.feedback || g.indices != f.indices || g.tensors.size() != f.tensors.size())
    std::abort();
  for (size_t t = 0; t < f.tensors.size(); ++t) {
    const nn::Tensor& a = f.tensors[t];
    const nn::Tensor& b = g.tensors[t];
    if (!(a.shape() == b.shape())) std::abort();
    for (int64_t lo = 0; lo < a.numel(); lo += kInt8Block) {
      const size_t n = static_cast<size_t>(std::min(kInt8Block, a.numel() - lo));
      const double s = int8_scale({a.data() + lo, n});
      for (size_t i = 0; i < n; ++i)
        if (!(std::fabs(static_cast<double>(b.data()[lo + i]) - a.data()[lo + i]) <=
              s * (0.5 + 1e-5)))
          std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  try {
    const dnnlab::hybrid::Frame f = dnnlab::hybrid::decode(bytes);
    const dnnlab::hybrid::Bytes again = dnnlab::hybrid::encode(f);
    if (f.dtype == dnnlab::hybrid::Dtype::kInt8 && !f.tensors.empty())
      check_int8_round_trip(f, again);
    else if (again.size() != size || !std::equal(again.begin(), again.end(), data))
      std::abort();
  } catch (const dnnlab::hybrid::FrameError& e) {
    if (e.offset() > size) std::abort();
  }
  return 0;
}
