// Layer: the unit a model is built from. Each layer declares its shape
// contract (which input ranks it takes); Layer::bind checks it in one place
// before the layer computes its output shape and allocates its parameters.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/kernels.hpp"
#include "nn/rng.hpp"
#include "nn/spec.hpp"
#include "nn/tensor.hpp"

namespace dnnlab::nn {

// A trainable tensor with its gradient and optimizer state.
struct Param {
  std::string name;  // "dense3.weight"
  Tensor value, grad;
  Tensor state1, state2;  // momentum / Adam moments, allocated by the optimizer
};

// Per-sample input ranks a layer accepts (the batch dimension is not counted).
struct ShapeContract {
  int min_rank = 1, max_rank = 3;
};

struct ForwardContext {
  bool training = false;
  Rng* rng = nullptr;  // for dropout; set when training
};

class Layer {
 public:
  virtual ~Layer() = default;
  const char* type() const { return type_; }
  const Shape& in_shape() const { return in_; }
  const Shape& out_shape() const { return out_; }

  // Checks the contract, computes the output shape, and (when `rng` is not
  // null) allocates and initializes parameters; a null rng only checks shapes,
  // so validating a spec costs no memory. Throws SpecError naming `where` if
  // the shape cannot work.
  void bind(const Shape& in, Rng* rng, const SpecLocation& where);

  // x: [batch, in...], y: [batch, out...]; y is owned by the model.
  virtual void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) = 0;
  // dy: dLoss/dy; dx: dLoss/dx to write (may alias dy when in_place());
  // dx.data() is null for the first layer, which then only accumulates
  // parameter gradients. Parameter gradients are overwritten, not summed.
  // x and y are those of the layer's last forward (a layer may keep what it
  // learned about x there, e.g. Dense whether it was sparse).
  virtual void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                        const TensorView& dx) = 0;
  virtual std::vector<Param*> params() { return {}; }
  // Number of trainable values, known from the shapes alone (after bind).
  virtual int64_t param_count() const { return 0; }
  // True when backward may write dx over dy (elementwise layers).
  virtual bool in_place() const { return false; }
  // Dense layers absorb a following activation into their epilogue.
  virtual bool fuse_activation(Act act, float alpha) { return false; }
  // A short description for summaries: "dense 784->256 +relu".
  virtual std::string describe() const;

 protected:
  explicit Layer(const char* type) : type_(type) {}
  virtual ShapeContract contract() const { return {}; }
  // Output shape for a contract-checked input shape; may throw SpecError.
  virtual Shape infer(const Shape& in, const SpecLocation& where) const { return in; }
  virtual void init_params(Rng& rng) {}

 private:
  const char* type_;
  Shape in_, out_;
};

}  // namespace dnnlab::nn
