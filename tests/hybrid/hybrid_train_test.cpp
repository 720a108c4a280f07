// The hybrid trainer end to end in one process: one client at s = 0 is
// standalone training bit for bit; liars are quarantined and training goes
// on; stragglers and leavers cost a reissue; staleness is bounded.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "data/dataset.hpp"
#include "experiment/replication.hpp"
#include "hybrid/train_in_process.hpp"
#include "nn/train.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::hybrid {
namespace train_test {

// A small CNN on the generated `synthetic` set (784 values a sample, seen as
// 1x28x28); dropout only in the classifier, so the one-client run can match
// standalone training bit for bit (see docs/distributed.md).
std::string cnn_spec(int epochs, int batch, int limit_train) {
  return R"(name: tiny-cnn
data: {dataset: synthetic, validation: 128, limit_train: )" +
         std::to_string(limit_train) + R"(}
model:
  input: [1, 28, 28]
  parts:
    features:
      - {conv2d: 4, kernel: 3, padding: 1}
      - batchnorm
      - relu
      - max_pool2d: 2
      - {conv2d: 8, kernel: 3, padding: 1}
      - relu
      - max_pool2d: 2
    classifier:
      - dropout: 0.2
      - {dense: 16, activation: relu}
      - dense: 10
train:
  epochs: )" +
         std::to_string(epochs) +
         R"(
  batch_size: )" +
         std::to_string(batch) +
         R"(
  seed: 11
  optimizer: {type: adam, lr: 0.01}
  schedule: {type: cosine, min_lr: 0.0005}
)";
}

struct Fixture {
  nn::RunSpec spec;
  data::Dataset data;
  nn::Shape input;
  nn::LabeledData train, val;
  explicit Fixture(const std::string& yaml) {
    spec = spec::parse_run_spec(yaml, "tiny-cnn.yaml");
    data = data::load(data::load_options(spec.data, ""));
    input = nn::model_input(spec.model, data.sample_shape);
    train = {data.train.x.view(), data.train.y.data()};
    val = {data.val.x.view(), data.val.y.data()};
  }
  InProcessRun run(int clients, const HybridOptions& o, nn::Model* model = nullptr,
                   const std::vector<ClientOptions>& copts = {}) {
    return train_in_process(spec, input, data.num_classes, train, &val, nullptr, clients, o, model,
                            copts);
  }
};

bool same_bits(nn::Model& a, nn::Model& b) {
  auto pa = a.saved_tensors(), pb = b.saved_tensors();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i) {
    if (pa[i]->name != pb[i]->name || !(pa[i]->value.shape() == pb[i]->value.shape())) return false;
    if (std::memcmp(pa[i]->value.data(), pb[i]->value.data(),
                    sizeof(float) * pa[i]->value.numel()) != 0)
      return false;
  }
  return true;
}

// Trains fx.spec standalone into `alone` and with one in-process client at
// s = 0 into `*got`: the same curve and the same weights, bit for bit.
void expect_one_client_is_standalone(Fixture& fx, nn::Model& alone, InProcessRun* got) {
  nn::Trainer trainer(alone, fx.spec.train);
  const std::vector<nn::EpochResult> want = trainer.fit(fx.train, &fx.val, nullptr);

  nn::Model hybrid = nn::Model::build(fx.spec.model, fx.input, fx.data.num_classes, 1);
  *got = fx.run(1, HybridOptions{}, &hybrid);
  ASSERT_EQ(got->curve.size(), want.size());
  for (size_t e = 0; e < want.size(); ++e) {
    EXPECT_EQ(got->curve[e].train_loss, want[e].train_loss) << "epoch " << e + 1;
    EXPECT_EQ(got->curve[e].train_acc, want[e].train_acc) << "epoch " << e + 1;
    EXPECT_EQ(got->curve[e].val_loss, want[e].val_loss) << "epoch " << e + 1;
    EXPECT_EQ(got->curve[e].lr, want[e].lr);
  }
  EXPECT_TRUE(same_bits(hybrid, alone)) << "the weights differ";
}

TEST(HybridTrain, OneClientSynchronousIsStandaloneBitForBit) {
  Fixture fx(cnn_spec(2, 32, 400));  // 400 / 32: a short last batch too
  nn::Model alone =
      nn::Model::build(fx.spec.model, fx.input, fx.data.num_classes, fx.spec.train.seed);
  InProcessRun got;
  ASSERT_NO_FATAL_FAILURE(expect_one_client_is_standalone(fx, alone, &got));
  EXPECT_EQ(got.version, 2u * 13u);  // one features step per batch
  EXPECT_EQ(got.stats.reissued, 0);
  EXPECT_EQ(got.stats.grads_stale, 0);
  EXPECT_TRUE(got.stats.quarantined.empty());
}

TEST(HybridTrain, SpecWithoutPartsOrBadCountsIsRefused) {
  Fixture fx(cnn_spec(1, 32, 64));
  nn::RunSpec flat = fx.spec;
  flat.model.parts.clear();
  try {
    check_hybrid_spec(flat.model);
    FAIL() << "accepted a model without parts";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "model.parts");
    EXPECT_NE(std::string(e.what()).find("features"), std::string::npos) << e.what();
  }
  nn::RunSpec swapped = fx.spec;
  std::swap(swapped.model.parts[0].name, swapped.model.parts[1].name);
  EXPECT_THROW(check_hybrid_spec(swapped.model), SpecError);
  EXPECT_THROW(fx.run(0, {}), std::invalid_argument);
  EXPECT_THROW(fx.run(kMaxClients + 1, {}), std::invalid_argument);
  HybridOptions too_stale;
  too_stale.staleness = kMaxStaleness + 1;
  EXPECT_THROW(fx.run(1, too_stale), std::invalid_argument);
}

