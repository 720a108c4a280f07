// Model: builds the layer graph from a spec (fusing activations into the
// dense layer before them) and runs forward, loss, backward and the update
// over preallocated buffers. See model.hpp.
#include "nn/model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "nn/conv_layers.hpp"
#include "nn/layers.hpp"
#include "nn/registry.hpp"

namespace dnnlab::nn {

namespace {
constexpr int kInputNode = -1;

// An empty last part built alone (a `classifier: []`: the whole model on the
// other side, this side computing only the loss): its one node passes its
// input through, so the loss and dLoss/d input work as for any part.
class PartIdentity final : public Layer {
 public:
  PartIdentity() : Layer("identity") {}
  void forward(const TensorView& x, const TensorView& y, ForwardContext&) override {
    std::memcpy(y.data(), x.data(), sizeof(float) * x.numel());
  }
  void backward(const TensorView&, const TensorView&, const TensorView& dy,
                const TensorView& dx) override {
    if (dx.data()) std::memcpy(dx.data(), dy.data(), sizeof(float) * dy.numel());
  }
};
}  // namespace

struct Model::Impl {
  struct Node {
    std::unique_ptr<Layer> layer;
    std::vector<int> in;  // producer nodes; kInputNode = the model's input
    std::string name;     // the spec's name, or its index
    Tensor act, grad;     // output and dLoss/d output
  };
  std::vector<Node> nodes;                       // in spec order, which is topological
  std::map<std::string, int, std::less<>> cuts;  // node and part names -> node
  Shape input;
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  Rng rng;
  int64_t batch = 0;
  bool accumulate = false, want_input_grad = false;
  Tensor input_grad;
  TensorView last_x;            // the last forward's input, for backward_from
  std::vector<char> written;    // backward: node's grad holds a value
  std::vector<Tensor> scratch;  // backward: a second consumer's dx, added after
  std::vector<TensorView> xs, dxs;

