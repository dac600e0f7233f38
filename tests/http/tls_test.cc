// HTTPS: handshake and requests over TLS with a test CA, plaintext and stalled clients on the TLS
// port, client certificates, the write bounds over TLS, certificate rotation and bad files.
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "strata/http/server.h"
#include "strata/proto/certificates.h"
#include "test_client.h"

namespace strata::http {
namespace {

using ::strata::http::testing::Get;
using ::strata::http::testing::TestClient;

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using ClientContext = std::unique_ptr<SSL_CTX, SslCtxFree>;

void WriteFile(const std::string& path, const std::string& text) {
  // Written beside and renamed, as a rotation should be.
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  ASSERT_NE(f, nullptr) << tmp;
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
  std::fclose(f);
  std::filesystem::rename(tmp, path);
}

// The subject CN of the certificate the server presented.
std::string PeerCommonName(SSL* ssl) {
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return "";
  char cn[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  X509_free(cert);
  return cn;
}

class HttpTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("http_tls_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    auto ca = proto::MakeCertificateAuthority("http test CA", absl::Hours(1));
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
    ca_file_ = (dir_ / "ca.crt").string();
    cert_file_ = (dir_ / "tls.crt").string();
    key_file_ = (dir_ / "tls.key").string();
    WriteFile(ca_file_, ca_.cert_pem);
    IssueServerCert("server-one");
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(1));
    std::filesystem::remove_all(dir_);
  }

  proto::PemKeyPair Issue(const std::string& common_name) {
    proto::LeafSpec spec;
    spec.common_name = common_name;
    auto leaf = proto::IssueLeafCertificate(ca_, spec);
    EXPECT_TRUE(leaf.ok()) << leaf.status();
    return leaf.ok() ? *leaf : proto::PemKeyPair{};
  }
  void IssueServerCert(const std::string& common_name) {
    const proto::PemKeyPair leaf = Issue(common_name);
    WriteFile(key_file_, leaf.key_pem);
    WriteFile(cert_file_, leaf.cert_pem);
  }

  ServerOptions TlsServerOptions() {
    ServerOptions options;
    options.tls.cert_file = cert_file_;
    options.tls.key_file = key_file_;
    return options;
  }

  void StartServer(ServerOptions options) {
    auto server = Server::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    server_->Route("GET", "/hello", [](const Request& request, std::shared_ptr<ResponseWriter> w) {
      w->Respond(200, "text/plain", "hello " + request.remote.substr(0, 9));
    });
    server_->Route("GET", "/ready", [](const Request&, std::shared_ptr<ResponseWriter> w) {
      w->Respond(200, "text/plain", "ready");
    });
    server_->Route("GET", "/stream", [](const Request&, std::shared_ptr<ResponseWriter> w) {
      w->StartStream(200, "text/event-stream");
      for (int i = 0; i < 20; ++i) w->Write(absl::StrCat("data: ", i, "\n\n"));
      w->End();
    });
    ASSERT_TRUE(server_->Start().ok());
  }