// Pure data-parallel through the same machinery: every layer in `features`
// (the tiny CNN without its dropout, so that one client is standalone bit
// for bit) and `classifier: []`, so the server computes only the loss.
std::string data_parallel_spec(int epochs, int batch, int limit_train) {
  std::string s = cnn_spec(epochs, batch, limit_train);
  const std::string cls =
      "    classifier:\n      - dropout: 0.2\n      - {dense: 16, activation: relu}\n"
      "      - dense: 10\n";
  const size_t at = s.find(cls);
  if (at == std::string::npos) return "cnn_spec changed: data_parallel_spec cannot cut it";
  return s.replace(at, cls.size(),
                   "      - {dense: 16, activation: relu}\n      - dense: 10\n"
                   "    classifier: []\n");
}

// One client at s = 0 with an empty classifier is standalone training of the
// whole model bit for bit (the same rule as the test above); what travels
// is data-parallel's bytes: the whole model's weights down when stale, its
// gradients up, plus a batch of logits each way.
TEST(HybridTrain, AnEmptyClassifierIsDataParallelAndOneClientIsStandaloneBitForBit) {
  Fixture fx(data_parallel_spec(2, 32, 400));
  ASSERT_EQ(fx.spec.model.parts.at(1).begin, fx.spec.model.parts.at(1).end);
  nn::Model alone =
      nn::Model::build(fx.spec.model, fx.input, fx.data.num_classes, fx.spec.train.seed);
  InProcessRun got;
  ASSERT_NO_FATAL_FAILURE(expect_one_client_is_standalone(fx, alone, &got));
  EXPECT_EQ(got.version, 2u * 13u);
  EXPECT_EQ(got.stats.reissued, 0);
  EXPECT_TRUE(got.stats.quarantined.empty());

  int64_t whole_bytes = 0;
  for (nn::Param* p : alone.saved_tensors()) whole_bytes += 4 * p->value.numel();
  const int64_t logits_bytes = 32 * 10 * 4, frame_headers = 1024;
  const double up = static_cast<double>(got.stats.bytes_from_clients) / got.stats.tickets;
  const double down = static_cast<double>(got.stats.bytes_to_clients) / got.stats.tickets;
  EXPECT_GT(up, whole_bytes);
  EXPECT_LT(up, whole_bytes + logits_bytes + frame_headers);
  EXPECT_GT(down, whole_bytes);  // s = 0, one client: fresh weights with every ticket
  EXPECT_LT(down, whole_bytes + logits_bytes + frame_headers);

  // Two clients: the server averages their gradients, and the model learns.
  Fixture fx2(data_parallel_spec(3, 16, 512));
  const InProcessRun two = fx2.run(2, {});
  EXPECT_TRUE(two.stats.quarantined.empty());
  EXPECT_EQ(two.stats.grads_applied, two.stats.tickets);
  ASSERT_EQ(two.curve.size(), 3u);
  EXPECT_LT(two.curve.back().train_loss, 0.7 * two.curve.front().train_loss);

  // The clients' part may not be the empty one.
  nn::RunSpec nothing_on_clients = fx.spec;
  nothing_on_clients.model.parts = {{"features", 0, 0},
                                    {"classifier", 0, fx.spec.model.layers.size()}};
  try {
    check_hybrid_spec(nothing_on_clients.model);
    FAIL() << "accepted an empty features part";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "model.parts.features");
  }
}

// A client that lies in one way from its first weight gradients on.
ClientOptions liar(const char* how) {
  ClientOptions o;
  const std::string kind = how;
  o.tamper = [kind, rng = std::make_shared<uint64_t>(12345)](Frame& f) {
    if (f.kind != FrameKind::kWeightGrads) return;
    if (kind == "stale") {
      f.version = f.version >= 5 ? f.version - 5 : f.version + 1000;
      return;
    }
    for (nn::Tensor& t : f.tensors)
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (kind == "x100") {
          t[i] *= 100;
        } else {  // random: N(0, 1), Box-Muller over a small LCG
          auto uniform = [&] {
            *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
            return (static_cast<double>(*rng >> 11) + 0.5) * 0x1.0p-53;
          };
          const double u1 = uniform(), u2 = uniform();
          t[i] = static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307 * u2));
        }
      }
  };
  return o;
}

TEST(HybridTrain, LiarsAreQuarantinedAndTrainingConverges) {
  Fixture fx(cnn_spec(3, 16, 768));
  const InProcessRun honest = fx.run(3, {});
  // The screens alone (shape, finiteness, norms, versions): re-checks off.
  HybridOptions screens_only;
  screens_only.recheck_first = 0;
  screens_only.recheck_rate = 0;
  const InProcessRun attacked =
      fx.run(6, screens_only, nullptr, {{}, {}, {}, liar("x100"), liar("random"), liar("stale")});
  EXPECT_TRUE(honest.stats.quarantined.empty());
  std::vector<int> q = attacked.stats.quarantined;
  std::sort(q.begin(), q.end());
  EXPECT_EQ(q, (std::vector<int>{3, 4, 5}));
  for (const auto& line : attacked.stats.log) std::printf("  %s\n", line.c_str());
  ASSERT_EQ(attacked.curve.size(), 3u);
  const double first = honest.curve.front().train_loss, last = honest.curve.back().train_loss;
  const double last_attacked = attacked.curve.back().train_loss;
  std::printf("train loss: honest %.4f -> %.4f, attacked %.4f -> %.4f\n", first, last,
              attacked.curve.front().train_loss, last_attacked);
  EXPECT_LT(last, 0.7 * first);
  // The stated margin (docs/distributed.md): within 15% + 0.05 of the honest run.
  EXPECT_LT(last_attacked, 1.15 * last + 0.05);
  EXPECT_GT(*attacked.curve.back().val_acc, *honest.curve.back().val_acc - 0.1);
}

// Zero weight gradients on the listed tickets of this client (1-based).
ClientOptions zero_grads(std::vector<int> tickets) {
  ClientOptions o;
  o.tamper = [tickets, n = std::make_shared<int>(0)](Frame& f) {
    if (f.kind != FrameKind::kWeightGrads) return;
    ++*n;
    if (!tickets.empty() && std::find(tickets.begin(), tickets.end(), *n) == tickets.end()) return;
    for (nn::Tensor& t : f.tensors)
      for (int64_t i = 0; i < t.numel(); ++i) t[i] = 0;
  };
  return o;
}

