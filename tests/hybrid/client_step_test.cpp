// hybrid::ClientStep, the client's side of a step without a transport (what
// the browser core runs): weights, a ticket, activation gradients and bye,
// one frame at a time; and what it refuses.
#include "hybrid/client_step.hpp"

#include <gtest/gtest.h>

#include "nn/model.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::hybrid {
namespace client_step_test {

const char* kSpec = R"(name: step
data: {dataset: synthetic}
model:
  input: [1, 28, 28]
  parts:
    features:
      - {conv2d: 2, kernel: 3, padding: 1}
      - batchnorm
      - relu
    classifier:
      - dense: 10
train: {batch_size: 2, seed: 5}
)";

struct StepParts {
  nn::RunSpec spec = spec::parse_run_spec(kSpec, "step.yaml");
  nn::Shape input{1, 28, 28};
  nn::Tensor shard{nn::Shape{3, 1, 28, 28}};
  StepParts() {
    for (int64_t i = 0; i < shard.numel(); ++i) shard.data()[i] = 0.1f * static_cast<float>(i % 7);
  }
  nn::Model part() { return nn::Model::build_part(spec.model, "features", input, 10, 5); }
  // The weights frame a server would send for version `v`: the part's own.
  Frame weights(uint64_t v) {
    nn::Model f = part();
    Frame w{FrameKind::kWeights, v, 0, {}, {}};
    for (nn::Param* p : f.params()) w.tensors.push_back(p->value);
    for (nn::Param* p : f.state()) w.tensors.push_back(p->value);
    return w;
  }
};

TEST(HybridClientStep, AnswersTicketsAndGradientsFrameByFrame) {
  StepParts s;
  ClientStep step(s.part(), s.shard.view());
  EXPECT_EQ(step.version(), ClientStep::kNoVersion);
  EXPECT_FALSE(step.on_frame(s.weights(4)));
  EXPECT_EQ(step.version(), 4u);
  const std::optional<Frame> act = step.on_frame({FrameKind::kTicket, 4, 9, {2, 0}, {}});
  ASSERT_TRUE(act);
  EXPECT_EQ(act->kind, FrameKind::kActivations);
  EXPECT_EQ(act->ticket, 9u);
  EXPECT_EQ(act->tensors.at(0).shape(), (nn::Shape{2, 2, 28, 28}));
  EXPECT_EQ(step.tickets(), 1);
  // Gradients for a ticket the server gave up on: nothing to send.
  Frame other{FrameKind::kActivationGrads, 4, 8, {}, {}};
  other.tensors.emplace_back(nn::Shape{2, 2, 28, 28});
  EXPECT_FALSE(step.on_frame(other));
  Frame g{FrameKind::kActivationGrads, 4, 9, {}, {}};
  g.tensors.emplace_back(nn::Shape{2, 2, 28, 28});
  for (int64_t i = 0; i < g.tensors[0].numel(); ++i) g.tensors[0].data()[i] = 0.01f;
  const std::optional<Frame> wg = step.on_frame(g);
  ASSERT_TRUE(wg);
  EXPECT_EQ(wg->kind, FrameKind::kWeightGrads);
  EXPECT_EQ(wg->version, 4u);
  EXPECT_EQ(wg->tensors.size(), s.weights(0).tensors.size());  // params, then state
  EXPECT_FALSE(step.done());
  EXPECT_FALSE(step.on_frame({FrameKind::kBye, 0, 0, {}, {}}));
  EXPECT_TRUE(step.done());
}

TEST(HybridClientStep, RefusesWhatNoServerSends) {
  StepParts s;
  ClientStep step(s.part(), s.shard.view());
  EXPECT_THROW(step.on_frame({FrameKind::kTicket, 0, 1, {0}, {}}), std::runtime_error)
      << "a ticket before any weights";
  step.on_frame(s.weights(1));
  EXPECT_THROW(step.on_frame({FrameKind::kTicket, 2, 1, {0}, {}}), std::runtime_error)
      << "a ticket for another version";
  try {
    step.on_frame({FrameKind::kTicket, 1, 1, {3}, {}});
    ADD_FAILURE() << "an index outside the shard";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "ticket index 3 outside the shard of 3");
  }
  Frame act{FrameKind::kActivations, 1, 1, {}, {}};
  act.tensors.emplace_back(nn::Shape{1});
  EXPECT_THROW(step.on_frame(act), std::runtime_error);
  Frame w = s.weights(1);
  w.tensors.pop_back();
  EXPECT_THROW(step.on_frame(w), std::runtime_error);
}

// An int8 ticket is answered in int8; with the feedback flag the client
// adds what quantising its previous activations lost (the same rows twice:
// the second answer is h + (h - q(h))); without it, nothing is carried.
TEST(HybridClientStep, Int8TicketsAnswerInKindAndCarryTheErrorWhenAsked) {
  StepParts s;
  for (bool feedback : {false, true}) {
    ClientStep step(s.part(), s.shard.view());
    step.on_frame(s.weights(1));
    Frame t{FrameKind::kTicket, 1, 5, {2, 1}, {}, Dtype::kInt8};
    t.feedback = feedback;
    const std::optional<Frame> a = step.on_frame(t);
    t.ticket = 6;
    const std::optional<Frame> b = step.on_frame(t);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->dtype, Dtype::kInt8);
    EXPECT_FALSE(a->feedback);  // a flag of tickets only
    const nn::Tensor& h = a->tensors[0];
    nn::Tensor read = h;
    ASSERT_TRUE(wire_round({read.data(), static_cast<size_t>(read.numel())}, Dtype::kInt8));
    int64_t moved = 0;
    for (int64_t i = 0; i < h.numel(); ++i) {
      const float want = feedback ? h.data()[i] + (h.data()[i] - read.data()[i]) : h.data()[i];
      ASSERT_EQ(b->tensors[0].data()[i], want) << i;
      moved += b->tensors[0].data()[i] != h.data()[i];
    }
    EXPECT_EQ(moved > 0, feedback);
  }
}

TEST(HybridClientStep, FingerprintCoversShapeAndValues) {
  nn::Tensor a{nn::Shape{2, 3}}, b{nn::Shape{3, 2}};
  EXPECT_EQ(data_fingerprint(a.view()).size(), 16u);
  EXPECT_NE(data_fingerprint(a.view()), data_fingerprint(b.view()));
  const std::string before = data_fingerprint(a.view());
  a.data()[5] = 1;
  EXPECT_NE(data_fingerprint(a.view()), before);
}

}  // namespace client_step_test
}  // namespace dnnlab::hybrid
