// What the browser core's C API files share (api.cpp, hybrid_api.cpp): the
// export macro, the shard handle, and the error plumbing every entry point
// runs through (api(): exceptions become a status code and a message).
#pragma once
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "data/shard.hpp"
#include "dnnlab_wasm.h"
#include "nn/errors.hpp"
#include "nn/tensor.hpp"

#ifdef __EMSCRIPTEN__
#include <emscripten/emscripten.h>
#define DNNLAB_API extern "C" EMSCRIPTEN_KEEPALIVE
#else
#define DNNLAB_API extern "C"
#endif

namespace nn = dnnlab::nn;
namespace data = dnnlab::data;

struct dnnlab_shard {
  std::shared_ptr<const data::Dataset> ds;  // shared with models training on it
  std::string info;                         // dnnlab_shard_info's JSON
};

namespace dnnlab::wasm::api_detail {

inline int g_status = DNNLAB_OK;
inline std::string g_error;

inline int set_error(int status, const std::string& msg) {
  g_status = status;
  g_error = msg;
  return status;
}

struct ArgumentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void need(bool ok, const std::string& msg) {
  if (!ok) throw ArgumentError(msg);
}

// Runs `body`; any exception becomes a status code and a message. The C
// boundary must never let one escape: it would end the wasm instance.
template <class F>
int api(F&& body) {
  try {
    body();
    return DNNLAB_OK;
  } catch (const ArgumentError& e) {
    return set_error(DNNLAB_ERR_ARGUMENT, e.what());
  } catch (const dnnlab::SpecError& e) {
    return set_error(DNNLAB_ERR_SPEC, e.what());
  } catch (const dnnlab::ShapeError& e) {
    return set_error(DNNLAB_ERR_SHAPE, e.what());
  } catch (const dnnlab::NumericError& e) {
    return set_error(DNNLAB_ERR_NUMERIC, e.what());
  } catch (const dnnlab::DataError& e) {
    return set_error(DNNLAB_ERR_DATA, e.what());
  } catch (const std::bad_alloc&) {
    return set_error(DNNLAB_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return set_error(DNNLAB_ERR_INTERNAL, e.what());
  } catch (...) {
    return set_error(DNNLAB_ERR_INTERNAL, "unknown error");
  }
}

inline nn::Shape batch_shape(const nn::Shape& sample, int64_t n) {
  nn::Shape s;
  s.rank = sample.rank + 1;
  s.d[0] = n;
  for (int i = 0; i < sample.rank; ++i) s.d[i + 1] = sample.d[i];
  return s;
}

}  // namespace dnnlab::wasm::api_detail