// A weight gradient far below the step's median is dropped, not punished: an
// honest client's easy batch can land there. Three in a row (a client that
// sends zeros instead of working) quarantine it.
TEST(HybridTrain, ASmallGradientIsDroppedAndOnlyThreeInARowQuarantine) {
  Fixture fx(cnn_spec(1, 16, 512));
  HybridOptions screens_only;
  screens_only.recheck_first = 0;
  screens_only.recheck_rate = 0;
  const InProcessRun r =
      fx.run(4, screens_only, nullptr, {{}, {}, zero_grads({}), zero_grads({2, 4})});
  for (const auto& line : r.stats.log) std::printf("  %s\n", line.c_str());
  EXPECT_EQ(r.stats.quarantined, (std::vector<int>{2}));
  int not_applied = 0, quarantine_lines = 0;
  for (const auto& line : r.stats.log) {
    if (line.find("not applied (1 in a row") != std::string::npos) ++not_applied;
    if (line.find("3 times in a row") != std::string::npos) ++quarantine_lines;
  }
  // Client 2's first and client 3's two (not consecutive) zero gradients,
  // plus client 2's second ("2 in a row"), then its third quarantines it.
  EXPECT_EQ(not_applied, 3);
  EXPECT_GE(quarantine_lines, 1);
  EXPECT_GE(r.stats.grads_dropped, 5);
  ASSERT_EQ(r.curve.size(), 1u);
  EXPECT_TRUE(std::isfinite(r.curve.back().train_loss));
}

TEST(HybridTrain, ALeaverCostsOneReissue) {
  Fixture fx(cnn_spec(1, 32, 256));
  ClientOptions leaver;
  leaver.leave_at_ticket = 3;
  const InProcessRun r = fx.run(2, {}, nullptr, {{}, leaver});
  EXPECT_EQ(r.stats.reissued, 1);
  EXPECT_TRUE(r.stats.quarantined.empty());
  ASSERT_EQ(r.curve.size(), 1u);
  // 8 batches: rounds of 2 batches, 2 and then 1 (client 1 leaves holding
  // its third ticket), then client 0 alone on the reissued batch and the 2 left.
  EXPECT_EQ(r.version, 6u);
  EXPECT_EQ(r.clients[1].tickets, 2);
}

// A client that sleeps `ms` before sending each of its activations.
ClientOptions paced(int ms) {
  ClientOptions o;
  o.tamper = [ms](Frame& f) {
    if (f.kind == FrameKind::kActivations)
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  };
  return o;
}

// A client that sleeps `ms` before sending its `nth` (1-based) activations only.
ClientOptions stalls_once(int nth, int ms) {
  ClientOptions o;
  o.tamper = [nth, ms, n = std::make_shared<int>(0)](Frame& f) {
    if (f.kind == FrameKind::kActivations && ++*n == nth)
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  };
  return o;
}

TEST(HybridTrain, AStragglerIsReissuedAndItsLateResultDropped) {
  Fixture fx(cnn_spec(2, 32, 256));
  // Client 0 takes 20 ms a ticket, so the run outlasts client 1's one
  // 300 ms stall (its second ticket) against a 100 ms deadline.
  ClientOptions steady = paced(20), slow = stalls_once(2, 300);
  HybridOptions o;
  o.deadline = std::chrono::milliseconds(100);
  const InProcessRun r = fx.run(2, o, nullptr, {steady, slow});
  for (const auto& line : r.stats.log) std::printf("  %s\n", line.c_str());
  EXPECT_EQ(r.stats.reissued, 1);
  EXPECT_EQ(r.stats.late, 1);
  EXPECT_TRUE(r.stats.quarantined.empty());
  EXPECT_GT(r.clients[1].tickets, 2) << "the straggler got work again after answering";
  ASSERT_EQ(r.curve.size(), 2u);
}

// Tickets past their deadline cost the client as abandoned trial tickets
// cost a browser (experiment::AbandonRule): 3 in a row, and it gets no
// ticket for the cooldown; an answered ticket between them clears the count.
// The staller sleeps 600 ms before sending the activations named in
// `stalls` (1-based) against a 400 ms deadline: late by 200 ms, and, as a
// straggler's must, within the next deadline (a lone client owing an
// answer for longer is dropped as silent). A second client, unless
// `alone`, takes 40 ms a ticket, so the run outlasts the 2 s cooldown.
// Returns the run and the seconds between each of the staller's
// activations and its next.
std::pair<InProcessRun, std::vector<double>> stalling_run(Fixture& fx,
                                                          const std::vector<int>& stalls,
                                                          bool alone = false) {
  ClientOptions steady = paced(40), stalling;
  auto sent = std::make_shared<std::vector<std::chrono::steady_clock::time_point>>();
  stalling.tamper = [stalls, sent](Frame& f) {
    if (f.kind != FrameKind::kActivations) return;
    const int n = static_cast<int>(sent->size()) + 1;
    if (std::find(stalls.begin(), stalls.end(), n) != stalls.end())
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
    sent->push_back(std::chrono::steady_clock::now());
  };
  HybridOptions o;
  o.deadline = std::chrono::milliseconds(400);
  o.abandon_cooldown = std::chrono::milliseconds(2000);
  InProcessRun r =
      alone ? fx.run(1, o, nullptr, {stalling}) : fx.run(2, o, nullptr, {steady, stalling});
  for (const auto& line : r.stats.log) std::printf("  %s\n", line.c_str());
  std::vector<double> gaps;
  for (size_t i = 1; i < sent->size(); ++i)
    gaps.push_back(std::chrono::duration<double>((*sent)[i] - (*sent)[i - 1]).count());
  std::printf("the staller's first gaps:");
  for (size_t i = 0; i < gaps.size() && i < 7; ++i) std::printf(" %.3f", gaps[i]);
  std::printf(" s\n");
  return {std::move(r), gaps};
}

int lines_with(const InProcessRun& r, const std::string& text) {
  return static_cast<int>(std::count_if(r.stats.log.begin(), r.stats.log.end(), [&](const auto& l) {
    return l.find(text) != std::string::npos;
  }));
}

