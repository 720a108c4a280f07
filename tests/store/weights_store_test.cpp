// The weights calls of ResultStore (schema 9) on every backend: put replaces,
// get returns the bytes and their sha256, the experiment's list carries the
// trials' metrics and pins without the bytes, delete, pin, bad input.
#include <gtest/gtest.h>

#include <cstdlib>

#include "queue/test_support.hpp"
#include "store/pg_server.hpp"
#include "store/result_store.hpp"
#include "store/sha256.hpp"

namespace dnnlab::store {
namespace {

class WeightsStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string url;
    if (GetParam() == "sqlite")
      url = dir_.url("w.db");
    else if (auto* pg = testing::PgServer::shared())
      url = pg->new_database();
    if (url.empty()) {
      if (std::getenv("CI")) FAIL() << testing::PgServer::why_missing();
      GTEST_SKIP() << testing::PgServer::why_missing();
    }
    store_ = open_result_store(url);
    ExperimentRecord e;
    e.name = "w";
    e.spec_text = "x";
    exp_ = store_->create_experiment(e);
    ids_ = store_->add_trials(exp_, {{0, "{}", 1}, {1, "{}", 2}, {2, "{}", 3}});
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      ASSERT_TRUE(store_->mark_running(ids_[i], 1, "w"));
      TrialMetrics m;
      m.val_acc = 0.5 + 0.1 * static_cast<double>(i);
      m.epochs_done = 2;
      ASSERT_TRUE(store_->finish_trial(ids_[i], 1, TrialStatus::finished, m));
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<ResultStore> store_;
  std::int64_t exp_ = 0;
  std::vector<std::int64_t> ids_;
};
INSTANTIATE_TEST_SUITE_P(Backends, WeightsStoreTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

TEST_P(WeightsStoreTest, PutGetListDeleteAndPin) {
  EXPECT_FALSE(store_->weights(ids_[0]));
  EXPECT_TRUE(store_->weights_of(exp_).empty());
  std::string bytes("\x00\x01\xff safetensors \x80", 17);
  store_->put_weights(ids_[1], bytes);
  store_->put_weights(ids_[0], "first");
  store_->put_weights(ids_[0], "second");  // replaces

  auto w = store_->weights(ids_[1]);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->bytes, bytes);
  EXPECT_EQ(w->size, 17);
  EXPECT_EQ(w->sha256, sha256_hex(bytes));
  EXPECT_EQ(w->experiment_id, exp_);
  EXPECT_GT(w->created_at, 0);
  EXPECT_EQ(store_->weights(ids_[0])->bytes, "second");

  store_->set_pinned(ids_[0], true);
  EXPECT_TRUE(store_->trial(ids_[0])->pinned);
  EXPECT_FALSE(store_->trial(ids_[1])->pinned);
  auto list = store_->weights_of(exp_);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].trial_id, ids_[0]);
  EXPECT_TRUE(list[0].pinned);
  EXPECT_EQ(list[0].size, 6);
  EXPECT_TRUE(list[0].bytes.empty());
  EXPECT_DOUBLE_EQ(*list[1].metrics.val_acc, 0.6);
  EXPECT_FALSE(list[1].pinned);
  store_->set_pinned(ids_[0], false);
  EXPECT_FALSE(store_->trial(ids_[0])->pinned);

  EXPECT_TRUE(store_->delete_weights(ids_[1]));
  EXPECT_FALSE(store_->delete_weights(ids_[1]));
  EXPECT_FALSE(store_->weights(ids_[1]));
  EXPECT_EQ(store_->weights_of(exp_).size(), 1u);
}

TEST_P(WeightsStoreTest, BadInputIsRefusedNamingWhy) {
  auto message = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(nothing thrown)";
  };
  EXPECT_NE(message([&] { store_->put_weights(ids_[0], ""); }).find("empty"), std::string::npos);
  const std::string big(static_cast<std::size_t>(kMaxWeightsBytes) + 1, 'x');
  EXPECT_NE(message([&] { store_->put_weights(ids_[0], big); }).find("64 MiB"), std::string::npos);
  EXPECT_NE(message([&] { store_->put_weights(999999, "x"); }).find("trial_id"), std::string::npos);
  EXPECT_NE(message([&] { store_->set_pinned(999999, true); }).find("trial_id"), std::string::npos);
  EXPECT_FALSE(store_->weights(ids_[0]));  // nothing kept
}

}  // namespace
}  // namespace dnnlab::store
