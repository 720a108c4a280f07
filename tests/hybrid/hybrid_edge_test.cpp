// The hybrid trainer against a client that sends malformed bytes, and
// against standalone training where bit-identity cannot hold (dropout in
// both parts): within the stated per-epoch tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "data/dataset.hpp"
#include "hybrid/train_in_process.hpp"
#include "nn/train.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::hybrid {
namespace edge_test {

const char* kSmallCnn = R"(name: edge
data: {dataset: synthetic, validation: 64, limit_train: 256}
model:
  input: [1, 28, 28]
  parts:
    features: [{conv2d: 4, padding: 1}, relu, {max_pool2d: 2}]
    classifier: [{dense: 10}]
train: {epochs: 1, batch_size: 32, seed: 2, optimizer: {type: sgd, lr: 0.05}}
)";

// Two honest clients and one that answers its ticket with a frame of the
// wrong format version: quarantined with the offset named, training goes on.
TEST(HybridEdge, MalformedFrameQuarantinesItsSenderOnly) {
  const nn::RunSpec spec = spec::parse_run_spec(kSmallCnn, "edge.yaml");
  data::Dataset data = data::load(data::load_options(spec.data, ""));
  const nn::Shape input = nn::model_input(spec.model, data.sample_shape);
  const nn::LabeledData train{data.train.x.view(), data.train.y.data()};
  InProcessHub hub;
  std::vector<std::unique_ptr<ClientTransport>> links;
  for (int i = 0; i < 3; ++i) links.push_back(hub.connect());
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      run_client(*links[i], spec.model, input, data.num_classes, 2, train.x, ClientOptions{});
    });
  threads.emplace_back([&] {  // client 2: garbage for its first ticket
    while (auto b = links[2]->receive(Clock::now() + std::chrono::seconds(30))) {
      if (decode(*b).kind != FrameKind::kTicket) continue;
      Bytes bad = encode(Frame{FrameKind::kBye, 0, 0, {}, {}});
      bad[4] = 7;  // format version 7
      links[2]->send(bad);
    }
  });
  {
    HybridServer server(spec, input, data.num_classes, hub, HybridOptions{});
    const nn::EpochResult r = server.run_epoch(0, train, nullptr, nullptr);
    server.finish();
    EXPECT_EQ(server.stats().quarantined, std::vector<int>{2});
    EXPECT_EQ(server.stats().reissued, 1);
    ASSERT_FALSE(server.stats().log.empty());
    EXPECT_NE(server.stats().log[0].find("at byte 4"), std::string::npos) << server.stats().log[0];
    EXPECT_GT(r.train_loss, 0);
    EXPECT_EQ(server.version(), 4u);  // 8 batches, 2 clients: 4 rounds
  }
  for (int c = 0; c < 3; ++c) hub.disconnect(c);
  for (auto& t : threads) t.join();
}

ClientOptions nan_activations() {
  ClientOptions o;
  o.tamper = [](Frame& f) {
    if (f.kind == FrameKind::kActivations) f.tensors[0][0] = std::nanf("");
  };
  return o;
}

// Non-finite activations from one client among others: quarantined. From
// every client of a step: the run diverged (NumericError, as standalone).
TEST(HybridEdge, NonFiniteFromOneIsALieFromAllIsDivergence) {
  const nn::RunSpec spec = spec::parse_run_spec(kSmallCnn, "edge.yaml");
  data::Dataset data = data::load(data::load_options(spec.data, ""));
  const nn::Shape input = nn::model_input(spec.model, data.sample_shape);
  const nn::LabeledData train{data.train.x.view(), data.train.y.data()};
  const InProcessRun r = train_in_process(spec, input, data.num_classes, train, nullptr, nullptr, 3,
                                          {}, nullptr, {{}, nan_activations(), {}});
  EXPECT_EQ(r.stats.quarantined, std::vector<int>{1});
  EXPECT_EQ(r.stats.reissued, 1);
  ASSERT_EQ(r.curve.size(), 1u);
  try {
    train_in_process(spec, input, data.num_classes, train, nullptr, nullptr, 2, {}, nullptr,
                     {nan_activations(), nan_activations()});
    FAIL() << "no NumericError";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("diverged"), std::string::npos) << e.what();
  }
}