TEST(HybridTrain, TicketsPastTheirDeadlineInARowCostACooldown) {
  // Stalls on the 1st and 2nd, the 3rd answered in time (the count
  // cleared), then the 4th, 5th and 6th: one cooldown, after the 6th. Were
  // the count not cleared, it would follow the 4th.
  Fixture fx(cnn_spec(3, 16, 512));  // 96 tickets
  const auto [r, gaps] = stalling_run(fx, {1, 2, 4, 5, 6});
  EXPECT_EQ(r.stats.clients[1].abandoned, 5);
  EXPECT_EQ(r.stats.clients[0].abandoned, 0);
  EXPECT_EQ(r.stats.reissued, 5);
  EXPECT_TRUE(r.stats.quarantined.empty());
  EXPECT_EQ(lines_with(r, "in a row"), 1);
  EXPECT_EQ(lines_with(r, "client 1: 3 tickets past their deadline in a row: no ticket for 2.0"),
            1);
  // gaps[i]: from the (i+1)-th activations to the next. After the 6th (a
  // late answer, 200 ms after its ticket expired) the 7th comes a cooldown
  // later: at least 2 - 0.6 s; after the others, a stall and a round.
  ASSERT_GE(gaps.size(), 6u) << "the run ended before the cooldown did";
  for (int i : {0, 1, 2, 3, 4}) EXPECT_LT(gaps[i], 1.2) << "a cooldown after activations " << i + 1;
  EXPECT_GE(gaps[5], 1.2) << "no cooldown after the 3rd stall in a row";
  ASSERT_EQ(r.curve.size(), 3u);

  // A lone client cooling: the server waits its cooldown out instead of
  // taking it for silent, and the run ends as usual. (It also gets the
  // weights again after each ticket given up: its BatchNorm statistics ran
  // a forward that did not count, and its next re-check would find them off.)
  Fixture small(cnn_spec(1, 16, 128));  // 8 tickets
  const auto [lone, lone_gaps] = stalling_run(small, {1, 2, 3}, /*alone=*/true);
  EXPECT_EQ(lone.stats.clients[0].abandoned, 3);
  EXPECT_TRUE(lone.stats.quarantined.empty());
  EXPECT_EQ(lone.stats.recheck_failures, 0);
  ASSERT_GE(lone_gaps.size(), 3u);
  EXPECT_GE(lone_gaps[2], 1.2);
  ASSERT_EQ(lone.curve.size(), 1u);
}

TEST(HybridTrain, BadAbandonOptionsAreRefusedByName) {
  Fixture fx(cnn_spec(1, 16, 64));
  InProcessHub hub;
  HybridOptions o;
  o.max_abandons = 0;
  EXPECT_THROW(
      {
        try {
          HybridServer(fx.spec, fx.input, fx.data.num_classes, hub, o);
        } catch (const std::invalid_argument& e) {
          EXPECT_STREQ(e.what(), "max_abandons 0 is below 1");
          throw;
        }
      },
      std::invalid_argument);
  o.max_abandons = 3;
  o.abandon_cooldown = std::chrono::milliseconds(-1);
  EXPECT_THROW(HybridServer(fx.spec, fx.input, fx.data.num_classes, hub, o), std::invalid_argument);
}

TEST(HybridTrain, BoundedStalenessPipelinesAndStillLearns) {
  Fixture fx(cnn_spec(3, 16, 512));
  HybridOptions o;
  o.staleness = 1;
  const InProcessRun r = fx.run(2, o);
  EXPECT_GT(r.stats.grads_stale, 0);
  EXPECT_EQ(r.stats.grads_dropped, 0);
  EXPECT_TRUE(r.stats.quarantined.empty());
  ASSERT_EQ(r.curve.size(), 3u);
  EXPECT_LT(r.curve.back().train_loss, 0.7 * r.curve.front().train_loss);
}

// fp16 on the wire: the activations and their gradients travel in half the
// bytes; the weights and weight gradients do not change size. Training
// follows the float32 run closely (half precision keeps 11 bits).
TEST(HybridTrain, HalfPrecisionWireHalvesTheBatchBytesAndFollowsFloat32) {
  Fixture fx(cnn_spec(3, 16, 512));
  const InProcessRun full = fx.run(2, {});
  HybridOptions o;
  o.wire = Dtype::kFloat16;
  const InProcessRun half = fx.run(2, o);
  ASSERT_EQ(half.curve.size(), full.curve.size());
  EXPECT_EQ(half.stats.tickets, full.stats.tickets);
  EXPECT_TRUE(half.stats.quarantined.empty());
  // Per ticket the activations and their gradients are the bulk: the
  // bytes each way fall, but not below half (the weights stay float32).
  EXPECT_LT(half.stats.bytes_from_clients, 0.8 * full.stats.bytes_from_clients);
  EXPECT_GT(half.stats.bytes_from_clients, 0.45 * full.stats.bytes_from_clients);
  EXPECT_LT(half.stats.bytes_to_clients, full.stats.bytes_to_clients);
  for (size_t e = 0; e < full.curve.size(); ++e) {
    EXPECT_NE(half.curve[e].train_loss, full.curve[e].train_loss) << "fp16 changed nothing?";
    EXPECT_NEAR(half.curve[e].train_loss, full.curve[e].train_loss, 0.05 * full.curve[e].train_loss)
        << "epoch " << e + 1;
    ASSERT_TRUE(half.curve[e].val_acc && full.curve[e].val_acc);
    EXPECT_NEAR(*half.curve[e].val_acc, *full.curve[e].val_acc, 0.05) << "epoch " << e + 1;
  }
  EXPECT_LT(half.curve.back().train_loss, 0.7 * half.curve.front().train_loss);
}

