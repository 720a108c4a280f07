// Model: a stack of layers built from a ModelSpec, with its activation and
// gradient buffers preallocated for the largest batch seen, so a training
// step allocates nothing.
//
//   nn::Model m = nn::Model::build(spec.model, nn::Shape{784}, /*classes=*/10, seed);
//   nn::Optimizer opt(spec.train.optimizer, m.params());
//   float loss = m.train_step(x_batch, labels, opt);   // forward, loss, backward, update
//   nn::TensorView logits = m.forward(x_batch, /*training=*/false);
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/layer.hpp"
#include "nn/loss.hpp"
#include "nn/optim.hpp"

namespace dnnlab::nn {

class Model {
 public:
  // Builds and initializes the model. `input` is one sample's shape;
  // `num_classes` is the width the last layer must have (0: unchecked).
  // Throws SpecError (naming the layer's file:line:column) when the shapes
  // cannot work or a value is out of range.
  static Model build(const ModelSpec& spec, const Shape& input, int64_t num_classes, uint64_t seed);
  // The same checks as build() without keeping the model.
  static void validate(const ModelSpec& spec, const Shape& input, int64_t num_classes);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // x: [batch, input...]. Returns a view of the last layer's output (logits),
  // valid until the next call.
  TensorView forward(const TensorView& x, bool training);
  // One SGD/Adam step on a batch; returns the mean loss. Throws NumericError
  // when the loss is not finite.
  float train_step(const TensorView& x, const int32_t* labels, Optimizer& opt,
                   float* accuracy = nullptr);
  // Mean loss and accuracy over a whole split, in batches.
  LossAndAccuracy evaluate(const TensorView& x, const int32_t* labels, int batch_size = 512);

  std::vector<Param*> params();
  int64_t num_params() const;
  const Shape& input_shape() const;
  const Shape& output_shape() const;
  std::string summary() const;
  void set_rng_seed(uint64_t seed);

  struct Impl;  // defined in model.cpp

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dnnlab::nn
