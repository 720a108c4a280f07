// Model: builds the layer stack from a spec (fusing activations into the
// dense layer before them) and runs forward, loss, backward and the update
// over preallocated buffers.
#include "nn/model.hpp"

#include <cmath>
#include <cstring>

#include "nn/layers.hpp"
#include "nn/registry.hpp"

namespace dnnlab::nn {

struct Model::Impl {
  std::vector<std::unique_ptr<Layer>> layers;  // as executed (fused activations removed)
  std::vector<Tensor> acts;                    // acts[i] = output of layers[i]
  std::vector<Tensor> grads;                   // grads[i] = dLoss/d acts[i]
  Shape input;
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  Rng rng;
  int64_t batch = 0;

  void ensure_batch(int64_t b) {
    if (b == batch) return;
    batch = b;
    for (size_t i = 0; i < layers.size(); ++i) {
      Shape s = layers[i]->out_shape();
      Shape bs;
      bs.rank = s.rank + 1;
      bs[0] = b;
      for (int d = 0; d < s.rank; ++d) bs[d + 1] = s[d];
      acts[i].resize(bs);
      grads[i].resize(bs);
    }
  }
};

namespace {

constexpr int64_t kMaxParams = int64_t{1} << 31;

Shape batch_of(const Shape& s) {
  Shape r;
  r.rank = s.rank - 1;
  for (int i = 1; i < s.rank; ++i) r[i - 1] = s[i];
  return r;
}

// With allocate=false only the shapes are checked: no parameter memory.
std::unique_ptr<Model::Impl> build_impl(const ModelSpec& spec, const Shape& input,
                                        int64_t num_classes, uint64_t seed, bool allocate) {
  auto impl = std::make_unique<Model::Impl>();
  impl->input = input;
  if (!loss_from_name(spec.loss, &impl->loss))
    throw SpecError(spec.where, "loss", "unknown loss '" + spec.loss + "'");
  if (spec.layers.empty()) throw SpecError(spec.where, "layers", "the model has no layers");
  if (input.rank < 1) throw SpecError(spec.where, "input", "the input shape is empty");

  // A trailing softmax is folded into the fused softmax cross-entropy loss.
  size_t n_layers = spec.layers.size();
  if (impl->loss == LossKind::kSoftmaxCrossEntropy && spec.layers.back().type == "softmax")
    --n_layers;
  if (n_layers == 0)
    throw SpecError(spec.where, "layers", "the model has no layers besides softmax");

  Rng init_rng(derive_seed(seed, 0x1417));
  Shape shape = input;
  int64_t total_params = 0;
  for (size_t i = 0; i < n_layers; ++i) {
    const LayerSpec& ls = spec.layers[i];
    const LayerInfo* info = find_layer(ls.type);
    if (!info) throw SpecError(ls.where, "type", "unknown layer '" + ls.type + "'");
    Act act;
    if (!impl->layers.empty() && activation_from_name(ls.type, &act) &&
        impl->layers.back()->fuse_activation(act, ls.alpha))
      continue;  // absorbed into the dense layer before it
    auto layer = info->make(ls);
    if (auto* d = dynamic_cast<Dense*>(layer.get())) d->set_default_init(spec.init);
    layer->bind(shape, allocate ? &init_rng : nullptr, ls.where);
    shape = layer->out_shape();
    total_params += layer->param_count();
    if (total_params > kMaxParams)
      throw SpecError(ls.where, ls.type,
                      "the model would have over " + std::to_string(kMaxParams) +
                          " parameters; that is more than dnnlab trains");
    for (Param* p : layer->params())
      p->name = std::to_string(impl->layers.size()) + "." + layer->type() + "." + p->name;
    impl->layers.push_back(std::move(layer));
  }
  if (num_classes > 0 && shape.numel() != num_classes) {
    const SpecLocation& where = spec.layers[n_layers - 1].where;
    throw SpecError(where, "layers",
                    "the last layer gives " + std::to_string(shape.numel()) +
                        " outputs per sample but the data set has " + std::to_string(num_classes) +
                        " classes");
  }
  impl->acts.resize(impl->layers.size());
  impl->grads.resize(impl->layers.size());
  impl->rng.reseed(derive_seed(seed, 0xd409));
  return impl;
}

}  // namespace

Model Model::build(const ModelSpec& spec, const Shape& input, int64_t num_classes, uint64_t seed) {
  return Model(build_impl(spec, input, num_classes, seed, true));
}

void Model::validate(const ModelSpec& spec, const Shape& input, int64_t num_classes) {
  build_impl(spec, input, num_classes, 0, false);
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

TensorView Model::forward(const TensorView& x, bool training) {
  Impl& m = *impl_;
  if (!(batch_of(x.shape()).numel() == m.input.numel()))
    throw ShapeError("model input " + m.input.str() + " does not match batch " + x.shape().str());
  m.ensure_batch(x.rows());
  ForwardContext ctx{training, training ? &m.rng : nullptr};
  TensorView in = x;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    TensorView out = m.acts[i].view();
    m.layers[i]->forward(in, out, ctx);
    in = out;
  }
  return in;
}

float Model::train_step(const TensorView& x, const int32_t* labels, Optimizer& opt,
                        float* accuracy) {
  Impl& m = *impl_;
  TensorView logits = forward(x, true);
  const size_t last = m.layers.size() - 1;
  int64_t correct = 0;
  const float loss = compute_loss(m.loss, logits, labels, m.grads[last].view(), &correct);
  if (!std::isfinite(loss)) throw NumericError("loss is " + std::to_string(loss) + " (diverged)");
  for (size_t i = last + 1; i-- > 0;) {
    TensorView in = i ? m.acts[i - 1].view() : x;
    TensorView dx = i ? m.grads[i - 1].view() : TensorView();
    m.layers[i]->backward(in, m.acts[i].view(), m.grads[i].view(), dx);
  }
  opt.step();
  if (accuracy) *accuracy = static_cast<float>(correct) / static_cast<float>(x.rows());
  return loss;
}

LossAndAccuracy Model::evaluate(const TensorView& x, const int32_t* labels, int batch_size) {
  const int64_t n = x.rows();
  double loss = 0;
  int64_t correct = 0;
  for (int64_t b = 0; b < n; b += batch_size) {
    const int64_t cnt = std::min<int64_t>(batch_size, n - b);
    TensorView logits = forward(x.rows(b, cnt), false);
    loss +=
        static_cast<double>(compute_loss(impl_->loss, logits, labels + b, TensorView(), &correct)) *
        cnt;
  }
  return {n ? loss / n : 0, n ? static_cast<double>(correct) / n : 0};
}

std::vector<Param*> Model::params() {
  std::vector<Param*> all;
  for (auto& l : impl_->layers)
    for (Param* p : l->params()) all.push_back(p);
  return all;
}

int64_t Model::num_params() const {
  int64_t n = 0;
  for (auto& l : impl_->layers) n += l->param_count();
  return n;
}

const Shape& Model::input_shape() const {
  return impl_->input;
}
const Shape& Model::output_shape() const {
  return impl_->layers.back()->out_shape();
}

std::string Model::summary() const {
  std::string s;
  for (size_t i = 0; i < impl_->layers.size(); ++i)
    s += "  " + std::to_string(i) + ": " + impl_->layers[i]->describe() + "\n";
  s += "  parameters: " + std::to_string(num_params()) + "\n";
  return s;
}

void Model::set_rng_seed(uint64_t seed) {
  impl_->rng.reseed(seed);
}

}  // namespace dnnlab::nn
