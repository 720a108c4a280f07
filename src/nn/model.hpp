// Model: a graph of layers (a DAG) built from a ModelSpec, with its
// activation and gradient buffers preallocated for the largest batch seen,
// so a training step allocates nothing. A node reads the node before it
// unless its spec names `inputs`; add and concat read several. A plain chain
// runs exactly as a list of layers would: one buffer per node, no copies.
//
//   nn::Model m = nn::Model::build(spec.model, nn::Shape{1, 28, 28}, /*classes=*/10, seed);
//   nn::Optimizer opt(spec.train.optimizer, m.params());
//   float loss = m.train_step(x_batch, labels, opt);   // forward, loss, backward, update
//   nn::TensorView logits = m.forward(x_batch, /*training=*/false);
//
// Split training (parts `features` and `classifier` on two machines):
//
//   auto f = nn::Model::build_part(spec.model, "features", input, 10, seed);
//   auto c = nn::Model::build_part(spec.model, "classifier", input, 10, seed);
//   TensorView h = f.forward(x, true);                   // machine A, sends h
//   c.set_input_grad(true);
//   c.train_step(h, labels, opt_c);                      // machine B, sends c.input_grad()
//   f.backward_from("features", dh);  opt_f.step();      // machine A
//
// Gradients accumulate over several backward passes after
// set_accumulate_grads(true) until zero_grad(); train_step then adds the
// batch's gradients before its update.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nn/layer.hpp"
#include "nn/loss.hpp"
#include "nn/memory.hpp"
#include "nn/optim.hpp"

namespace dnnlab::nn {

// One sample's shape for a model trained on data of shape `data_shape`: the
// spec's `input` where it gives one (the data's values read in that shape,
// e.g. a [784] set as [1, 28, 28]), else the data's. Every place that builds
// a model for a data set (train, workers, the gateway, its verifier, the
// browser core) goes through this, so they all build the same graph. Throws
// SpecError naming `model.input` when the value counts differ.
Shape model_input(const ModelSpec& spec, const Shape& data_shape);

// Why `name` cannot name a layer, or "" when it can. Unnamed layers are
// known by their index ("3") and their parameters as "3.dense.weight", and a
// named layer's as "<name>.weight": a name is a word of letters, digits, '_'
// and '-' that does not start with a digit (so '1.dense' cannot collide with
// a generated name), and not `input`.
std::string layer_name_problem(std::string_view name);

// How many layers back a relative input ("@-N", N >= 1 in decimal digits
// only) reaches; 0 when `ref` is not of that form ("@-1abc", "@-", "@x").
int64_t relative_input(std::string_view ref);

class Model {
 public:
  // Builds and initializes the model. `input` is one sample's shape;
  // `num_classes` is the width the last layer must have (0: unchecked).
  // Throws SpecError (naming the layer's file:line:column) when the shapes
  // cannot work, an input names no earlier node, or a value is out of range.
  static Model build(const ModelSpec& spec, const Shape& input, int64_t num_classes, uint64_t seed);
  // One named part of spec.parts, alone: its input is the output of the part before it (shapes
  // follow from `input`, the whole model's input); its parameters are initialized and named as in
  // the whole model, so weights move between the whole and its parts. An empty last part
  // (`classifier: []`) is the identity: the loss alone, on the output of the part before it.
  static Model build_part(const ModelSpec& spec, std::string_view part, const Shape& input,
                          int64_t num_classes, uint64_t seed);
  // The same checks as build() without keeping the model.
  static void validate(const ModelSpec& spec, const Shape& input, int64_t num_classes);
  // num_params() of the model build() would make, from its shapes only
  // (nothing of the model's size is allocated). Throws as validate().
  static int64_t count_params(const ModelSpec& spec, const Shape& input, int64_t num_classes);
  // What training the model needs in memory (see memory.hpp), from its shapes
  // only: nothing of the model's size is allocated. Throws as validate().
  static MemoryEstimate estimate_memory(const ModelSpec& spec, const Shape& input,
                                        const TrainSpec& train);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // x: [batch, input...] (or any shape with as many values per row). Returns
  // a view of the last node's output (logits), valid until the next call.
  TensorView forward(const TensorView& x, bool training);
  // Runs the nodes up to `cut` (a node or part name) and returns its output.
  TensorView forward_to(std::string_view cut, const TensorView& x, bool training);
  // Back-propagates `grad` (dLoss/d output of `cut`, from forward_to on the
  // same x) through `cut` and the nodes it depends on: parameter gradients,
  // and input_grad() when set_input_grad(true).
  void backward_from(std::string_view cut, const TensorView& grad);
  // One optimizer step on a batch; returns the mean loss. Throws NumericError
  // when the loss is not finite.
  float train_step(const TensorView& x, const int32_t* labels, Optimizer& opt,
                   float* accuracy = nullptr);
  // Forward, loss and backward without the update (train_step = this + step).
  float backward_loss(const TensorView& x, const int32_t* labels, float* accuracy = nullptr);
  // Mean loss and accuracy over a whole split, in batches.
  LossAndAccuracy evaluate(const TensorView& x, const int32_t* labels, int batch_size = 512);

  void set_accumulate_grads(bool on);
  void zero_grad();
  // Whether backward passes also compute dLoss/d input (a part that sends
  // gradients back to the part before it).
  void set_input_grad(bool on);
  TensorView input_grad() const;

  std::vector<Param*> params();
  // Non-trainable state (BatchNorm running statistics).
  std::vector<Param*> state();
  // What a weights file holds: params() then state().
  std::vector<Param*> saved_tensors();
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