  void ensure_batch(int64_t b) {
    if (b == batch) return;
    batch = b;
    for (Node& n : nodes) {
      const Shape bs = batched(n.layer->out_shape(), b);
      n.act.resize(bs);
      n.grad.resize(bs);
    }
    if (want_input_grad) input_grad.resize(batched(input, b));
  }
  static Shape batched(const Shape& s, int64_t b) {
    Shape bs;
    bs.rank = s.rank + 1;
    bs[0] = b;
    for (int d = 0; d < s.rank; ++d) bs[d + 1] = s[d];
    return bs;
  }
  int cut_index(std::string_view cut) const {
    auto it = cuts.find(cut);
    if (it == cuts.end())
      throw ShapeError("the model has no node or part '" + std::string(cut) + "'");
    return it->second;
  }
  TensorView run_forward(int last, const TensorView& x, bool training);
  void run_backward(int last, const TensorView& x);
};

namespace {

constexpr int64_t kMaxParams = int64_t{1} << 31;

Shape batch_of(const Shape& s) {
  Shape r;
  r.rank = s.rank - 1;
  for (int i = 1; i < s.rank; ++i) r[i - 1] = s[i];
  return r;
}

// Which spec layers [begin, end) a part covers; the whole model without one.
// A trailing softmax folded into the loss is cut off (n_layers), which can
// leave the last part empty.
struct Range {
  size_t begin, end;
};

Range part_range(const ModelSpec& spec, std::string_view part, size_t n_layers) {
  if (part.empty()) return {0, n_layers};
  for (const PartSpec& p : spec.parts)
    if (p.name == part) return {std::min(p.begin, n_layers), std::min(p.end, n_layers)};
  throw SpecError(spec.where, "parts", "the model has no part '" + std::string(part) + "'");
}

// With allocate=false only the shapes are checked: no parameter memory.
std::unique_ptr<Model::Impl> build_impl(const ModelSpec& spec, const Shape& input,
                                        int64_t num_classes, uint64_t seed, bool allocate,
                                        std::string_view part) {
  auto impl = std::make_unique<Model::Impl>();
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

  // Resolve every layer's inputs to earlier spec layers (kInputNode: the
  // model's input) and count consumers, which decide activation fusion.
  const size_t n = n_layers;
  std::vector<std::vector<int>> ins(n);
  std::vector<int> consumers(n, 0);
  std::map<std::string, int, std::less<>> names;
  for (size_t i = 0; i < n; ++i) {
    const LayerSpec& ls = spec.layers[i];
    if (ls.inputs.empty()) {
      ins[i].push_back(static_cast<int>(i) - 1);
    } else {
      for (const std::string& nm : ls.inputs) {
        if (nm == kModelInput) {
          ins[i].push_back(kInputNode);
          continue;
        }
        if (!nm.empty() && nm[0] == '@') {  // "@-N": N layers back
          const int64_t back = relative_input(nm);
          if (back < 1)
            throw SpecError(ls.where, "inputs",
                            "'" + nm +
                                "' is not a relative input: write \"@-N\" for the layer N "
                                "places back (N a whole number >= 1)");
          const int64_t at = static_cast<int64_t>(i) - back;
          if (at < -1)
            throw SpecError(
                ls.where, "inputs",
                "'" + nm + "' reaches before the model's input (layer " + std::to_string(i) + ")");
          ins[i].push_back(at < 0 ? kInputNode : static_cast<int>(at));
          continue;
        }
        auto it = names.find(nm);
        if (it == names.end())
          throw SpecError(ls.where, "inputs",
                          "'" + nm + "' names no earlier layer (give a layer `name: " + nm +
                              "` before this one, or use `input`)");
        ins[i].push_back(it->second);
      }
    }
    for (int p : ins[i])
      if (p >= 0) ++consumers[p];
    if (!ls.name.empty()) {
      if (const std::string problem = layer_name_problem(ls.name); !problem.empty())
        throw SpecError(ls.where, "name", problem);
      if (ls.name == kModelInput || names.count(ls.name))
        throw SpecError(ls.where, "name", "the name '" + ls.name + "' is already taken");
      names[ls.name] = static_cast<int>(i);
    }
  }

  const Range r = part_range(spec, part, n);
  if (!spec.parts.empty()) {
    // A part reads its own layers and the last layer of the part before it.
    size_t next = 0;
    for (const PartSpec& p : spec.parts) {
      if (p.begin != next || p.end < p.begin)
        throw SpecError(spec.where, "parts",
                        "part '" + p.name + "' does not follow the one before");
      if (p.end == p.begin && &p != &spec.parts.back())
        throw SpecError(spec.where, "parts",
                        "part '" + p.name +
                            "' has no layers; only the last part may be empty (the loss then "
                            "reads the part before it)");
      for (size_t i = p.begin; i < std::min(p.end, n); ++i)
        for (int q : ins[i])
          if (p.begin > 0 && (q == kInputNode || static_cast<size_t>(q) + 1 < p.begin))
            throw SpecError(spec.layers[i].where, "inputs",
                            "part '" + p.name +
                                "' reads a layer inside an earlier part; parts "
                                "meet only at the last layer of the part before");
      next = p.end;
    }
    if (next < n) throw SpecError(spec.where, "parts", "the parts leave layers out of the model");
  }

  // Build every layer (shapes only outside the part), fusing activations.
  std::vector<int> node_of(n, kInputNode);  // spec layer -> node, kInputNode: outside
  std::vector<Shape> out_of(n);
  int64_t total_params = 0;
  std::vector<Shape> in_shapes;
  for (size_t i = 0; i < n; ++i) {
    const LayerSpec& ls = spec.layers[i];
    const LayerInfo* info = find_layer(ls.type);
    if (!info) throw SpecError(ls.where, "type", "unknown layer '" + ls.type + "'");
    const bool inside = i >= r.begin && i < r.end;
    LayerSpec filled = ls;
    const std::string missing = fill_defaults(*info, filled);
    if (!missing.empty()) throw SpecError(ls.where, missing, "required");
    Act act;
    const int p = ins[i].size() == 1 ? ins[i][0] : kInputNode;
    if (inside && p >= 0 && static_cast<size_t>(p) >= r.begin && consumers[p] == 1 &&
        activation_from_name(ls.type, &act) && node_of[p] >= 0 &&
        impl->nodes[node_of[p]].layer->fuse_activation(
            act, static_cast<float>(filled.attrs.get("alpha")))) {
      node_of[i] = node_of[p];  // absorbed into the dense layer before it
      out_of[i] = out_of[p];
      if (!ls.name.empty()) impl->nodes[node_of[p]].name = ls.name;
      continue;
    }
    auto layer = info->make(filled);
    if (auto* d = dynamic_cast<Dense*>(layer.get())) d->set_default_init(spec.init);
    if (auto* c = dynamic_cast<Conv2D*>(layer.get())) c->set_default_init(spec.init);
    in_shapes.clear();
    for (int q : ins[i]) in_shapes.push_back(q == kInputNode ? input : out_of[q]);
    // Each layer draws its initial weights from its own stream, so a part
    // starts with the weights the whole model would have.
    Rng init_rng(derive_seed(seed, 0x1417 + i));
    layer->bind(in_shapes, allocate && inside ? &init_rng : nullptr, ls.where);
    out_of[i] = layer->out_shape();
    if (!inside) continue;
    total_params += layer->param_count();
    if (total_params > kMaxParams)
      throw SpecError(ls.where, ls.type,
                      "the model would have over " + std::to_string(kMaxParams) +
                          " parameters; that is more than dnnlab trains");
    Model::Impl::Node node;
    node.name = ls.name.empty() ? std::to_string(i) : ls.name;
    const std::string prefix = ls.name.empty() ? std::to_string(i) + "." + layer->type() : ls.name;
    for (Param* q : layer->params()) q->name = prefix + "." + q->name;
    for (Param* q : layer->state()) q->name = prefix + "." + q->name;
    for (int q : ins[i]) {
      const bool from_inside = q != kInputNode && static_cast<size_t>(q) >= r.begin;
      node.in.push_back(from_inside ? node_of[q] : kInputNode);
    }
    node.layer = std::move(layer);
    node_of[i] = static_cast<int>(impl->nodes.size());
    impl->nodes.push_back(std::move(node));
  }
  impl->input = r.begin == 0 ? input : out_of[r.begin - 1];
  if (impl->nodes.empty() && !part.empty() && r.end == n) {  // an empty last part
    Model::Impl::Node node;
    node.name = std::string(part);
    node.layer = std::make_unique<PartIdentity>();
    node.layer->bind(impl->input, nullptr, spec.where);
    node.in.push_back(kInputNode);
    impl->nodes.push_back(std::move(node));
    impl->cuts[std::string(part)] = 0;
  }
  if (impl->nodes.empty()) throw SpecError(spec.where, "parts", "the part has no layers");
  const Shape out = impl->nodes.back().layer->out_shape();
  if (num_classes > 0 && r.end == n && out.numel() != num_classes) {
    const SpecLocation& where = spec.layers[n_layers - 1].where;
    throw SpecError(where, "layers",
                    "the last layer gives " + std::to_string(out.numel()) +
                        " outputs per sample but the data set has " + std::to_string(num_classes) +
                        " classes");
  }
  for (const auto& [nm, i] : names)
    if (static_cast<size_t>(i) >= r.begin && static_cast<size_t>(i) < r.end)
      impl->cuts[nm] = node_of[i];
  for (size_t i = r.begin; i < r.end; ++i) impl->cuts[std::to_string(i)] = node_of[i];
  for (const PartSpec& p : spec.parts)
    if (p.end > r.begin && p.end <= r.end) impl->cuts[p.name] = node_of[p.end - 1];
  impl->written.resize(impl->nodes.size());
  impl->rng.reseed(derive_seed(seed, 0xd409));
  return impl;
}

}  // namespace

TensorView Model::Impl::run_forward(int last, const TensorView& x0, bool training) {
  if (!(batch_of(x0.shape()).numel() == input.numel()))
    throw ShapeError("model input " + input.str() + " does not match batch " + x0.shape().str());
  // Data may come flat ([B, 784]); layers see the sample shape ([B, 1, 28, 28]).
  const TensorView x = x0.reshaped(batched(input, x0.rows()));
  last_x = x;
  ensure_batch(x.rows());
  ForwardContext ctx{training, training ? &rng : nullptr};
  for (int k = 0; k <= last; ++k) {
    Node& n = nodes[k];
    const TensorView out = n.act.view();
    if (n.in.size() == 1) {
      n.layer->forward(n.in[0] == kInputNode ? x : nodes[n.in[0]].act.view(), out, ctx);
      continue;
    }
    xs.clear();
    for (int p : n.in) xs.push_back(p == kInputNode ? x : nodes[p].act.view());
    n.layer->forward_n(xs, out, ctx);
  }
  return nodes[last].act.view();
}

// nodes[last].grad holds dLoss/d its output. Walks back in reverse order: a
// node's gradient is complete once every later node has run. The first
// consumer of a node writes its gradient; later ones write aside and add.
void Model::Impl::run_backward(int last, const TensorView& x0) {
  const TensorView x = x0.reshaped(batched(input, x0.rows()));
  std::fill(written.begin(), written.end(), 0);
  written[last] = 1;
  bool input_written = false;
  if (want_input_grad) input_grad.resize(x.shape());
  for (int k = last; k >= 0; --k) {
    if (!written[k]) continue;  // not upstream of `last`
    Node& n = nodes[k];
    xs.clear();
    dxs.clear();
    size_t n_scratch = 0;
    for (int p : n.in) {
      xs.push_back(p == kInputNode ? x : nodes[p].act.view());
      bool* done = nullptr;
      TensorView target;
      if (p == kInputNode) {
        if (!want_input_grad) {
          dxs.emplace_back();
          continue;
        }
        target = input_grad.view();
        done = &input_written;
      } else {
        target = nodes[p].grad.view();
        done = reinterpret_cast<bool*>(&written[p]);
      }
      if (!*done) {
        dxs.push_back(target);
        *done = true;
      } else {
        if (scratch.size() <= n_scratch) scratch.emplace_back();
        scratch[n_scratch].resize(target.shape());
        dxs.push_back(scratch[n_scratch++].view());
      }
    }
    if (n.in.size() == 1)
      n.layer->backward(xs[0], n.act.view(), n.grad.view(), dxs[0]);
    else
      n.layer->backward_n(xs, n.act.view(), n.grad.view(), dxs);
    // Add what later consumers wrote aside.
    size_t s = 0;
    for (size_t i = 0; i < n.in.size() && s < n_scratch; ++i) {
      if (dxs[i].data() != scratch[s].data()) continue;
      const int p = n.in[i];
      float* g = p == kInputNode ? input_grad.data() : nodes[p].grad.data();
      const float* a = scratch[s++].data();
      for (int64_t j = 0, e = dxs[i].numel(); j < e; ++j) g[j] += a[j];
    }
  }
}

std::string layer_name_problem(std::string_view name) {
  const std::string quoted = "'" + std::string(name) + "'";
  if (name.empty() || name.size() > 100)
    return "a layer's name is 1 to 100 characters, got " + std::to_string(name.size());
  if (name == kModelInput) return "`input` names the model's input, not a layer";
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
      return "the name " + quoted +
             " has a character other than letters, digits, '_' and '-' (parameters are named "
             "<layer>.<param>, unnamed layers <index>.<type>, so a name like '1.dense' would "
             "collide with them)";
  if (std::isdigit(static_cast<unsigned char>(name[0])))
    return "the name " + quoted +
           " starts with a digit; unnamed layers are known by their index, so names may not";
  return {};
}

int64_t relative_input(std::string_view ref) {
  if (ref.size() < 3 || ref.size() > 12 || ref[0] != '@' || ref[1] != '-') return 0;
  int64_t back = 0;
  for (char c : ref.substr(2)) {
    if (c < '0' || c > '9') return 0;
    back = back * 10 + (c - '0');
  }
  return back;
}

Shape model_input(const ModelSpec& spec, const Shape& data_shape) {
  if (spec.input.empty()) return data_shape;
  if (spec.input.size() >= static_cast<size_t>(kMaxRank))
    throw SpecError(spec.where, "model.input", "too many dimensions");
  Shape in;
  for (int64_t d : spec.input) in.d[in.rank++] = d;
  if (in.numel() != data_shape.numel())
    throw SpecError(spec.where, "model.input",
                    in.str() + " holds " + std::to_string(in.numel()) +
                        " values per sample; the data's samples are " + data_shape.str() + " (" +
                        std::to_string(data_shape.numel()) + ")");
  return in;
}

Model Model::build(const ModelSpec& spec, const Shape& input, int64_t num_classes, uint64_t seed) {
  return Model(build_impl(spec, input, num_classes, seed, true, ""));
}

Model Model::build_part(const ModelSpec& spec, std::string_view part, const Shape& input,
                        int64_t num_classes, uint64_t seed) {
  if (part.empty()) throw SpecError(spec.where, "parts", "no part named");
  return Model(build_impl(spec, input, num_classes, seed, true, part));
}

void Model::validate(const ModelSpec& spec, const Shape& input, int64_t num_classes) {
  build_impl(spec, input, num_classes, 0, false, "");
}

int64_t Model::count_params(const ModelSpec& spec, const Shape& input, int64_t num_classes) {
  const std::unique_ptr<Impl> impl = build_impl(spec, input, num_classes, 0, false, "");
  int64_t n = 0;
  for (const Impl::Node& node : impl->nodes) n += node.layer->param_count();
  return n;
}

MemoryEstimate Model::estimate_memory(const ModelSpec& spec, const Shape& input,
                                      const TrainSpec& train) {
  const std::unique_ptr<Impl> impl = build_impl(spec, input, 0, 0, false, "");
  std::vector<NodeFootprint> nodes;
  for (const Impl::Node& n : impl->nodes) {
    const Layer& layer = *n.layer;
    const std::string_view type = layer.type();
    NodeFootprint f;
    f.out_per_sample = layer.out_shape().numel();
    f.params = layer.param_count();
    if (type == "batchnorm") f.state = f.params;  // a running mean and variance per channel
    if (type == "dropout" || type == "max_pool2d") f.scratch_per_sample = f.out_per_sample;
    if (type == "dense") f.scratch_fixed = f.params;  // W^T for the sparse paths
    if (type == "conv2d") {
      // One image's unrolled patches, forward and backward.
      const auto& c = static_cast<const Conv2D&>(layer).config();
      const Shape& in =
          n.in[0] == kInputNode ? impl->input : impl->nodes[n.in[0]].layer->out_shape();
      const double cols =
          2.0 * static_cast<double>(in[0]) * c.kernel_h * c.kernel_w *
          static_cast<double>(layer.out_shape().numel() / std::max<int64_t>(1, c.filters));
      f.scratch_fixed = cols < 1e18 ? static_cast<int64_t>(cols) : int64_t{1000000000000000000};
    }
    nodes.push_back(f);
  }
  NodeFootprint packing;  // the kernels' GEMM packing buffer
  packing.scratch_fixed = static_cast<int64_t>(kernels().gemm_scratch_floats);
  nodes.push_back(packing);
  return nn::estimate_memory(nodes, impl->input.numel(), train.batch_size, train.optimizer);
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

TensorView Model::forward(const TensorView& x, bool training) {
  return impl_->run_forward(static_cast<int>(impl_->nodes.size()) - 1, x, training);
}

TensorView Model::forward_to(std::string_view cut, const TensorView& x, bool training) {
  return impl_->run_forward(impl_->cut_index(cut), x, training);
}

void Model::backward_from(std::string_view cut, const TensorView& grad) {
  Impl& m = *impl_;
  const int k = m.cut_index(cut);
  Tensor& g = m.nodes[k].grad;
  if (grad.numel() != g.numel())
    throw ShapeError("gradient " + grad.shape().str() + " does not match node '" +
                     std::string(cut) + "' output " + g.shape().str());
  std::memcpy(g.data(), grad.data(), sizeof(float) * grad.numel());
  m.run_backward(k, m.last_x);
}

float Model::backward_loss(const TensorView& x, const int32_t* labels, float* accuracy) {
  Impl& m = *impl_;
  const int last = static_cast<int>(m.nodes.size()) - 1;
  TensorView logits = m.run_forward(last, x, true);
  int64_t correct = 0;
  const float loss = compute_loss(m.loss, logits, labels, m.nodes[last].grad.view(), &correct);
  if (!std::isfinite(loss)) throw NumericError("loss is " + std::to_string(loss) + " (diverged)");
  m.run_backward(last, x);
  if (accuracy) *accuracy = static_cast<float>(correct) / static_cast<float>(x.rows());
  return loss;
}

float Model::train_step(const TensorView& x, const int32_t* labels, Optimizer& opt,
                        float* accuracy) {
  const float loss = backward_loss(x, labels, accuracy);
  opt.step();
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

void Model::set_accumulate_grads(bool on) {
  impl_->accumulate = on;
  for (auto& n : impl_->nodes) n.layer->set_accumulate_grads(on);
}

void Model::zero_grad() {
  for (Param* p : params()) p->grad.zero();
}

void Model::set_input_grad(bool on) {
  impl_->want_input_grad = on;
}

TensorView Model::input_grad() const {
  return impl_->want_input_grad ? impl_->input_grad.view() : TensorView();
}

std::vector<Param*> Model::params() {
  std::vector<Param*> all;
  for (auto& n : impl_->nodes)
    for (Param* p : n.layer->params()) all.push_back(p);
  return all;
}

std::vector<Param*> Model::state() {
  std::vector<Param*> all;
  for (auto& n : impl_->nodes)
    for (Param* p : n.layer->state()) all.push_back(p);
  return all;
}

std::vector<Param*> Model::saved_tensors() {
  std::vector<Param*> all = params();
  for (Param* p : state()) all.push_back(p);
  return all;
}

int64_t Model::num_params() const {
  int64_t n = 0;
  for (auto& node : impl_->nodes) n += node.layer->param_count();
  return n;
}

const Shape& Model::input_shape() const {
  return impl_->input;
}
const Shape& Model::output_shape() const {
  return impl_->nodes.back().layer->out_shape();
}

std::string Model::summary() const {
  std::string s;
  const auto& nodes = impl_->nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    s += "  " + nodes[i].name + ": " + nodes[i].layer->describe();
    if (nodes[i].in.size() > 1) {
      s += " <-";
      for (int p : nodes[i].in) s += " " + (p < 0 ? std::string(kModelInput) : nodes[p].name);
    }
    s += "\n";
  }
  s += "  parameters: " + std::to_string(num_params()) + "\n";
  return s;
}

void Model::set_rng_seed(uint64_t seed) {
  impl_->rng.reseed(seed);
}

}  // namespace dnnlab::nn