// A client's compute time is its own report: the server keeps it within
// the turnaround it measured, so a client claiming an hour a frame shows
// as all compute, never as more time than passed.
TEST(HybridEdge, AClaimedComputeTimeIsClampedToTheTurnaround) {
  const nn::RunSpec spec = spec::parse_run_spec(kSmallCnn, "edge.yaml");
  data::Dataset data = data::load(data::load_options(spec.data, ""));
  const nn::Shape input = nn::model_input(spec.model, data.sample_shape);
  const nn::LabeledData train{data.train.x.view(), data.train.y.data()};
  ClientOptions liar;
  liar.tamper = [](Frame& f) { f.compute_us = UINT32_MAX; };
  const InProcessRun r = train_in_process(spec, input, data.num_classes, train, nullptr, nullptr, 2,
                                          {}, nullptr, {{}, liar});
  ASSERT_EQ(r.stats.clients.size(), 2u);
  const ClientStats& honest = r.stats.clients[0];
  const ClientStats& claims = r.stats.clients[1];
  EXPECT_TRUE(r.stats.quarantined.empty());
  EXPECT_GT(honest.forward_compute_seconds, 0);
  EXPECT_GT(honest.backward_compute_seconds, 0);
  EXPECT_LE(honest.forward_compute_seconds, honest.forward_seconds);
  EXPECT_LE(honest.backward_compute_seconds, honest.backward_seconds);
  EXPECT_EQ(claims.forward_compute_seconds, claims.forward_seconds);
  EXPECT_EQ(claims.backward_compute_seconds, claims.backward_seconds);
  EXPECT_LT(claims.forward_seconds, 60);
}

// Dropout in both parts: standalone draws every mask from the whole model's
// one stream; the hybrid draws the features' per ticket and the
// classifier's from the part's own stream, so one client at s = 0 is not
// standalone bit for bit. Stated tolerance per epoch (docs/distributed.md):
// train loss within 0.08, validation accuracy within 0.04 (the largest gaps
// measured over seeds 1-4: 0.027 and 0.025).
TEST(HybridEdge, DropoutInBothPartsIsStandaloneWithinTolerance) {
  const nn::RunSpec spec = spec::parse_run_spec(R"(name: fboth
data: {dataset: fashion-mnist, validation: 1000, limit_train: 4096}
model:
  input: [1, 28, 28]
  parts:
    features: [{conv2d: 8, padding: 1}, batchnorm, relu, {max_pool2d: 2}, {dropout: 0.1}]
    classifier: [{dropout: 0.3}, {dense: 10}]
train: {epochs: 3, batch_size: 32, seed: 4, optimizer: {type: adam, lr: 0.002}}
)",
                                                "fboth.yaml");
  data::Dataset data;
  try {
    data = data::load(data::load_options(spec.data, ""));
  } catch (const DataError& e) {
    GTEST_SKIP() << "no Fashion-MNIST here: " << e.what();
  }
  const nn::Shape input = nn::model_input(spec.model, data.sample_shape);
  const nn::LabeledData train{data.train.x.view(), data.train.y.data()};
  const nn::LabeledData val{data.val.x.view(), data.val.y.data()};
  nn::Model alone = nn::Model::build(spec.model, input, data.num_classes, spec.train.seed);
  nn::Trainer trainer(alone, spec.train);
  const std::vector<nn::EpochResult> want = trainer.fit(train, &val, nullptr);
  const InProcessRun got =
      train_in_process(spec, input, data.num_classes, train, &val, nullptr, 1, HybridOptions{});
  ASSERT_EQ(got.curve.size(), want.size());
  for (size_t e = 0; e < want.size(); ++e) {
    std::printf("epoch %zu: train loss %.4f / %.4f, val acc %.4f / %.4f (standalone / hybrid)\n",
                e + 1, want[e].train_loss, got.curve[e].train_loss, *want[e].val_acc,
                *got.curve[e].val_acc);
    EXPECT_NEAR(got.curve[e].train_loss, want[e].train_loss, 0.08) << "epoch " << e + 1;
    EXPECT_NEAR(*got.curve[e].val_acc, *want[e].val_acc, 0.04) << "epoch " << e + 1;
  }
  EXPECT_LT(got.curve.back().train_loss, 0.7 * got.curve.front().train_loss);
}

}  // namespace edge_test
}  // namespace dnnlab::hybrid
