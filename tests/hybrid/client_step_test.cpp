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
  ClientStep step(s.part(), s.shard.view(), 5);
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
  ClientStep step(s.part(), s.shard.view(), 5);
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

// Dropout in the features part: a ticket's masks come from the run's seed,
// its version and its indices. Two clients given the same ticket answer
// bit for bit alike (so the server's re-check can draw them too); two
// tickets of identical rows get different masks (the batches of a round
// are not dropped alike), and so does the same ticket on another version.
TEST(HybridClientStep, DropoutMasksArePerTicketNotPerClient) {
  StepParts s;
  std::string yaml = kSpec;
  yaml.replace(yaml.find("      - relu\n"), 13, "      - relu\n      - dropout: 0.5\n");
  s.spec = spec::parse_run_spec(yaml, "step.yaml");
  for (int64_t i = 0; i < 784; ++i) s.shard.data()[784 + i] = s.shard.data()[i];  // row 1 = row 0
  auto answer = [&](ClientStep& step, uint64_t version, uint32_t index) {
    step.on_frame(s.weights(version));
    std::optional<Frame> a = step.on_frame({FrameKind::kTicket, version, 1, {index}, {}});
    EXPECT_TRUE(a);
    return std::vector<float>(a->tensors[0].data(), a->tensors[0].data() + a->tensors[0].numel());
  };
  ClientStep one(s.part(), s.shard.view(), 5), two(s.part(), s.shard.view(), 5);
  const std::vector<float> a = answer(one, 1, 0);
  answer(two, 1, 1);  // another ticket first: the second client's own stream moved on
  EXPECT_EQ(answer(two, 1, 0), a);
  EXPECT_NE(answer(one, 1, 1), a) << "the same rows under another ticket: other masks";
  EXPECT_NE(answer(one, 2, 0), a) << "another version: other masks";
  ClientStep other_run(s.part(), s.shard.view(), 6);
  EXPECT_NE(answer(other_run, 1, 0), a) << "another run seed: other masks";
  int zeros = 0;
  for (float v : a) zeros += v == 0;
  EXPECT_GT(zeros, static_cast<int>(a.size()) / 3) << "dropout 0.5 after relu drops values";
  const uint32_t idx[] = {3, 4};
  EXPECT_EQ(ticket_dropout_seed(5, 1, idx), ticket_dropout_seed(5, 1, idx));
  const uint32_t swapped[] = {4, 3};
  EXPECT_NE(ticket_dropout_seed(5, 1, idx), ticket_dropout_seed(5, 1, swapped));
}

// An int8 ticket is answered in int8; with the feedback flag the client
// adds what quantising its previous activations lost (the same rows twice:
// the second answer is h + (h - q(h))); without it, nothing is carried.
TEST(HybridClientStep, Int8TicketsAnswerInKindAndCarryTheErrorWhenAsked) {
  StepParts s;
  for (bool feedback : {false, true}) {
    ClientStep step(s.part(), s.shard.view(), 5);
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