  // A client context that trusts the test CA only.
  ClientContext TrustingClient(int max_version = 0) {
    ClientContext ctx(SSL_CTX_new(TLS_client_method()));
    BIO* bio = BIO_new_mem_buf(ca_.cert_pem.data(), int(ca_.cert_pem.size()));
    X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), ca);
    X509_free(ca);
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    static const unsigned char kAlpn[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn));
    if (max_version != 0) SSL_CTX_set_max_proto_version(ctx.get(), max_version);
    return ctx;
  }

  void UseClientCertificate(SSL_CTX* ctx, const proto::PemKeyPair& pair) {
    BIO* bio = BIO_new_mem_buf(pair.cert_pem.data(), int(pair.cert_pem.size()));
    X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    bio = BIO_new_mem_buf(pair.key_pem.data(), int(pair.key_pem.size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    ASSERT_EQ(SSL_CTX_use_certificate(ctx, cert), 1);
    ASSERT_EQ(SSL_CTX_use_PrivateKey(ctx, key), 1);
    X509_free(cert);
    EVP_PKEY_free(key);
  }

  // Waits until the server has `n` open connections (at most).
  bool AwaitConnections(int64_t n, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (server_->open_connections() > n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    return server_->open_connections() <= n;
  }
  bool AwaitNoConnections(absl::Duration timeout) { return AwaitConnections(0, timeout); }

  std::filesystem::path dir_;
  proto::PemKeyPair ca_;
  std::string ca_file_, cert_file_, key_file_;
  std::unique_ptr<Server> server_;
};

TEST_F(HttpTlsTest, RequestsAndStreamsOverTls) {
  StartServer(TlsServerOptions());
  EXPECT_NE(server_->tls_description().find("CN=server-one"), std::string::npos)
      << server_->tls_description();
  ClientContext ctx = TrustingClient();
  std::string error;
  auto client = TestClient::ConnectTls(server_->port(), ctx.get(), "localhost", &error);
  ASSERT_NE(client, nullptr) << error;
  EXPECT_GE(SSL_version(client->ssl()), TLS1_2_VERSION);
  const unsigned char* alpn = nullptr;
  unsigned int alpn_len = 0;
  SSL_get0_alpn_selected(client->ssl(), &alpn, &alpn_len);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(alpn), alpn_len), "http/1.1");
  EXPECT_EQ(PeerCommonName(client->ssl()), "server-one");

  // Keep-alive: two requests, then a chunked stream, on the one TLS connection.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(client->Send(Get("/hello")));
    auto response = client->ReadResponse();
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "hello 127.0.0.1");
  }
  ASSERT_TRUE(client->Send(Get("/stream")));
  auto stream = client->ReadResponse();
  ASSERT_TRUE(stream.has_value());
  EXPECT_TRUE(stream->chunked);
  EXPECT_EQ(stream->chunks.size(), 20u);
  EXPECT_EQ(stream->chunks.back(), "data: 19\n\n");

  // Connection: close ends with close_notify and EOF.
  ASSERT_TRUE(client->Send(Get("/hello", "Connection: close\r\n")));
  auto last = client->ReadResponse();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->status, 200);
  EXPECT_TRUE(client->ReadEof());
}

TEST_F(HttpTlsTest, RejectsOldProtocolsAndUntrustedServers) {
  StartServer(TlsServerOptions());
  ClientContext old = TrustingClient(TLS1_1_VERSION);
  SSL_CTX_set_security_level(old.get(), 0);  // let the client offer TLS 1.1 at all
  std::string error;
  EXPECT_EQ(TestClient::ConnectTls(server_->port(), old.get(), "localhost", &error), nullptr);

  // A client that trusts another CA refuses this server's certificate.
  auto other = proto::MakeCertificateAuthority("another CA", absl::Hours(1));
  ASSERT_TRUE(other.ok());
  ClientContext foreign(SSL_CTX_new(TLS_client_method()));
  BIO* bio = BIO_new_mem_buf(other->cert_pem.data(), int(other->cert_pem.size()));
  X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(foreign.get()), ca);
  X509_free(ca);
  SSL_CTX_set_verify(foreign.get(), SSL_VERIFY_PEER, nullptr);
  EXPECT_EQ(TestClient::ConnectTls(server_->port(), foreign.get(), "localhost", &error), nullptr);

  // The server still serves a good client.
  ClientContext good = TrustingClient();
  EXPECT_NE(TestClient::ConnectTls(server_->port(), good.get(), "localhost", &error), nullptr)
      << error;
}

TEST_F(HttpTlsTest, PlaintextClientGetsA400AndIsClosed) {
  StartServer(TlsServerOptions());
  auto plain = TestClient::Connect(server_->port(), 5);
  ASSERT_NE(plain, nullptr);
  ASSERT_TRUE(plain->Send(Get("/hello")));
  auto response = plain->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 400);
  EXPECT_NE(response->body.find("HTTPS"), std::string::npos) << response->body;
  EXPECT_TRUE(AwaitNoConnections(absl::Seconds(5)));

  // Bytes that are neither HTTP nor TLS: closed without a response.
  auto garbage = TestClient::Connect(server_->port(), 5);
  ASSERT_NE(garbage, nullptr);
  ASSERT_TRUE(garbage->Send(std::string(64, '\x01')));
  EXPECT_TRUE(garbage->ReadEof());
  EXPECT_TRUE(AwaitNoConnections(absl::Seconds(5)));
}

TEST_F(HttpTlsTest, ClientStalledInHandshakeIsDroppedAfterTheDeadline) {
  ServerOptions options = TlsServerOptions();
  options.tls.handshake_timeout = absl::Milliseconds(300);
  StartServer(options);
  auto silent = TestClient::Connect(server_->port(), 5);
  auto partial = TestClient::Connect(server_->port(), 5);
  ASSERT_NE(silent, nullptr);
  ASSERT_NE(partial, nullptr);
  // The start of a ClientHello record that never completes.
  ASSERT_TRUE(partial->Send(std::string("\x16\x03\x01\x02\x00\x01", 6)));
  const absl::Time start = absl::Now();
  EXPECT_TRUE(silent->ReadEof());
  EXPECT_TRUE(partial->ReadEof());
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_TRUE(AwaitNoConnections(absl::Seconds(2)));
}

