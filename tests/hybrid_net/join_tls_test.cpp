// `dnnlab train --distributed --listen --tls-cert --tls-key` with `dnnlab
// join wss://… --tls-ca` client processes over loopback: two clients train
// to the end exactly as two in-process clients do; a client that does not
// trust the certificate, and one speaking plain ws:// to the TLS port, are
// refused with the reason and the run goes on; a bad certificate or key
// stops the run, naming the flag and the file, before it listens.
#include "join_util.hpp"
#include "tls_cert.hpp"

namespace dnnlab::cli_test {
namespace join_tls_test {

const std::string kNetSpec = R"(name: net
data: {dataset: synthetic, validation: 64, limit_train: 512}
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
  epochs: 1
  batch_size: 16
  seed: 3
  optimizer: {type: adam, lr: 0.003}
)";

TEST(JoinTls, TwoClientsTrainOverWssAndUntrustedOnesAreRefused) {
  TempDir a, b;
  DNNLAB_NEED_CERT(b.path, "srv");
  const auto spec = a.write("net.yaml", kNetSpec);
  const Result pair =
      run("train -q " + spec.string() + " --distributed --clients 2 --out " + a.path.string());
  ASSERT_EQ(pair.code, 0) << pair.err;
  const std::string cert = (b.path / "srv.crt").string(), key = (b.path / "srv.key").string();
  Result untrusted, plain;
  const NetRun net = run_networked(b, spec, 2, {{"--tls-ca", cert}, {"--tls-ca", cert}},
                                   {"--tls-cert", cert, "--tls-key", key}, [&](const Join& j) {
                                     EXPECT_EQ(j.url.rfind("wss://127.0.0.1:", 0), 0u) << j.url;
                                     // Before the good clients: the server, waiting for them,
                                     // refuses these.
                                     untrusted = run("join -q " + j.url + " --token " + j.token);
                                     std::string ws = j.url;
                                     ws.replace(0, 3, "ws");
                                     plain = run("join -q " + ws + " --token " + j.token);
                                   });
  EXPECT_NE(untrusted.code, 0);
  EXPECT_NE(untrusted.err.find("the certificate of 127.0.0.1:"), std::string::npos)
      << untrusted.err;
  EXPECT_NE(untrusted.err.find("failed verification"), std::string::npos) << untrusted.err;
  EXPECT_NE(plain.code, 0);
  EXPECT_NE(plain.err.find("this port speaks TLS only"), std::string::npos) << plain.err;
  ASSERT_EQ(net.server, 0) << net.log;
  EXPECT_EQ(net.clients, (std::vector<int>{0, 0})) << net.log;
  EXPECT_EQ(net.metrics["distributed"]["transport"], "websocket");
  EXPECT_EQ(net.metrics["distributed"]["tickets"], 32);  // 512 rows / 16, nothing reissued
  EXPECT_EQ(net.metrics["epochs"].size(), 1u);
  // TLS carries the same bytes: the weights are the in-process pair's.
  EXPECT_EQ(slurp(a.path / "net.safetensors"), slurp(b.path / "net.safetensors"));
  // The server printed https:// for browsers, wss:// to join.
  EXPECT_NE(net.log.find("listening on wss://127.0.0.1:"), std::string::npos) << net.log;
}

TEST(JoinTls, ABadCertificateOrKeyStopsTheRunBeforeItListens) {
  TempDir dir;
  DNNLAB_NEED_CERT(dir.path, "srv");
  DNNLAB_NEED_CERT(dir.path, "other");
  const auto spec = dir.write("net.yaml", kNetSpec);
  const std::string train =
      "train -q " + spec.string() + " --distributed --listen 127.0.0.1:0 --client-wait 1 ";
  const std::string cert = (dir.path / "srv.crt").string(), key = (dir.path / "srv.key").string();
  Result r = run(train + "--tls-cert " + (dir.path / "missing.crt").string() + " --tls-key " + key);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--tls-cert " + (dir.path / "missing.crt").string() + ": no such file"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("listening"), std::string::npos) << r.err;
  r = run(train + "--tls-cert " + cert + " --tls-key " + (dir.path / "other.key").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("does not belong to the certificate"), std::string::npos) << r.err;
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  r = run(train + "--tls-cert " + cert + " --tls-key " + key);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--tls-key " + key + " has mode 0644"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("listening"), std::string::npos) << r.err;
  // Only with --listen, and only together.
  r = run("train -q " + spec.string() + " --distributed --tls-cert " + cert + " --tls-key " + key);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--listen"), std::string::npos) << r.err;
  r = run(train + "--tls-cert " + cert);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--tls-key"), std::string::npos) << r.err;
}

}  // namespace join_tls_test
}  // namespace dnnlab::cli_test
