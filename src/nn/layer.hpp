// Layer: the unit a model is built from. Each layer declares its shape
// contract (which input ranks it takes); Layer::bind checks it in one place
// before the layer computes its output shape and allocates its parameters.
// Most layers read one input (forward/backward); MultiInputLayer (add,
// concat) reads several through forward_n/backward_n, which the model calls
// for every node with more than one input.
//
//   Dense d(64, "he", true);
//   d.bind(Shape{1, 28, 28}, &rng, where);          // Dense flattens: out [64]
//   d.forward(x, y, ctx);                           // x [B,1,28,28], y [B,64]
//   d.backward(x, y, dy, dx);                       // dx [B,1,28,28]
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nn/kernels.hpp"
#include "nn/rng.hpp"
#include "nn/spec.hpp"
#include "nn/tensor.hpp"

namespace dnnlab::nn {

// A trainable tensor with its gradient and optimizer state. Non-trainable
// state (BatchNorm's running statistics) is a Param with an empty grad,
// listed by Layer::state() instead of params(), saved with the weights.
struct Param {
  std::string name;  // "dense3.weight"
  Tensor value, grad;
  Tensor state1, state2, state3;  // optimizer state (momentum, moments), allocated by it
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
  // The same for a node with several inputs (each checked against the
  // contract); a single-input layer accepts exactly one.
  void bind(std::span<const Shape> in, Rng* rng, const SpecLocation& where);

  // x: [batch, in...], y: [batch, out...]; y is owned by the model.
  virtual void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) = 0;
  // dy: dLoss/dy; dx: dLoss/dx to write (may alias dy when in_place());
  // dx.data() is null for the first layer, which then only computes
  // parameter gradients. Parameter gradients are overwritten, or summed into
  // when accumulate_grads() (set_accumulate_grads; Model::zero_grad clears).
  // x and y are those of the layer's last forward (a layer may keep what it
  // learned about x there, e.g. Dense whether it was sparse).
  virtual void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                        const TensorView& dx) = 0;
  // Several inputs: xs[i] / dxs[i] per input (a dxs[i] may have null data).
  // Single-input layers take exactly one and defer to forward/backward.
  virtual void forward_n(std::span<const TensorView> xs, const TensorView& y, ForwardContext& ctx) {
    forward(xs[0], y, ctx);
  }
  virtual void backward_n(std::span<const TensorView> xs, const TensorView& y, const TensorView& dy,
                          std::span<const TensorView> dxs) {
    backward(xs[0], y, dy, dxs[0]);
  }
  virtual std::vector<Param*> params() { return {}; }
  // Non-trainable tensors saved with the weights (running statistics).
  virtual std::vector<Param*> state() { return {}; }
  void set_accumulate_grads(bool on) { accumulate_ = on; }
  bool accumulate_grads() const { return accumulate_; }
  const std::vector<Shape>& in_shapes() const { return ins_; }
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
  // How many inputs the layer takes: 1, or at least 2 (multi_input()).
  virtual bool multi_input() const { return false; }
  // Output shape for a contract-checked input shape; may throw SpecError.
  virtual Shape infer(const Shape& in, const SpecLocation& where) const { return in; }
  // The same for several inputs (multi-input layers override it).
  virtual Shape infer_n(std::span<const Shape> in, const SpecLocation& where) const {
    return infer(in[0], where);
  }
  virtual void init_params(Rng& rng) {}

 private:
  const char* type_;
  Shape in_, out_;
  std::vector<Shape> ins_;
  bool accumulate_ = false;
};

// A layer of two or more inputs; forward/backward on one input are the
// n = 1 case of forward_n/backward_n.
class MultiInputLayer : public Layer {
 public:
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) final {
    forward_n(std::span<const TensorView>(&x, 1), y, ctx);
  }
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) final {
    backward_n(std::span<const TensorView>(&x, 1), y, dy, std::span<const TensorView>(&dx, 1));
  }
  void forward_n(std::span<const TensorView> xs, const TensorView& y,
                 ForwardContext& ctx) override = 0;
  void backward_n(std::span<const TensorView> xs, const TensorView& y, const TensorView& dy,
                  std::span<const TensorView> dxs) override = 0;

 protected:
  explicit MultiInputLayer(const char* type) : Layer(type) {}
  bool multi_input() const override { return true; }
};

}  // namespace dnnlab::nn