TEST_F(HttpTlsTest, ClientCertificatesWhenRequired) {
  ServerOptions options = TlsServerOptions();
  options.tls.client_ca_file = ca_file_;
  StartServer(options);
  EXPECT_NE(server_->tls_description().find("client certificates required"), std::string::npos);

  ClientContext with_cert = TrustingClient();
  UseClientCertificate(with_cert.get(), Issue("client"));
  std::string error;
  auto client = TestClient::ConnectTls(server_->port(), with_cert.get(), "localhost", &error);
  ASSERT_NE(client, nullptr) << error;
  ASSERT_TRUE(client->Send(Get("/hello")));
  auto response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);

  // Without a certificate: 403 except on the probe paths.
  ClientContext without = TrustingClient();
  auto anonymous = TestClient::ConnectTls(server_->port(), without.get(), "localhost", &error);
  ASSERT_NE(anonymous, nullptr) << error;
  ASSERT_TRUE(anonymous->Send(Get("/hello")));
  auto refused = anonymous->ReadResponse();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 403);
  EXPECT_NE(refused->body.find("client certificate"), std::string::npos) << refused->body;
  ASSERT_TRUE(anonymous->Send(Get("/ready")));
  auto probe = anonymous->ReadResponse();
  ASSERT_TRUE(probe.has_value());
  EXPECT_EQ(probe->status, 200);

  // A certificate from another CA fails the handshake (with TLS 1.3 the client may learn it only
  // on its first read): no request is served.
  auto other = proto::MakeCertificateAuthority("another CA", absl::Hours(1));
  ASSERT_TRUE(other.ok());
  proto::LeafSpec spec;
  auto foreign_leaf = proto::IssueLeafCertificate(*other, spec);
  ASSERT_TRUE(foreign_leaf.ok());
  ClientContext foreign = TrustingClient();
  UseClientCertificate(foreign.get(), *foreign_leaf);
  auto forged = TestClient::ConnectTls(server_->port(), foreign.get(), "localhost", &error);
  if (forged != nullptr) {
    forged->Send(Get("/hello"));
    EXPECT_FALSE(forged->ReadResponse().has_value());
  }
}

TEST_F(HttpTlsTest, SlowReaderIsCutOffOverTls) {
  ServerOptions options = TlsServerOptions();
  options.max_queued_write_bytes = 256 << 10;
  options.write_timeout = absl::Seconds(1);
  absl::Notification closed;
  std::atomic<bool> stop{false};
  std::thread producer;
  auto flood = Server::Create(options);
  ASSERT_TRUE(flood.ok());
  (*flood)->Route("GET", "/flood", [&](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->OnClose([&] { closed.Notify(); });
    producer = std::thread([w, &stop] {
      w->StartStream(200, "text/event-stream");
      const std::string block(16 << 10, 'x');
      while (!stop && w->Write(block)) absl::SleepFor(absl::Milliseconds(1));
    });
  });
  ASSERT_TRUE((*flood)->Start().ok());
  ClientContext ctx = TrustingClient();
  std::string error;
  auto client = TestClient::ConnectTls((*flood)->port(), ctx.get(), "localhost", &error);
  ASSERT_NE(client, nullptr) << error;
  ASSERT_TRUE(client->Send(Get("/flood")));
  // The client reads nothing more: the server must give up on it.
  EXPECT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(20)));
  stop = true;
  if (producer.joinable()) producer.join();
  (*flood)->Shutdown(absl::Seconds(1));
  EXPECT_EQ((*flood)->open_connections(), 0);
}

TEST_F(HttpTlsTest, StalledWriteIsCutOffAtTheWriteTimeoutOverTls) {
  ServerOptions options = TlsServerOptions();
  options.max_queued_write_bytes = 64 << 20;  // not the bound that acts here
  options.write_timeout = absl::Milliseconds(500);
  absl::Notification closed;
  auto server = Server::Create(options);
  ASSERT_TRUE(server.ok());
  (*server)->Route("GET", "/big", [&](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->OnClose([&] { closed.Notify(); });
    w->Respond(200, "application/octet-stream", std::string(32 << 20, 'x'));
  });
  ASSERT_TRUE((*server)->Start().ok());
  ClientContext ctx = TrustingClient();
  std::string error;
  auto client = TestClient::ConnectTls((*server)->port(), ctx.get(), "localhost", &error);
  ASSERT_NE(client, nullptr) << error;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(client->Send(Get("/big")));
  // The client reads nothing: the socket fills and the write stops making progress.
  EXPECT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  (*server)->Shutdown(absl::Seconds(1));
}

