// The browser core's C API (dnnlab_wasm.h): a model built from a JSON spec,
// its optimizer and a copy of the training set behind one handle. Every entry
// point catches everything and turns it into a status code and a message.
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "api_internal.hpp"
#include "data/shard.hpp"
#include "dnnlab_wasm.h"
#include "nn/json.hpp"
#include "nn/kernels.hpp"
#include "nn/model.hpp"
#include "nn/rng.hpp"
#include "nn/safetensors.hpp"
#include "nn/train.hpp"
#include "spec_json.hpp"

using Clock = std::chrono::steady_clock;
using namespace dnnlab::wasm::api_detail;

// A copy of a training set handed in by dnnlab_model_load_data.
struct OwnedSet {
  nn::Tensor x;
  std::vector<int32_t> y;
};

struct dnnlab_model {
  dnnlab::wasm::CoreSpec spec;
  nn::Model model;
  nn::Trainer trainer;  // holds the optimizer; constructed after `model`
  nn::Shape input;      // one sample
  int64_t row = 0;      // floats per sample
  // The training set: a view of an OwnedSet or of a shard's split, kept alive
  // by train_owner (a model may outlive the shard handle it trains on).
  std::shared_ptr<const void> train_owner;
  nn::TensorView train_x;  // [n, input...]
  const int32_t* train_y = nullptr;
  int64_t train_n = 0;
  int epoch = 0;  // epochs run so far (for the schedule and shuffling)
  // train_steps: a shuffled order over train_x and a cursor into it.
  std::vector<int64_t> order;
  int64_t cursor = 0, pass = 0;
  nn::Tensor batch_x;
  std::vector<int32_t> batch_y;
  std::string saved;  // the last safetensors bytes handed out

  dnnlab_model(dnnlab::wasm::CoreSpec s, nn::Model m, nn::Shape in)
      : spec(std::move(s)), model(std::move(m)), trainer(model, spec.train), input(in) {
    row = input.numel();
  }
};

namespace {

void check_finite(const float* p, int64_t n, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i]))
      throw dnnlab::NumericError(std::string(what) + " holds a non-finite value at index " +
                                 std::to_string(i));
}

void check_set(const dnnlab_model* m, const float* x, int32_t x_count, const int32_t* y,
               int32_t n) {
  need(n > 0, "n must be positive");
  need(x && y, "null data pointer");
  if (static_cast<int64_t>(x_count) != static_cast<int64_t>(n) * m->row)
    throw dnnlab::ShapeError("x holds " + std::to_string(x_count) + " floats; " +
                             std::to_string(n) + " samples of " + m->input.str() + " need " +
                             std::to_string(static_cast<int64_t>(n) * m->row));
  check_finite(x, x_count, "x");
  for (int32_t i = 0; i < n; ++i)
    if (y[i] < 0 || y[i] >= m->spec.classes)
      throw dnnlab::DataError("labels", -1,
                              "label " + std::to_string(y[i]) + " at index " + std::to_string(i) +
                                  " is outside [0, " + std::to_string(m->spec.classes) + ")");
}

constexpr const char* kSplitNames[3] = {"train", "val", "test"};

const data::Split& shard_split(const dnnlab_shard* s, int32_t split) {
  need(split >= 0 && split <= 2, "split must be 0 (train), 1 (val) or 2 (test)");
  const data::Dataset& ds = *s->ds;
  return split == 0 ? ds.train : split == 1 ? ds.val : ds.test;
}

// A shard split viewed with the model's input shape (no copy). The shard was
// checked when opened (finite values, labels < its classes); what is left is
// whether it fits this model.
nn::TensorView shard_view(const dnnlab_model* m, const dnnlab_shard* s, const data::Split& sp) {
  const data::Dataset& ds = *s->ds;
  if (ds.sample_shape.numel() != m->row)
    throw dnnlab::ShapeError("the shard's samples are " + std::to_string(ds.sample_shape.numel()) +
                             " values, the model's input " + m->input.str() + " needs " +
                             std::to_string(m->row));
  if (ds.num_classes > m->spec.classes)
    for (size_t i = 0; i < sp.y.size(); ++i)
      if (sp.y[i] >= m->spec.classes)
        throw dnnlab::DataError("shard", -1,
                                "label " + std::to_string(sp.y[i]) + " at index " +
                                    std::to_string(i) + " is outside the model's [0, " +
                                    std::to_string(m->spec.classes) + ")");
  return nn::TensorView(const_cast<float*>(sp.x.data()), batch_shape(m->input, sp.size()));
}

}  // namespace