// int8 on the wire (docs/distributed.md "Bytes"): each batch tensor in a
// quarter of float32's bytes plus a scale per 128 values, exactly; training
// follows the float32 run, with or without error feedback.
TEST(HybridTrain, Int8WireQuartersTheBatchBytesAndFollowsFloat32) {
  Fixture fx(cnn_spec(3, 16, 512));  // 32 full batches an epoch
  const InProcessRun full = fx.run(2, {});
  const int64_t n = 16 * 8 * 7 * 7;  // one ticket's activations
  const int64_t saved = 4 * n - value_bytes(Dtype::kInt8, n);
  struct Case {
    const char* name;
    bool acts, grads;
  };
  std::vector<InProcessRun> runs;
  for (const Case& c : {Case{"off", false, false}, Case{"grads", false, true},
                        Case{"acts", true, false}, Case{"both", true, true}}) {
    HybridOptions o;
    o.wire = Dtype::kInt8;
    o.feedback_acts = c.acts;
    o.feedback_grads = c.grads;
    const InProcessRun q = fx.run(2, o);
    ASSERT_EQ(q.curve.size(), full.curve.size());
    EXPECT_EQ(q.stats.tickets, full.stats.tickets);
    EXPECT_TRUE(q.stats.quarantined.empty());
    EXPECT_EQ(q.stats.recheck_failures, 0) << c.name;
    // Every activations frame and every activation gradients frame shrank
    // by exactly float32's bytes less int8's; the rest is unchanged.
    EXPECT_EQ(full.stats.bytes_from_clients - q.stats.bytes_from_clients, q.stats.tickets * saved);
    EXPECT_EQ(full.stats.bytes_to_clients - q.stats.bytes_to_clients, q.stats.tickets * saved);
    for (size_t e = 0; e < full.curve.size(); ++e) {
      std::printf("int8 %-5s epoch %zu: train loss %.4f (fp32 %.4f), val acc %.4f (fp32 %.4f)\n",
                  c.name, e + 1, q.curve[e].train_loss, full.curve[e].train_loss,
                  *q.curve[e].val_acc, *full.curve[e].val_acc);
      EXPECT_NE(q.curve[e].train_loss, full.curve[e].train_loss) << "int8 changed nothing?";
      EXPECT_NEAR(q.curve[e].train_loss, full.curve[e].train_loss, 0.03 * full.curve[e].train_loss)
          << c.name << ", epoch " << e + 1;
      ASSERT_TRUE(q.curve[e].val_acc && full.curve[e].val_acc);
      EXPECT_NEAR(*q.curve[e].val_acc, *full.curve[e].val_acc, 0.04)
          << c.name << ", epoch " << e + 1;
    }
    EXPECT_LT(q.curve.back().train_loss, 0.7 * q.curve.front().train_loss);
    runs.push_back(q);
  }
  // Error feedback changes what travels.
  for (size_t i = 1; i < runs.size(); ++i)
    EXPECT_NE(runs[i].curve.back().train_loss, runs[0].curve.back().train_loss) << i;
}

// Native re-checks: the server re-runs a ticket's features part and
// compares. Honest clients pass every one (and training is unchanged by
// them); a liar the norm screens cannot see is caught on a re-check.
HybridOptions every_ticket_rechecked() {
  HybridOptions o;
  o.recheck_first = 1000000;
  return o;
}

HybridOptions no_rechecks() {
  HybridOptions o;
  o.recheck_first = 0;
  o.recheck_rate = 0;
  return o;
}

TEST(HybridRecheck, HonestClientsPassEveryRecheckAndTrainingIsUnchanged) {
  Fixture fx(cnn_spec(2, 16, 256));
  nn::Model a = nn::Model::build(fx.spec.model, fx.input, fx.data.num_classes, 1);
  nn::Model b = nn::Model::build(fx.spec.model, fx.input, fx.data.num_classes, 1);
  const InProcessRun checked = fx.run(2, every_ticket_rechecked(), &a);
  const InProcessRun unchecked = fx.run(2, no_rechecks(), &b);
  EXPECT_EQ(checked.stats.rechecks, checked.stats.tickets);
  EXPECT_EQ(checked.stats.recheck_failures, 0);
  EXPECT_TRUE(checked.stats.quarantined.empty());
  EXPECT_EQ(unchecked.stats.rechecks, 0);
  EXPECT_TRUE(same_bits(a, b)) << "a re-check changed the training";
  // In float16 the client's inputs and outputs are rounded: within tolerance.
  HybridOptions half = every_ticket_rechecked();
  half.wire = Dtype::kFloat16;
  const InProcessRun h = fx.run(2, half);
  EXPECT_EQ(h.stats.rechecks, h.stats.tickets);
  EXPECT_EQ(h.stats.recheck_failures, 0);
}

// Lies small enough for the norm screens (within 5x of the step's median):
// weight gradients x1.3, and activations with 1% noise.
ClientOptions subtle_liar(const char* how) {
  ClientOptions o;
  const std::string kind = how;
  o.tamper = [kind, n = std::make_shared<uint64_t>(1)](Frame& f) {
    if (kind == "grads" && f.kind == FrameKind::kWeightGrads) {
      for (int64_t i = 0; i < f.tensors[0].numel(); ++i) f.tensors[0][i] *= 1.3f;
    } else if (kind == "acts" && f.kind == FrameKind::kActivations) {
      for (int64_t i = 0; i < f.tensors[0].numel(); ++i) {
        *n = *n * 6364136223846793005ull + 1442695040888963407ull;
        f.tensors[0][i] *= 1.0f + 0.01f * (static_cast<float>(*n >> 40) / (1 << 24) - 0.5f) * 2;
      }
    }
  };
  return o;
}

// Gradients are compared within recheck_grad_tolerance (0.1, docs: another
// build's honest float order measured up to 3.1e-2): a client whose weight
// gradients are 1% off passes and shows that as its worst error; 30% off is
// caught on its first ticket. Honest clients of this build: 0.
TEST(HybridRecheck, GradientsAreJudgedWithinTheStatedTolerance) {
  Fixture fx(cnn_spec(1, 16, 256));
  auto scaled = [](float by) {
    ClientOptions o;
    o.tamper = [by](Frame& f) {
      if (f.kind != FrameKind::kWeightGrads) return;
      for (nn::Tensor& t : f.tensors)
        for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] *= by;
    };
    return o;
  };
  const InProcessRun r =
      fx.run(3, every_ticket_rechecked(), nullptr, {{}, scaled(1.01f), scaled(1.3f)});
  EXPECT_EQ(r.stats.quarantined, std::vector<int>{2});
  ASSERT_GE(r.stats.clients.size(), 2u);
  EXPECT_EQ(r.stats.clients[0].recheck_worst, 0) << "the same build: bit for bit";
  EXPECT_NEAR(r.stats.clients[1].recheck_worst, 0.01, 2e-3);
  EXPECT_EQ(r.stats.clients[1].recheck_failures, 0);
  EXPECT_GT(r.stats.clients[1].rechecks, 1);
  EXPECT_EQ(r.clients[2].tickets, 1);
}