TEST_F(HttpTlsTest, PerClientCapHoldsOverTls) {
  ServerOptions options = TlsServerOptions();
  options.max_connections_per_client = 2;
  StartServer(options);
  ClientContext ctx = TrustingClient();
  std::string error;
  auto first = TestClient::ConnectTls(server_->port(), ctx.get(), "localhost", &error);
  auto second = TestClient::ConnectTls(server_->port(), ctx.get(), "localhost", &error);
  ASSERT_NE(first, nullptr) << error;
  ASSERT_NE(second, nullptr) << error;
  // The third from the same address is closed before any handshake.
  EXPECT_EQ(TestClient::ConnectTls(server_->port(), ctx.get(), "localhost", &error, 5), nullptr);
  first.reset();
  ASSERT_TRUE(AwaitConnections(1, absl::Seconds(5)));
  auto again = TestClient::ConnectTls(server_->port(), ctx.get(), "localhost", &error);
  ASSERT_NE(again, nullptr) << error;
  ASSERT_TRUE(again->Send(Get("/hello")));
  auto response = again->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST_F(HttpTlsTest, RotatedCertificateServesNewConnections) {
  ServerOptions options = TlsServerOptions();
  options.tls.reload_interval = absl::ZeroDuration();  // check on every connection
  StartServer(options);
  ClientContext ctx = TrustingClient();
  std::string error;
  auto before = TestClient::ConnectTls(server_->port(), ctx.get(), "localhost", &error);
  ASSERT_NE(before, nullptr) << error;
  EXPECT_EQ(PeerCommonName(before->ssl()), "server-one");

  IssueServerCert("server-two");
  auto after = TestClient::ConnectTls(server_->port(), ctx.get(), "localhost", &error);
  ASSERT_NE(after, nullptr) << error;
  EXPECT_EQ(PeerCommonName(after->ssl()), "server-two");
  EXPECT_NE(server_->tls_description().find("CN=server-two"), std::string::npos);

  // The connection made before the rotation keeps working.
  ASSERT_TRUE(before->Send(Get("/hello")));
  auto response = before->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);

  // A certificate whose key is not there yet is ignored: the previous one stays in use.
  WriteFile(cert_file_, Issue("server-three").cert_pem);
  auto during = TestClient::ConnectTls(server_->port(), ctx.get(), "localhost", &error);
  ASSERT_NE(during, nullptr) << error;
  EXPECT_EQ(PeerCommonName(during->ssl()), "server-two");
}

TEST_F(HttpTlsTest, BadFilesFailCreateWithTheReason) {
  ServerOptions options = TlsServerOptions();
  options.tls.cert_file = (dir_ / "missing.crt").string();
  auto missing = Server::Create(options);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--http-tls-cert"), std::string::npos);
  EXPECT_NE(missing.status().message().find("missing.crt"), std::string::npos);

  options = TlsServerOptions();
  options.tls.key_file = "";
  EXPECT_FALSE(Server::Create(options).ok());

  // A key of another certificate.
  const std::string other_key = (dir_ / "other.key").string();
  WriteFile(other_key, Issue("other").key_pem);
  options = TlsServerOptions();
  options.tls.key_file = other_key;
  auto mismatch = Server::Create(options);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("does not belong"), std::string::npos)
      << mismatch.status();

  // Not PEM at all.
  const std::string junk = (dir_ / "junk.crt").string();
  WriteFile(junk, "not a certificate\n");
  options = TlsServerOptions();
  options.tls.cert_file = junk;
  auto bad = Server::Create(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(bad.status().message()).find('\n'), std::string::npos);

  // An expired certificate.
  proto::LeafSpec spec;
  spec.validity = -absl::Hours(1);
  auto expired = proto::IssueLeafCertificate(ca_, spec);
  ASSERT_TRUE(expired.ok());
  WriteFile(cert_file_, expired->cert_pem);
  WriteFile(key_file_, expired->key_pem);
  auto stale = Server::Create(TlsServerOptions());
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("expired"), std::string::npos) << stale.status();
}

}  // namespace
}  // namespace strata::http