DNNLAB_API int dnnlab_last_status(void) {
  return g_status;
}
DNNLAB_API const char* dnnlab_last_error(void) {
  return g_error.c_str();
}
DNNLAB_API const char* dnnlab_kernels_name(void) {
  return nn::kernels().name;
}

DNNLAB_API dnnlab_model* dnnlab_model_create(const char* spec_json) {
  dnnlab_model* out = nullptr;
  int st = api([&] {
    need(spec_json != nullptr, "null spec");
    dnnlab::wasm::CoreSpec spec = dnnlab::wasm::parse_core_spec(spec_json);
    nn::Shape in;
    if (spec.model.input.size() >= static_cast<size_t>(nn::kMaxRank))
      throw dnnlab::SpecError(spec.model.where, "input", "too many dimensions");
    for (int64_t d : spec.model.input) in.d[in.rank++] = d;
    nn::Model model = nn::Model::build(spec.model, in, spec.classes, spec.train.seed);
    out = new dnnlab_model(std::move(spec), std::move(model), in);
  });
  if (st == DNNLAB_OK) g_status = DNNLAB_OK, g_error.clear();
  return out;
}

DNNLAB_API void dnnlab_model_free(dnnlab_model* m) {
  api([&] { delete m; });
}

DNNLAB_API int32_t dnnlab_model_num_params(dnnlab_model* m) {
  int64_t n = -1;
  api([&] {
    need(m, "null model");
    n = m->model.num_params();
  });
  return static_cast<int32_t>(n);
}

DNNLAB_API int32_t dnnlab_model_input_size(dnnlab_model* m) {
  int64_t n = -1;
  api([&] {
    need(m, "null model");
    n = m->row;
  });
  return static_cast<int32_t>(n);
}

DNNLAB_API int dnnlab_model_get_params(dnnlab_model* m, float* out, int32_t count) {
  return api([&] {
    need(m && out, "null pointer");
    if (count != m->model.num_params())
      throw dnnlab::ShapeError("the model has " + std::to_string(m->model.num_params()) +
                               " parameters, the buffer " + std::to_string(count));
    for (nn::Param* p : m->model.params()) {
      std::memcpy(out, p->value.data(), sizeof(float) * p->value.numel());
      out += p->value.numel();
    }
  });
}

DNNLAB_API int dnnlab_model_set_params(dnnlab_model* m, const float* in, int32_t count) {
  return api([&] {
    need(m && in, "null pointer");
    if (count != m->model.num_params())
      throw dnnlab::ShapeError("the model has " + std::to_string(m->model.num_params()) +
                               " parameters, the buffer " + std::to_string(count));
    check_finite(in, count, "parameters");
    for (nn::Param* p : m->model.params()) {
      std::memcpy(p->value.data(), in, sizeof(float) * p->value.numel());
      in += p->value.numel();
    }
  });
}

DNNLAB_API const uint8_t* dnnlab_model_save(dnnlab_model* m, int32_t* len) {
  const uint8_t* out = nullptr;
  api([&] {
    need(m && len, "null pointer");
    m->saved = nn::to_safetensors(m->model.saved_tensors());
    *len = static_cast<int32_t>(m->saved.size());
    out = reinterpret_cast<const uint8_t*>(m->saved.data());
  });
  return out;
}

DNNLAB_API int dnnlab_model_load(dnnlab_model* m, const uint8_t* bytes, int32_t len) {
  return api([&] {
    need(m && bytes && len >= 0, "null pointer or negative length");
    // Load into a copy first: a file that fails half-way leaves the model as it was.
    std::vector<std::vector<float>> backup;
    for (nn::Param* p : m->model.saved_tensors())
      backup.emplace_back(p->value.data(), p->value.data() + p->value.numel());
    try {
      nn::from_safetensors(std::string(reinterpret_cast<const char*>(bytes), len),
                           m->model.saved_tensors());
      for (nn::Param* p : m->model.saved_tensors())
        check_finite(p->value.data(), p->value.numel(), p->name.c_str());
    } catch (...) {
      size_t i = 0;
      for (nn::Param* p : m->model.saved_tensors())
        std::memcpy(p->value.data(), backup[i++].data(), sizeof(float) * p->value.numel());
      throw;
    }
  });
}