TEST(HybridRecheck, SubtleLiarsPassTheScreensButNotTheRecheck) {
  Fixture fx(cnn_spec(2, 16, 512));
  const std::vector<ClientOptions> clients{{}, {}, subtle_liar("grads"), subtle_liar("acts")};
  const InProcessRun screened = fx.run(4, no_rechecks(), nullptr, clients);
  EXPECT_TRUE(screened.stats.quarantined.empty()) << "the screens alone see these lies";
  const InProcessRun checked = fx.run(4, HybridOptions{}, nullptr, clients);
  for (const auto& line : checked.stats.log) std::printf("  %s\n", line.c_str());
  std::vector<int> q = checked.stats.quarantined;
  std::sort(q.begin(), q.end());
  EXPECT_EQ(q, (std::vector<int>{2, 3}));
  EXPECT_EQ(checked.stats.recheck_failures, 2);
  int named = 0;
  for (const auto& line : checked.stats.log)
    named += line.find("re-check of ticket") != std::string::npos &&
             line.find("relative RMS error") != std::string::npos;
  EXPECT_EQ(named, 2);
  // Each was caught on its first ticket (a new client's are all re-checked).
  EXPECT_EQ(checked.clients[2].tickets, 1);
  EXPECT_EQ(checked.clients[3].tickets, 1);
  ASSERT_EQ(checked.curve.size(), 2u);
  EXPECT_LT(checked.curve.back().train_loss, checked.curve.front().train_loss);
}

// In int8 the server compares the activations as they travelled (its own
// recomputed ones quantised the same way), or, with the clients' error
// feedback, only what lies beyond the quantisation's bound; the backward's
// comparison is exact either way (the gradients it sent, as decoded).
TEST(HybridRecheck, Int8HonestClientsPassAndSubtleLiarsAreCaught) {
  Fixture fx(cnn_spec(2, 16, 512));
  for (bool feedback : {false, true}) {
    HybridOptions o = every_ticket_rechecked();
    o.wire = Dtype::kInt8;
    o.feedback_acts = o.feedback_grads = feedback;
    const InProcessRun honest = fx.run(2, o);
    EXPECT_EQ(honest.stats.rechecks, honest.stats.tickets);
    EXPECT_EQ(honest.stats.recheck_failures, 0) << "feedback " << feedback;
    EXPECT_TRUE(honest.stats.quarantined.empty());
    HybridOptions d = o;
    d.recheck_first = 3;
    const std::vector<ClientOptions> clients{{}, {}, subtle_liar("grads"), subtle_liar("acts")};
    const InProcessRun checked = fx.run(4, d, nullptr, clients);
    for (const auto& line : checked.stats.log) std::printf("  %s\n", line.c_str());
    std::vector<int> q = checked.stats.quarantined;
    std::sort(q.begin(), q.end());
    // With the clients' error feedback only the part of the 1% noise beyond
    // the quantisation's bound counts: still enough.
    EXPECT_EQ(q, (std::vector<int>{2, 3})) << "feedback " << feedback;
    EXPECT_EQ(checked.stats.recheck_failures, 2);
  }
}

// A client answers in the dtype asked for or in float32, never coarser:
// int8 activations to a float32 or float16 ticket quarantine it.
TEST(HybridRecheck, ActivationsCoarserThanAskedAreRefused) {
  Fixture fx(cnn_spec(1, 16, 128));
  ClientOptions coarse;
  coarse.tamper = [](Frame& f) {
    if (f.kind == FrameKind::kActivations) f.dtype = Dtype::kInt8;
  };
  for (Dtype asked : {Dtype::kFloat32, Dtype::kFloat16}) {
    HybridOptions o;
    o.wire = asked;
    const InProcessRun r = fx.run(3, o, nullptr, {{}, {}, coarse});
    EXPECT_EQ(r.stats.quarantined, std::vector<int>{2});
    bool said = false;
    for (const auto& line : r.stats.log)
      said |= line.find(std::string("activations in int8, the ticket asked for ") +
                        dtype_name(asked)) != std::string::npos;
    EXPECT_TRUE(said);
  }
  // Float32 answers to an int8 ticket are accepted (what a non-finite int8 frame becomes).
  ClientOptions full;
  full.tamper = [](Frame& f) {
    if (f.kind == FrameKind::kActivations) f.dtype = Dtype::kFloat32;
  };
  HybridOptions o;
  o.wire = Dtype::kInt8;
  EXPECT_TRUE(fx.run(2, o, nullptr, {{}, full}).stats.quarantined.empty());
}

// Which tickets are re-checked is the trials' rule (experiment::Replication,
// recheck_first as --trust-after, recheck_rate as the floor), each client
// drawing from its own stream: a client's re-checks over a run are exactly
// what the rule gives for its draws. Every ticket of an honest client passes
// its re-check, so each chosen one before the record adds to it.
int64_t rechecks_by_the_rule(const HybridOptions& o, int client, int64_t tickets) {
  const experiment::Replication rule(o.recheck_first, o.recheck_rate);
  experiment::ReplicationRecord record;
  int64_t n = 0;
  for (int64_t i = 0; i < tickets; ++i)
    if (rule.choose(record, recheck_draw(o.recheck_seed, client, i))) {
      ++n;
      ++record.agreed;
    }
  return n;
}

