// Issue 24, item 6: backend_url::redact hides every secret a store or broker
// URL can carry, in each form libpq and the AMQP URL accept, and leaves the
// rest of the URL readable.
#include "db/backend_url.hpp"

#include <gtest/gtest.h>

namespace dnnlab {
namespace {

using backend_url::redact;

TEST(BackendUrlRedact, UserinfoPassword) {
  EXPECT_EQ(redact("postgres://alice:hunter2@db.lan:5432/runs"),
            "postgres://alice:***@db.lan:5432/runs");
  EXPECT_EQ(redact("postgresql://:hunter2@db.lan/runs"), "postgresql://:***@db.lan/runs");
  EXPECT_EQ(redact("amqp://guest:hunter2@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f");
  EXPECT_EQ(redact("amqps://guest:hunter2@mq.lan/vh?prefetch=2"),
            "amqps://guest:***@mq.lan/vh?prefetch=2");
  // Unescaped '@' or '/' in the password: all of it is hidden.
  EXPECT_EQ(redact("postgres://alice:hun@ter/2@db.lan/runs"), "postgres://alice:***@db.lan/runs");
  // No password: nothing to hide.
  EXPECT_EQ(redact("postgres://alice@db.lan:5432/runs"), "postgres://alice@db.lan:5432/runs");
  EXPECT_EQ(redact("postgres://db.lan:5432/runs"), "postgres://db.lan:5432/runs");
}

TEST(BackendUrlRedact, QueryParameters) {
  EXPECT_EQ(redact("postgres://db.lan/runs?password=hunter2"),
            "postgres://db.lan/runs?password=***");
  EXPECT_EQ(redact("postgres://db.lan/runs?sslmode=require&password=hunter2&connect_timeout=5"),
            "postgres://db.lan/runs?sslmode=require&password=***&connect_timeout=5");
  EXPECT_EQ(redact("postgres://db.lan/runs?PassWord=hunter2"),
            "postgres://db.lan/runs?PassWord=***");
  // libpq percent-decodes the keyword too.
  EXPECT_EQ(redact("postgres://db.lan/runs?p%61ssword=hunter2"),
            "postgres://db.lan/runs?p%61ssword=***");
  EXPECT_EQ(redact("postgres://db.lan/runs?sslpassword=hunter2"),
            "postgres://db.lan/runs?sslpassword=***");
  EXPECT_EQ(redact("postgres://u:a@db.lan/runs?password=b"),
            "postgres://u:***@db.lan/runs?password=***");
  EXPECT_EQ(redact("http://127.0.0.1:8080/?token=0123abcd#/experiments/1"),
            "http://127.0.0.1:8080/?token=***#/experiments/1");
  EXPECT_EQ(redact("http://127.0.0.1:8080/join?x=1&token=0123abcd"),
            "http://127.0.0.1:8080/join?x=1&token=***");
  EXPECT_EQ(redact("postgres://db.lan/runs?application_name=tokenizer"),
            "postgres://db.lan/runs?application_name=tokenizer");
}

TEST(BackendUrlRedact, KeywordValueConnectionStrings) {
  EXPECT_EQ(redact("host=db.lan password=hunter2 dbname=runs"),
            "host=db.lan password=*** dbname=runs");
  EXPECT_EQ(redact("host=db.lan password = hunter2"), "host=db.lan password = ***");
  EXPECT_EQ(redact("password='hunter 2 \\' still' host=db.lan"), "password=*** host=db.lan");
  EXPECT_EQ(redact("host=db.lan PASSWORD=hunter2"), "host=db.lan PASSWORD=***");
  EXPECT_EQ(redact("host=db.lan user=alice"), "host=db.lan user=alice");
}

TEST(BackendUrlRedact, NothingSecretIsUnchanged) {
  for (const char* url : {"sqlite:runs/dnnlab.db", "sqlite:///abs/dnnlab.db", "sqlite::memory:", "",
                          "sqlite:a=b.db", "amqp://127.0.0.1"})
    EXPECT_EQ(redact(url), url);
}

}  // namespace
}  // namespace dnnlab