DNNLAB_API int dnnlab_model_load_data(dnnlab_model* m, const float* x, int32_t x_count,
                                      const int32_t* y, int32_t n) {
  return api([&] {
    need(m, "null model");
    check_set(m, x, x_count, y, n);
    auto set = std::make_shared<OwnedSet>();
    set->x.resize(batch_shape(m->input, n));
    std::memcpy(set->x.data(), x, sizeof(float) * x_count);
    set->y.assign(y, y + n);
    m->train_x = set->x.view();
    m->train_y = set->y.data();
    m->train_n = n;
    m->train_owner = std::move(set);
    m->order.clear();
    m->cursor = 0;
    m->trainer.abandon_epoch();  // a new set: an epoch in pieces starts over
  });
}

DNNLAB_API int dnnlab_model_use_split(dnnlab_model* m, dnnlab_shard* s, int32_t split) {
  return api([&] {
    need(m && s, "null model or shard");
    const data::Split& sp = shard_split(s, split);
    need(sp.size() > 0, std::string(kSplitNames[split]) + " split is empty");
    m->train_x = shard_view(m, s, sp);
    m->train_y = sp.y.data();
    m->train_n = sp.size();
    m->train_owner = s->ds;
    m->order.clear();
    m->cursor = 0;
    m->trainer.abandon_epoch();  // a new set: an epoch in pieces starts over
  });
}

namespace {
// What dnnlab_model_get_state holds beyond the parameters, in its order.
std::vector<nn::Tensor*> state_tensors(dnnlab_model* m) {
  std::vector<nn::Tensor*> out;
  for (nn::Param* p : m->model.params())
    for (nn::Tensor* t : {&p->state1, &p->state2, &p->state3})
      if (t->numel()) out.push_back(t);
  for (nn::Param* p : m->model.state()) out.push_back(&p->value);
  return out;
}
}  // namespace

DNNLAB_API int32_t dnnlab_model_num_state(dnnlab_model* m) {
  int64_t n = -1;
  api([&] {
    need(m, "null model");
    n = 0;
    for (nn::Tensor* t : state_tensors(m)) n += t->numel();
  });
  return static_cast<int32_t>(n);
}

DNNLAB_API int dnnlab_model_get_state(dnnlab_model* m, float* out, int32_t count,
                                      double* counters) {
  return api([&] {
    need(m && out && counters, "null pointer");
    need(count == dnnlab_model_num_state(m), "count is not dnnlab_model_num_state");
    for (nn::Tensor* t : state_tensors(m)) {
      std::memcpy(out, t->data(), sizeof(float) * size_t(t->numel()));
      out += t->numel();
    }
    counters[0] = static_cast<double>(m->trainer.optimizer().steps());
    counters[1] = m->epoch;
  });
}

DNNLAB_API int dnnlab_model_set_state(dnnlab_model* m, const float* in, int32_t count,
                                      const double* counters) {
  return api([&] {
    need(m && in && counters, "null pointer");
    need(count == dnnlab_model_num_state(m), "count is not dnnlab_model_num_state");
    need(!m->trainer.in_epoch(), "an epoch is under way");
    need(counters[0] >= 0 && counters[1] >= 0 && counters[1] < 1e9, "negative step or epoch count");
    check_finite(in, count, "state");
    for (nn::Tensor* t : state_tensors(m)) {
      std::memcpy(t->data(), in, sizeof(float) * size_t(t->numel()));
      in += t->numel();
    }
    m->trainer.optimizer().set_steps(static_cast<int64_t>(counters[0]));
    m->epoch = static_cast<int>(counters[1]);
  });
}