TEST(HybridRecheck, TrustedClientsAreSampledAsTrialsAre) {
  Fixture fx(cnn_spec(2, 16, 512));  // 32 batches an epoch
  HybridOptions o;
  o.recheck_first = 2;
  o.recheck_seed = 7;
  for (double rate : {0.0, 0.25}) {
    o.recheck_rate = rate;
    const InProcessRun r = fx.run(2, o);
    ASSERT_EQ(r.stats.clients.size(), 2u);
    int64_t halving = 0;
    for (int c = 0; c < 2; ++c) {
      const int64_t tickets = r.stats.clients[c].tickets;
      const int64_t want = rechecks_by_the_rule(o, c, tickets);
      std::printf("rate %.2f, client %d: %lld of %lld tickets re-checked\n", rate, c,
                  static_cast<long long>(r.stats.clients[c].rechecks),
                  static_cast<long long>(tickets));
      EXPECT_EQ(r.stats.clients[c].rechecks, want) << "rate " << rate << ", client " << c;
      EXPECT_EQ(r.stats.clients[c].recheck_failures, 0);
      halving += want - o.recheck_first;
    }
    EXPECT_EQ(r.stats.rechecks, r.stats.clients[0].rechecks + r.stats.clients[1].rechecks);
    // With this key the rule samples some after the record even at rate 0
    // (the halving: 1/2, 1/4, ...); a flat rate of 0 would sample none.
    EXPECT_GE(halving, 2) << "rate " << rate << ": pick a key whose draws sample some";
    EXPECT_LT(r.stats.rechecks, r.stats.tickets) << "every one re-checked";
  }
}

// The draws are uniform and the streams independent: over many keys the
// k-th ticket since the record is re-checked 1/2, 1/4, 1/8 of the time, then
// at the rate, as the gateway's k-th trial result is
// (GatewayTrust.IdentitiesAreSignedAndVerificationHalvesToTheFloor).
TEST(HybridRecheck, TheDrawsHalveToTheRateOverManyKeys) {
  const experiment::Replication rule(2, 0.1);
  constexpr int kKeys = 4000;
  std::vector<int> chosen(6, 0);
  for (int key = 1; key <= kKeys; ++key) {
    experiment::ReplicationRecord record{2, 0};
    for (int k = 0; k < 6; ++k)
      chosen[k] += rule.choose(record, recheck_draw(static_cast<uint64_t>(key), key % 5, k + 2));
  }
  EXPECT_NEAR(chosen[0] / double(kKeys), 0.5, 0.03);
  EXPECT_NEAR(chosen[1] / double(kKeys), 0.25, 0.03);
  EXPECT_NEAR(chosen[2] / double(kKeys), 0.125, 0.02);
  for (int k = 3; k < 6; ++k) EXPECT_NEAR(chosen[k] / double(kKeys), 0.1, 0.02) << k;
  // Another client, or another key, draws otherwise.
  int differ = 0;
  for (int n = 0; n < 1000; ++n) {
    differ += (recheck_draw(7, 0, n) < 0.5) != (recheck_draw(7, 1, n) < 0.5);
    differ += (recheck_draw(7, 0, n) < 0.5) != (recheck_draw(8, 0, n) < 0.5);
  }
  EXPECT_GT(differ, 800);
}

