// The endpoint against hostile peers while an honest client trains: a wrong
// token, a wrong protocol version, an oversize frame, a garbage frame, a
// frame of another format version and a frame for a ticket not held each get
// a close reason naming the field or byte offset (as do a text message after
// the hello and a silent connection); training goes on.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <thread>
#include <utility>

#include "data/dataset.hpp"
#include "hybrid/client.hpp"
#include "hybrid/server.hpp"
#include "hybrid_net/client_link.hpp"
#include "hybrid_net/endpoint.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::hybrid_net {
namespace endpoint_hostile_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;

const std::string kTinySpec = R"(name: tiny
data: {dataset: synthetic, validation: 64, limit_train: 256}
model:
  input: [1, 28, 28]
  parts:
    features:
      - {conv2d: 4, padding: 1}
      - relu
      - max_pool2d: 2
    classifier:
      - dense: 10
train:
  epochs: 2
  batch_size: 32
  seed: 5
  optimizer: {type: adam, lr: 0.01}
)";

// What a peer heard before the server closed its connection.
struct Heard {
  std::string error;   // the server's error message, if any
  std::string reason;  // the WebSocket close reason
  bool welcomed = false;
};

// A peer speaking the protocol by hand: `hello` as its first message (empty:
// a binary message instead), then
// (once welcomed) `frame` as one binary message; reads until the close.
Heard hostile_peer(unsigned short port, const std::string& hello, const hybrid::Bytes& frame,
                   bool frame_as_text = false) {
  asio::io_context ioc;
  websocket::stream<beast::tcp_stream> ws(ioc);
  Heard h;
  try {
    ws.next_layer().connect({asio::ip::make_address("127.0.0.1"), port});
    ws.handshake("127.0.0.1", kPath);
    ws.text(!hello.empty());
    ws.write(hello.empty() ? asio::buffer("DNHF", 4) : asio::buffer(hello));
    ws.read_message_max(0);
    for (int messages = 0; messages < 1000; ++messages) {
      beast::flat_buffer b;
      ws.read(b);
      const std::string text = ws.got_text() ? beast::buffers_to_string(b.data()) : "";
      if (text.find("\"welcome\"") != std::string::npos) {
        h.welcomed = true;
        ws.binary(!frame_as_text);
        ws.write(asio::buffer(frame));
      } else if (text.find("\"error\"") != std::string::npos) {
        h.error = text;
      }
    }
  } catch (const beast::system_error&) {
    h.reason = std::string(ws.reason().reason.data(), ws.reason().reason.size());
  }
  return h;
}

std::string hello_json(const std::string& token, int v = kProtocolVersion) {
  return R"({"v":)" + std::to_string(v) + R"(,"type":"hello","token":")" + token + R"("})";
}

TEST(EndpointHostile, EachGetsAReasonAndTrainingGoesOn) {
  const nn::RunSpec spec = spec::parse_run_spec(kTinySpec, "tiny.yaml");
  const data::Dataset data = data::load(data::load_options(spec.data, ""));
  const nn::Shape input = nn::model_input(spec.model, data.sample_shape);
  EndpointOptions eo;
  eo.token = std::string(64, 'a');
  eo.welcome.spec_yaml = kTinySpec;
  eo.welcome.train_rows = data.train.size();
  eo.max_frame_bytes = 1 << 20;
  HybridEndpoint ep("127.0.0.1:0", eo);
  const unsigned short port = ep.port();

  // Refused at the hello: never clients.
  const Heard wrong_token = hostile_peer(port, hello_json(std::string(64, 'b')), {});
  const Heard wrong_version = hostile_peer(port, hello_json(eo.token, 1), {});
  const Heard binary_hello = hostile_peer(port, "", {});
  const Heard big_hello = hostile_peer(port, hello_json(std::string(5000, 'a')), {});
  EXPECT_EQ(big_hello.reason, "the hello is over 4096 bytes");
  EXPECT_FALSE(wrong_token.welcomed);
  EXPECT_EQ(wrong_token.reason, "hello: 'token' is not this run's join token");
  EXPECT_EQ(wrong_version.reason, "hello: 'v' is 1, this build speaks 2");
  EXPECT_EQ(binary_hello.reason, "the first message must be the text hello, got a binary message");

  // Admitted, then misbehaving: each holds a client slot until the engine
  // (or the io thread, for the size) throws it out.
  hybrid::Bytes garbage(64, 0x5a);
  hybrid::Frame other{hybrid::FrameKind::kActivations, 0, 999, {}, {}};
  other.tensors.emplace_back(nn::Shape{1, 4});
  hybrid::Bytes not_held = hybrid::encode(other);
  hybrid::Bytes format1 = not_held;
  format1[4] = 1;  // format 1: no compute time
  hybrid::Bytes oversize(eo.max_frame_bytes + 1000, 0);
  hybrid::Bytes chat = {'h', 'i'};
  std::vector<Heard> heard(5);
  std::vector<std::thread> peers;
  int i = 0;
  for (const hybrid::Bytes* f : {&garbage, &not_held, &format1, &oversize, &chat}) {
    peers.emplace_back(
        [&, f, i] { heard[i] = hostile_peer(port, hello_json(eo.token), *f, f == &chat); });
    ++i;
  }
  // The honest client, in this process over loopback.
  auto link = ClientLink::join(ep.url(), eo.token);
  hybrid::ClientReport honest;
  std::thread client([&] {
    honest = hybrid::run_client(*link, spec.model, input, data.num_classes, spec.train.seed,
                                data.train.x.view(), {});
  });
  ep.wait_for_clients(6, hybrid::Clock::now() + std::chrono::seconds(20), nullptr);
  EXPECT_EQ(ep.clients(), 6);

  hybrid::HybridServer server(spec, input, data.num_classes, ep, {});
  const nn::LabeledData train{data.train.x.view(), data.train.y.data()};
  const nn::LabeledData val{data.val.x.view(), data.val.y.data()};
  const std::vector<nn::EpochResult> curve = server.fit(train, &val, nullptr);
  server.finish();
  ep.shutdown();
  client.join();
  for (auto& t : peers) t.join();

  ASSERT_EQ(curve.size(), 2u);
  EXPECT_LT(curve[1].train_loss, curve[0].train_loss);
  EXPECT_TRUE(honest.error.empty()) << honest.error;
  EXPECT_GT(honest.tickets, 0);
  // The io thread closes the oversize and the text one (the engine hears
  // that they left); the engine quarantines the other three.
  EXPECT_EQ(server.stats().quarantined.size(), 3u);
  EXPECT_EQ(heard[0].reason, "hybrid frame at byte 0: not a hybrid frame (magic)");
  EXPECT_EQ(heard[1].reason, "ticket 999 was not issued to it");
  EXPECT_EQ(heard[2].reason, "hybrid frame at byte 4: format version 1, this build reads 2");
  EXPECT_EQ(heard[3].reason, "a frame is over 1048576 bytes (max_frame_bytes)");
  EXPECT_EQ(heard[4].reason, "a text message after the hello: the trainer's frames are binary");
  for (const Heard& h : heard) {
    EXPECT_TRUE(h.welcomed);
    EXPECT_NE(h.error.find(h.reason), std::string::npos) << h.error;  // the full text first
  }
  for (const std::string& line : server.stats().log) std::printf("hybrid: %s\n", line.c_str());
}