DNNLAB_API int dnnlab_model_epoch_order(dnnlab_model* m, int32_t epoch, int32_t n, int32_t* out) {
  return api([&] {
    need(m && out, "null pointer");
    need(epoch >= 0 && n > 0, "epoch must be >= 0 and n positive");
    const std::vector<int64_t> order = nn::epoch_order(m->spec.train.seed, epoch, n);
    for (int32_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(order[static_cast<size_t>(i)]);
  });
}

DNNLAB_API int dnnlab_model_train_epochs(dnnlab_model* m, int32_t epochs, double* out) {
  return api([&] {
    need(m, "null model");
    need(epochs > 0, "epochs must be positive");
    need(m->train_n > 0, "no training data loaded (dnnlab_model_load_data or use_split)");
    nn::LabeledData d{m->train_x, m->train_y};
    nn::EpochResult r;
    for (int32_t e = 0; e < epochs; ++e) r = m->trainer.run_epoch(m->epoch++, d, nullptr, nullptr);
    if (out) {
      out[0] = r.train_loss;
      out[1] = r.train_acc;
      out[2] = r.seconds;
      out[3] = r.samples_per_second;
    }
  });
}

DNNLAB_API int dnnlab_model_fit_epoch(dnnlab_model* m, dnnlab_shard* val_shard, double* out) {
  double part[10];
  const int status = dnnlab_model_fit_epoch_part(m, val_shard, 0, part);
  if (status == DNNLAB_OK) std::memcpy(out, part, sizeof(double) * 8);
  return status;
}

DNNLAB_API int dnnlab_model_fit_epoch_part(dnnlab_model* m, dnnlab_shard* val_shard,
                                           int32_t max_batches, double* out) {
  return api([&] {
    need(m && out, "null pointer");
    need(m->train_n > 0, "no training data loaded (dnnlab_model_load_data or use_split)");
    need(max_batches >= 0, "max_batches must not be negative");
    nn::LabeledData d{m->train_x, m->train_y};
    if (!m->trainer.in_epoch()) m->trainer.begin_epoch(m->epoch, d);
    const bool last = m->trainer.epoch_batches(d, max_batches, nullptr);
    double v[10] = {0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    double(m->epoch + 1),
                    double(m->trainer.epoch_samples_done()),
                    double(m->trainer.epoch_samples())};
    if (last) {
      nn::LabeledData val;
      const bool has_val = val_shard && val_shard->ds->val.size() > 0;
      if (has_val) {
        const data::Split& sp = val_shard->ds->val;
        val = {shard_view(m, val_shard, sp), sp.y.data()};
      }
      const nn::EpochResult r = m->trainer.end_epoch(has_val ? &val : nullptr, nullptr);
      ++m->epoch;
      // No validation data: 0 here; the gateway drops the values of such runs.
      const double e[8] = {r.train_loss,
                           r.train_acc,
                           r.val_loss.value_or(0),
                           r.val_acc.value_or(0),
                           r.seconds,
                           r.samples_per_second,
                           r.lr,
                           double(r.epoch)};
      for (double x : e)
        if (!std::isfinite(x))
          throw dnnlab::NumericError("epoch " + std::to_string(r.epoch) +
                                     " produced a non-finite metric");
      std::memcpy(v, e, sizeof e);
    }
    std::memcpy(out, v, sizeof v);
  });
}

DNNLAB_API int dnnlab_model_train_steps(dnnlab_model* m, int32_t steps, double* out) {
  return api([&] {
    need(m, "null model");
    need(steps > 0, "steps must be positive");
    need(m->train_n > 0, "no training data loaded (dnnlab_model_load_data or use_split)");
    const int64_t n = m->train_n;
    const int64_t bs = std::min<int64_t>(m->spec.train.batch_size, n);
    m->batch_x.resize(batch_shape(m->input, bs));
    m->batch_y.resize(bs);
    double loss_sum = 0, acc_sum = 0;
    int64_t done = 0;
    const auto start = Clock::now();
    for (int32_t s = 0; s < steps; ++s) {
      if (m->order.empty() || m->cursor >= n) {  // a new pass, shuffled by seed and pass
        m->order.resize(n);
        for (int64_t i = 0; i < n; ++i) m->order[i] = i;
        nn::Rng rng(
            nn::derive_seed(m->spec.train.seed, 0x57E90000ull + static_cast<uint64_t>(m->pass++)));
        for (int64_t i = n - 1; i > 0; --i) std::swap(m->order[i], m->order[rng.below(i + 1)]);
        m->cursor = 0;
      }
      const int64_t cnt = std::min(bs, n - m->cursor);
      for (int64_t i = 0; i < cnt; ++i) {
        const int64_t src = m->order[m->cursor + i];
        std::memcpy(m->batch_x.data() + i * m->row, m->train_x.data() + src * m->row,
                    sizeof(float) * m->row);
        m->batch_y[i] = m->train_y[src];
      }
      m->cursor += cnt;
      float acc = 0;
      const float loss = m->model.train_step(m->batch_x.view().rows(0, cnt), m->batch_y.data(),
                                             m->trainer.optimizer(), &acc);
      loss_sum += static_cast<double>(loss) * cnt;
      acc_sum += static_cast<double>(acc) * cnt;
      done += cnt;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    if (out) {
      out[0] = loss_sum / done;
      out[1] = acc_sum / done;
      out[2] = secs;
      out[3] = secs > 0 ? done / secs : 0;
    }
  });
}

DNNLAB_API int dnnlab_model_evaluate(dnnlab_model* m, const float* x, int32_t x_count,
                                     const int32_t* y, int32_t n, double* out) {
  return api([&] {
    need(m && out, "null pointer");
    check_set(m, x, x_count, y, n);
    nn::TensorView v(const_cast<float*>(x), batch_shape(m->input, n));
    nn::LossAndAccuracy r = m->model.evaluate(v, y);
    out[0] = r.loss;
    out[1] = r.accuracy;
  });
}

DNNLAB_API int dnnlab_model_evaluate_split(dnnlab_model* m, dnnlab_shard* s, int32_t split,
                                           double* out) {
  return api([&] {
    need(m && s && out, "null pointer");
    const data::Split& sp = shard_split(s, split);
    need(sp.size() > 0, std::string(kSplitNames[split]) + " split is empty");
    nn::LossAndAccuracy r = m->model.evaluate(shard_view(m, s, sp), sp.y.data());
    out[0] = r.loss;
    out[1] = r.accuracy;
  });
}

DNNLAB_API dnnlab_shard* dnnlab_shard_open(const uint8_t* bytes, int32_t len) {
  dnnlab_shard* out = nullptr;
  int st = api([&] {
    need(bytes && len >= 0, "null pointer or negative length");
    auto shard = std::make_unique<dnnlab_shard>();
    auto ds = std::make_shared<data::Dataset>(data::decode_shard(
        std::string_view(reinterpret_cast<const char*>(bytes), static_cast<size_t>(len)), "shard"));
    std::string& j = shard->info;
    j = "{\"dataset\":\"" + nn::json::escape(ds->name) +
        "\",\"classes\":" + std::to_string(ds->num_classes) + ",\"sample_shape\":[";
    for (int i = 0; i < ds->sample_shape.rank; ++i) {
      if (i) j += ',';
      j += std::to_string(ds->sample_shape[i]);
    }
    j += "],\"features\":" + std::to_string(ds->sample_shape.numel()) + ",\"normalize\":\"" +
         nn::json::escape(ds->normalize) + "\",\"dataset_sha256\":\"" +
         nn::json::escape(ds->sha256) + "\",\"train\":" + std::to_string(ds->train.size()) +
         ",\"val\":" + std::to_string(ds->val.size()) +
         ",\"test\":" + std::to_string(ds->test.size()) + "}";
    shard->ds = std::move(ds);
    out = shard.release();
  });
  if (st == DNNLAB_OK) g_status = DNNLAB_OK, g_error.clear();
  return out;
}

DNNLAB_API const char* dnnlab_shard_info(dnnlab_shard* s) {
  const char* out = nullptr;
  api([&] {
    need(s, "null shard");
    out = s->info.c_str();
  });
  return out;
}

DNNLAB_API const float* dnnlab_shard_x(dnnlab_shard* s, int32_t split) {
  const float* out = nullptr;
  api([&] {
    need(s, "null shard");
    out = shard_split(s, split).x.data();
  });
  return out;
}

DNNLAB_API const int32_t* dnnlab_shard_y(dnnlab_shard* s, int32_t split) {
  const int32_t* out = nullptr;
  api([&] {
    need(s, "null shard");
    out = shard_split(s, split).y.data();
  });
  return out;
}

DNNLAB_API void dnnlab_shard_free(dnnlab_shard* s) {
  api([&] { delete s; });
}