TEST(HybridRecheck, BadRecheckOptionsAreRefusedByName) {
  Fixture fx(cnn_spec(1, 16, 64));
  InProcessHub hub;
  auto message = [&](int first, double rate) -> std::string {
    HybridOptions o;
    o.recheck_first = first;
    o.recheck_rate = rate;
    try {
      HybridServer server(fx.spec, fx.input, fx.data.num_classes, hub, o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message(-1, 0.05), "recheck_first -1 is below 0");
  EXPECT_NE(message(3, 1.5).find("recheck_rate"), std::string::npos);
  EXPECT_NE(message(3, -0.1).find("recheck_rate"), std::string::npos);
  EXPECT_EQ(message(0, 1), "");
  HybridOptions zero;
  zero.recheck_grad_tolerance = 0;
  EXPECT_THROW(HybridServer(fx.spec, fx.input, fx.data.num_classes, hub, zero),
               std::invalid_argument);
}

// Dropout in the features part: a ticket's masks come from a seed the
// server knows too (ticket_dropout_seed), so its re-check draws the same
// ones: honest clients pass every re-check, a subtle liar is still caught.
TEST(HybridRecheck, DropoutInTheFeaturesIsRecheckedToo) {
  std::string yaml = cnn_spec(1, 16, 256);
  const std::string at = "      - max_pool2d: 2\n    classifier:";
  ASSERT_NE(yaml.find(at), std::string::npos);
  yaml.replace(yaml.find(at), at.size(),
               "      - max_pool2d: 2\n      - dropout: 0.3\n    classifier:");
  Fixture fx(yaml);
  const InProcessRun honest = fx.run(2, every_ticket_rechecked());
  EXPECT_EQ(honest.stats.rechecks, honest.stats.tickets);
  EXPECT_EQ(honest.stats.recheck_failures, 0);
  EXPECT_TRUE(honest.stats.quarantined.empty());
  const InProcessRun caught =
      fx.run(3, every_ticket_rechecked(), nullptr, {{}, {}, subtle_liar("grads")});
  EXPECT_EQ(caught.stats.quarantined, std::vector<int>{2});
  EXPECT_EQ(caught.stats.recheck_failures, 1);
}

// Every ticket's end as the server records it (HybridOptions::tickets).
struct Records : TicketRecorder {
  std::vector<TicketRecord> all;
  int rounds = 0;
  void record(const TicketRecord& r) override { all.push_back(r); }
  void round() override { ++rounds; }
};

// The records agree with the counters: one record per ticket issued (plus
// one per late answer), each end kind as often as its counter says, and
// every batch of every epoch ended once by a ticket that was not reissued.
void expect_records_agree(const Records& rec, const InProcessRun& r, int64_t n, int64_t batch,
                          int epochs) {
  std::map<TicketEnd, int64_t> count;
  std::set<uint64_t> tickets;
  std::map<int, std::vector<int64_t>> ended_batches;  // by epoch
  int64_t rechecked = 0, failed = 0;
  for (const TicketRecord& t : rec.all) {
    ++count[t.end];
    EXPECT_GE(t.leased, 0) << "ticket " << t.ticket;
    if (t.activations >= 0) {
      EXPECT_GE(t.activations, t.leased) << "ticket " << t.ticket;
    }
    if (t.end == TicketEnd::kLate) continue;
    EXPECT_TRUE(tickets.insert(t.ticket).second) << "ticket " << t.ticket << " ended twice";
    EXPECT_EQ(t.rows, std::min(batch, n - t.begin)) << "ticket " << t.ticket;
    if (t.end == TicketEnd::kApplied || t.end == TicketEnd::kAppliedStale) {
      EXPECT_GE(t.gradients, t.activations) << "ticket " << t.ticket;
      EXPECT_EQ(t.age > 0, t.end == TicketEnd::kAppliedStale) << "ticket " << t.ticket;
      EXPECT_TRUE(t.why.empty());
    } else {
      EXPECT_FALSE(t.why.empty()) << "ticket " << t.ticket << " ended without a reason";
    }
    if (t.end != TicketEnd::kReissued) ended_batches[t.epoch].push_back(t.begin);
    rechecked += t.rechecked;
    failed += t.rechecked && !t.recheck_passed;
  }
  EXPECT_EQ(static_cast<int64_t>(tickets.size()), r.stats.tickets);
  EXPECT_EQ(count[TicketEnd::kReissued], r.stats.reissued);
  EXPECT_EQ(count[TicketEnd::kLate], r.stats.late);
  EXPECT_EQ(count[TicketEnd::kApplied] + count[TicketEnd::kAppliedStale], r.stats.grads_applied);
  EXPECT_EQ(count[TicketEnd::kAppliedStale], r.stats.grads_stale);
  EXPECT_EQ(count[TicketEnd::kDropped], r.stats.grads_dropped);
  EXPECT_EQ(rechecked, r.stats.rechecks);
  EXPECT_EQ(failed, r.stats.recheck_failures);
  EXPECT_EQ(rec.rounds, r.stats.rounds + epochs) << "one after each round and each epoch's end";
  std::vector<int64_t> all_batches;
  for (int64_t b = 0; b < n; b += batch) all_batches.push_back(b);
  ASSERT_EQ(static_cast<int>(ended_batches.size()), epochs);
  for (auto& [epoch, begins] : ended_batches) {
    std::sort(begins.begin(), begins.end());
    EXPECT_EQ(begins, all_batches) << "epoch " << epoch << ": each batch once, none missing";
  }
}

TEST(HybridTickets, RecordsOfStragglersAndLeaversAgreeWithTheCounters) {
  Fixture fx(cnn_spec(2, 32, 256));
  ClientOptions steady = paced(20), slow = stalls_once(2, 300), leaver;
  leaver.leave_at_ticket = 3;
  Records rec;
  HybridOptions o;
  o.deadline = std::chrono::milliseconds(100);
  o.tickets = &rec;
  const InProcessRun r = fx.run(3, o, nullptr, {steady, slow, leaver});
  for (const auto& line : r.stats.log) std::printf("  %s\n", line.c_str());
  // The counts depend on timing (a slow machine may miss another deadline);
  // the records agree with them whatever they are.
  EXPECT_GE(r.stats.late, 1);
  EXPECT_GE(r.stats.reissued, 2) << "the straggler's and the leaver's";
  ASSERT_NO_FATAL_FAILURE(expect_records_agree(rec, r, 256, 32, 2));
  std::map<std::string, int> reissued_why;
  for (const TicketRecord& t : rec.all)
    if (t.end == TicketEnd::kReissued) ++reissued_why[t.why];
  EXPECT_EQ(reissued_why["client_gone"], 1) << "the leaver's ticket";
  EXPECT_GE(reissued_why["deadline"], 1) << "the straggler's";
  // Each late answer is on a ticket of the same client given up at its
  // deadline, first (reissued before its activations, dropped after).
  for (size_t i = 0; i < rec.all.size(); ++i) {
    const TicketRecord& late = rec.all[i];
    if (late.end != TicketEnd::kLate) continue;
    const auto given_up = std::find_if(rec.all.begin(), rec.all.begin() + i, [&](const auto& t) {
      return t.ticket == late.ticket && t.end != TicketEnd::kLate;
    });
    ASSERT_NE(given_up, rec.all.begin() + i) << "late on ticket " << late.ticket;
    EXPECT_TRUE(given_up->end == TicketEnd::kReissued || given_up->end == TicketEnd::kDropped);
    EXPECT_EQ(given_up->why, "deadline");
    EXPECT_EQ(given_up->client, late.client);
    EXPECT_EQ(given_up->begin, late.begin);
    EXPECT_TRUE(late.activations >= 0 || late.gradients >= 0) << "the late frame's time";
  }
}

TEST(HybridTickets, RecordsOfLiarsAndStaleGradientsAgreeWithTheCounters) {
  Fixture fx(cnn_spec(2, 16, 384));
  Records rec;
  HybridOptions o;
  o.staleness = 1;
  o.recheck_seed = 7;
  o.tickets = &rec;
  const InProcessRun r =
      fx.run(5, o, nullptr, {{}, {}, liar("x100"), liar("random"), liar("stale")});
  for (const auto& line : r.stats.log) std::printf("  %s\n", line.c_str());
  EXPECT_EQ(r.stats.quarantined.size(), 3u);
  EXPECT_GT(r.stats.grads_stale, 0);
  ASSERT_NO_FATAL_FAILURE(expect_records_agree(rec, r, 384, 16, 2));
  std::set<int> caught;  // clients with a ticket ended by their quarantine or the norm screen
  for (const TicketRecord& t : rec.all) {
    if (t.why == "quarantined" || t.why == "norm") caught.insert(t.client);
    if (t.client < 2 && t.end != TicketEnd::kLate) {  // the honest ones
      EXPECT_TRUE(t.end == TicketEnd::kApplied || t.end == TicketEnd::kAppliedStale)
          << "ticket " << t.ticket << " of honest client " << t.client << ": "
          << ticket_end_name(t.end) << " " << t.why;
    }
  }
  EXPECT_EQ(caught, (std::set<int>{2, 3, 4}));
  EXPECT_GT(r.stats.rechecks, 0);
}

}  // namespace train_test
}  // namespace dnnlab::hybrid