// A hello's identity ("client" and "secret", docs/distributed.md
// "Identities") from a stranger: half of one, the wrong types, an id out of
// range or a secret too long is refused by name before any lookup, and
// leaves no client and no identity behind.
TEST(EndpointHostile, MalformedIdentitiesAreRefusedByName) {
  EndpointOptions eo;
  eo.token = std::string(64, 'e');
  HybridEndpoint ep("127.0.0.1:0", eo);
  const std::string head = R"({"v":)" + std::to_string(kProtocolVersion) +
                           R"(,"type":"hello","token":")" + eo.token + "\"";
  const std::string secret = "\"secret\":\"" + std::string(64, 'f') + "\"";
  const std::pair<std::string, std::string> cases[] = {
      {head + R"(,"client":0})", "hello: 'client' without 'secret'"},
      {head + "," + secret + "}", "hello: 'secret' without 'client'"},
      {head + R"(,"client":-1,)" + secret + "}",
       "hello: 'client' is not a client id (an integer >= 0)"},
      {head + R"(,"client":"0",)" + secret + "}",
       "hello: 'client' is not a client id (an integer >= 0)"},
      {head + R"(,"client":1e12,)" + secret + "}",
       "hello: 'client' is not a client id (an integer >= 0)"},
      {head + R"(,"client":99999999999,)" + secret + "}",
       "hello: 'client' is not a client id (an integer >= 0)"},
      {head + R"(,"client":0,"secret":7})", "hello: 'secret' is missing or not a string"},
      {head + R"(,"client":0,"secret":")" + std::string(129, 'f') + "\"}",
       "hello: 'secret' is longer than 128 bytes"},
  };
  for (const auto& [hello, reason] : cases) {
    const Heard h = hostile_peer(ep.port(), hello, {});
    EXPECT_FALSE(h.welcomed) << hello;
    EXPECT_EQ(h.reason, reason) << hello;
  }
  EXPECT_EQ(ep.clients(), 0);
  EXPECT_EQ(ep.identities(), 0u);
  // The endpoint still admits a client, as a new identity (id 0).
  EXPECT_EQ(ClientLink::join(ep.url(), eo.token)->welcome().client, 0);
}

TEST(EndpointHostile, SilentConnectionIsClosedAtTheHelloTimeout) {
  EndpointOptions eo;
  eo.token = std::string(64, 'd');
  eo.hello_timeout = std::chrono::milliseconds(200);
  HybridEndpoint ep("127.0.0.1:0", eo);
  asio::io_context ioc;
  asio::ip::tcp::socket s(ioc);
  s.connect({asio::ip::make_address("127.0.0.1"), ep.port()});
  const auto start = std::chrono::steady_clock::now();
  char c;
  boost::system::error_code ec;
  s.read_some(asio::buffer(&c, 1), ec);  // says nothing; waits for the server to hang up
  EXPECT_TRUE(ec);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  // And after that, the endpoint still admits a client.
  EXPECT_NO_THROW(ClientLink::join(ep.url(), eo.token));
  EXPECT_EQ(ep.clients(), 1);
}

TEST(EndpointHostile, ClientLinkReportsTheRefusal) {
  EndpointOptions eo;
  eo.token = std::string(64, 'c');
  HybridEndpoint ep("127.0.0.1:0", eo);
  try {
    ClientLink::join(ep.url(), "wrong");
    FAIL() << "joined with a wrong token";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'token' is not this run's join token"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ClientLink::join("http://127.0.0.1:1/hybrid", "x"), ProtocolError);
  EXPECT_EQ(ep.clients(), 0);
}

}  // namespace endpoint_hostile_test
}  // namespace dnnlab::hybrid_net
