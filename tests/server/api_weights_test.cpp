// The weights routes (docs/openapi.yaml): GET /api/trials/{id}/weights serves
// a kept file byte for byte (404 when none is kept), the trial's detail
// links it, POST /api/trials/{id}/pin and /unpin need the write token.
#include "server_fixture.hpp"
#include "store_backends.hpp"

namespace dnnlab::server::testing {
namespace {

class ApiWeightsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    url_ = store_url(GetParam(), dir_);
    DNNLAB_REQUIRE_STORE(url_);
    store_ = store::open_result_store(url_);
    exp_ = populate(*store_, 6);
    trials_ = store_->trials(exp_, {});
    ServerOptions o;
    o.store_url = url_;
    o.broker_url = broker_url(url_, dir_);
    o.run_coordinators = false;
    server_ = std::make_unique<RunningServer>(o);
  }
  void TearDown() override { server_.reset(); }
  std::string path(std::int64_t id, const std::string& tail = "") const {
    return "/api/trials/" + std::to_string(id) + tail;
  }

  TempDir dir_;
  std::string url_;
  std::unique_ptr<store::ResultStore> store_;
  std::int64_t exp_ = 0;
  std::vector<store::TrialRecord> trials_;
  std::unique_ptr<RunningServer> server_;
};

INSTANTIATE_TEST_SUITE_P(Stores, ApiWeightsTest, DNNLAB_STORE_BACKENDS, store_backend_name);

TEST_P(ApiWeightsTest, AKeptFileIsServedAndLinkedFromTheTrial) {
  const std::int64_t id = trials_[0].id;  // finished (populate)
  const std::string file("\x08\0\0\0\0\0\0\0{}      \xff", 17);
  store_->put_weights(id, file);
  auto r = server_->get(path(id, "/weights"));
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, file);
  json detail = parse(server_->get(path(id)));
  EXPECT_EQ(detail["weights"]["url"], path(id, "/weights"));
  EXPECT_EQ(detail["weights"]["size"], 17);
  EXPECT_EQ(detail["weights"]["sha256"], store_->weights(id)->sha256);
  EXPECT_EQ(detail["pinned"], false);

  const std::int64_t other = trials_[1].id;
  EXPECT_TRUE(parse(server_->get(path(other)))["weights"].is_null());
  auto none = server_->get(path(other, "/weights"));
  EXPECT_EQ(none.status, 404u);
  EXPECT_NE(parse(none)["error"].get<std::string>().find("keeps no weights"), std::string::npos);
  EXPECT_EQ(server_->get(path(999999, "/weights")).status, 404u);
}

TEST_P(ApiWeightsTest, PinningNeedsTheWriteToken) {
  const std::int64_t id = trials_[2].id;
  EXPECT_EQ(server_->post(path(id, "/pin"), "", "").status, 401u);
  EXPECT_FALSE(store_->trial(id)->pinned);
  auto r = server_->post(path(id, "/pin"), "", server_->token());
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(parse(r)["pinned"], true);
  EXPECT_TRUE(store_->trial(id)->pinned);
  EXPECT_EQ(parse(server_->get(path(id)))["pinned"], true);
  r = server_->post(path(id, "/unpin"), "", server_->token());
  EXPECT_EQ(parse(r)["pinned"], false);
  EXPECT_FALSE(store_->trial(id)->pinned);
  EXPECT_EQ(server_->post(path(999999, "/pin"), "", server_->token()).status, 404u);
}

}  // namespace
}  // namespace dnnlab::server::testing
