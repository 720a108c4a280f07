// open_task_queue(): the one place a URL chooses a backend.
#include <gtest/gtest.h>

#include "queue/task_queue.hpp"
#include "test_support.hpp"

namespace dnnlab::queue {
namespace {

TEST(TaskQueueFactory, OpensSqliteUrls) {
  testing::TempDir dir;
  EXPECT_NE(open_task_queue("sqlite:" + dir.file("a.db")), nullptr);
  EXPECT_NE(open_task_queue("sqlite://" + dir.file("b.db")), nullptr);  // sqlite:///abs/path
  EXPECT_TRUE(std::filesystem::exists(dir.file("b.db")));
}

#ifdef DNNLAB_WITH_AMQP
TEST(TaskQueueFactory, AmqpUrlsOpenTheBrokerBackend) {
  // Nothing listens on port 1: the AMQP backend tries, then says where.
  TaskQueueOptions options;
  options.busy_timeout_seconds = 0.3;
  try {
    open_task_queue("amqp://guest:secret@127.0.0.1:1/dnnlab", options);
    FAIL();
  } catch (const BackendNotBuiltError& e) {
    FAIL() << "built with rabbitmq-c, yet: " << e.what();
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unreachable"), std::string::npos) << msg;
    EXPECT_NE(msg.find("amqp://guest:***@127.0.0.1:1/dnnlab"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("secret"), std::string::npos) << "password leaked: " << msg;
  }
}
#else
TEST(TaskQueueFactory, AmqpIsNotBuilt) {
  try {
    open_task_queue("amqp://guest:secret@rabbit:5672/dnnlab");
    FAIL();
  } catch (const BackendNotBuiltError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("not built"), std::string::npos) << msg;
    EXPECT_NE(msg.find("amqp://guest:***@rabbit:5672/dnnlab"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("secret"), std::string::npos) << "password leaked: " << msg;
  }
}
#endif

TEST(TaskQueueFactory, OtherUrlsAreRejectedByName) {
  for (std::string url : {"postgres://db/x", "redis://localhost", "queue.db", "", "sqlite:"}) {
    try {
      open_task_queue(url);
      ADD_FAILURE() << "accepted " << url;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + url + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dnnlab::queue
