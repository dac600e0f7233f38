// Cluster mTLS (proto/cluster_tls.h) at the router's Registry and between cluster services: a
// worker with a certificate of the cluster CA registers; a plaintext peer, a TLS peer without a
// client certificate and one whose certificate comes from another CA (a forged registration)
// are refused by the handshake; a certificate naming another role cannot register as a worker,
// nor another certificate take over, beat for or deregister a registered worker id;
// a worker refuses a kvstore impostor without a cluster certificate; certificate files replaced
// on disk are used by new connections without a restart. Certificates are made at test time
// (proto/certificates.h); real gRPC servers over real WorkerPools, in process.
#include "strata/proto/cluster_tls.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "gtest/gtest.h"
#include "strata/proto/certificates.h"
#include "strata/proto/kvstore.grpc.pb.h"
#include "strata/proto/protocol.h"
#include "strata/proto/registry_client.h"
#include "strata/router/registry_service.h"
#include "strata/router/worker_pool.h"

namespace strata::router {
namespace {

namespace gx = grpc::experimental;
using proto::ClusterCredentials;
using proto::PemKeyPair;
using proto::TlsFiles;

template <typename F>
bool WaitFor(F done, absl::Duration limit = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return done();
}

PemKeyPair Ca(const std::string& name) {
  auto ca = proto::MakeCertificateAuthority(name, absl::Hours(1));
  EXPECT_TRUE(ca.ok()) << ca.status();
  return *ca;
}

PemKeyPair Leaf(const PemKeyPair& ca, const std::string& cn, std::vector<std::string> uris = {}) {
  proto::LeafSpec spec;
  spec.common_name = cn;
  spec.uris = std::move(uris);
  spec.validity = absl::Hours(1);
  auto leaf = proto::IssueLeafCertificate(ca, spec);
  EXPECT_TRUE(leaf.ok()) << leaf.status();
  return *leaf;
}

// Files in a fresh directory; replaced atomically (write, then rename) as a rotation should be.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            absl::StrCat("strata_tls_test_", getpid(), "_", counter_++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string final_path = (path_ / name).string();
    const std::string tmp = final_path + ".tmp";
    EXPECT_TRUE(proto::WritePrivateFile(tmp, text, 0600).ok());
    std::filesystem::rename(tmp, final_path);
    return final_path;
  }
  TlsFiles WriteIdentity(const std::string& prefix, const std::string& ca_pem,
                         const PemKeyPair& leaf) {
    return TlsFiles{Write(prefix + "ca.crt", ca_pem), Write(prefix + "tls.crt", leaf.cert_pem),
                    Write(prefix + "tls.key", leaf.key_pem)};
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

std::shared_ptr<const ClusterCredentials> Credentials(const TlsFiles& files,
                                                      absl::Duration refresh = absl::Seconds(30)) {
  auto c = ClusterCredentials::FromFiles(files, refresh);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ClusterCredentials::Plaintext();
}

// A channel on a connection of its own (no subchannel shared with earlier channels), so each
// one makes a fresh TLS handshake.
std::shared_ptr<grpc::Channel> FreshChannel(const std::string& address,
                                            std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, std::move(creds), args);
}

// TLS that trusts `ca_pem` for the server but presents no client certificate.
std::shared_ptr<grpc::ChannelCredentials> NoClientCertificate(const std::string& ca_pem) {
  auto provider = std::make_shared<gx::StaticDataCertificateProvider>(ca_pem);
  gx::TlsChannelCredentialsOptions o;
  o.set_certificate_provider(provider);
  o.watch_root_certs();
  o.set_certificate_verifier(std::make_shared<gx::NoOpCertificateVerifier>());
  o.set_check_call_host(false);
  return gx::TlsCredentials(o);
}

// TLS presenting `leaf`, trusting `ca_pem` for the server.
std::shared_ptr<grpc::ChannelCredentials> ClientCertificate(const std::string& ca_pem,
                                                            const PemKeyPair& leaf) {
  auto provider = std::make_shared<gx::StaticDataCertificateProvider>(
      ca_pem, std::vector<gx::IdentityKeyCertPair>{{leaf.key_pem, leaf.cert_pem}});
  gx::TlsChannelCredentialsOptions o;
  o.set_certificate_provider(provider);
  o.watch_root_certs();
  o.watch_identity_key_cert_pairs();
  o.set_certificate_verifier(std::make_shared<gx::NoOpCertificateVerifier>());
  o.set_check_call_host(false);
  return gx::TlsCredentials(o);
}

// The router's Registry over a WorkerPool, served with `creds`.
class Registry {
 public:
  explicit Registry(std::shared_ptr<grpc::ServerCredentials> creds)
      : pool_(absl::Seconds(30)), service_(&pool_, nullptr) {
    grpc::ServerBuilder builder;
    proto::ConfigureServer(builder);
    builder.AddListeningPort("127.0.0.1:0", std::move(creds), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~Registry() {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }
  bool started() const { return server_ != nullptr && port_ > 0; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  bool Knows(const std::string& id) {
    for (const WorkerView& w : pool_.Snapshot()) {
      if (w.id == id) return true;
    }
    return false;
  }

 private:
  WorkerPool pool_;
  RegistryService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

v1::WorkerInfo Info(const std::string& id, v1::Role role) {
  v1::WorkerInfo info;
  info.set_id(id);
  info.set_role(role);
  info.set_grpc_address("127.0.0.1:1");
  info.set_block_size(16);
  return info;
}

grpc::Status Register(const std::shared_ptr<grpc::Channel>& channel, const v1::WorkerInfo& info) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::RegisterRequest req;
  req.set_protocol_version(proto::kProtocolVersion);
  *req.mutable_worker() = info;
  v1::RegisterResponse resp;
  return v1::Registry::NewStub(channel)->Register(&ctx, req, &resp);
}

class ClusterTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_ = Ca("strata cluster CA");
    router_files_ = dir_.WriteIdentity("router-", ca_.cert_pem,
                                       Leaf(ca_, "router", {"spiffe://strata/router"}));
    worker_files_ = dir_.WriteIdentity("worker-", ca_.cert_pem,
                                       Leaf(ca_, "worker", {"spiffe://strata/worker"}));
    kvstore_files_ = dir_.WriteIdentity("kvstore-", ca_.cert_pem,
                                        Leaf(ca_, "kvstore", {"spiffe://strata/kvstore"}));
  }
  void TearDown() override { proto::SetClusterCredentials(nullptr); }

  TempDir dir_;
  PemKeyPair ca_;
  TlsFiles router_files_, worker_files_, kvstore_files_;
};

TEST_F(ClusterTlsTest, CheckedFilesAndReasons) {
  PemKeyPair other = Ca("another CA");
  PemKeyPair foreign = Leaf(other, "forger");
  auto good =
      proto::CheckCertificateChain(ca_.cert_pem, Leaf(ca_, "w").cert_pem, Leaf(ca_, "w").key_pem);
  EXPECT_FALSE(good.ok());  // the key of another leaf
  EXPECT_NE(std::string(good.status().message()).find("does not belong"), std::string::npos);
  PemKeyPair w = Leaf(ca_, "w", {"spiffe://strata/worker"});
  auto ok = proto::CheckCertificateChain(ca_.cert_pem, w.cert_pem, w.key_pem);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_NE(ok->subject.find("CN=w"), std::string::npos);
  EXPECT_EQ(ok->uris, std::vector<std::string>{"spiffe://strata/worker"});
  auto forged = proto::CheckCertificateChain(ca_.cert_pem, foreign.cert_pem, foreign.key_pem);
  ASSERT_FALSE(forged.ok());
  EXPECT_NE(std::string(forged.status().message()).find("does not verify"), std::string::npos);
  proto::LeafSpec expired_spec;
  expired_spec.validity = -absl::Hours(1);
  auto expired = proto::IssueLeafCertificate(ca_, expired_spec);
  ASSERT_TRUE(expired.ok());
  auto checked = proto::CheckCertificateChain(ca_.cert_pem, expired->cert_pem, expired->key_pem);
  ASSERT_FALSE(checked.ok());
  EXPECT_NE(std::string(checked.status().message()).find("expired"), std::string::npos);

  EXPECT_FALSE((TlsFiles{"a", "", ""}.CheckComplete().ok()));
  EXPECT_TRUE(TlsFiles{}.CheckComplete().ok());
  auto missing =
      ClusterCredentials::FromFiles({"/nonexistent/ca", worker_files_.cert, worker_files_.key});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("--tls-ca /nonexistent/ca"),
            std::string::npos);
  auto wrong_ca = ClusterCredentials::FromFiles(
      {dir_.Write("other-ca.crt", other.cert_pem), worker_files_.cert, worker_files_.key});
  EXPECT_FALSE(wrong_ca.ok());
}

TEST_F(ClusterTlsTest, RegistryAcceptsOnlyCertifiedPeers) {
  Registry registry(Credentials(router_files_)->server());
  ASSERT_TRUE(registry.started());
  const std::string at = registry.address();

  // A worker with a certificate of the cluster CA registers, and the Registry saw its identity.
  EXPECT_TRUE(Register(FreshChannel(at, Credentials(worker_files_)->channel()),
                       Info("decode-0", v1::ROLE_DECODE))
                  .ok());
  EXPECT_TRUE(registry.Knows("decode-0"));

  // Plaintext: the handshake fails, nothing registers.
  grpc::Status plain = Register(FreshChannel(at, grpc::InsecureChannelCredentials()),
                                Info("plain", v1::ROLE_DECODE));
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // TLS without a client certificate.
  grpc::Status no_cert =
      Register(FreshChannel(at, NoClientCertificate(ca_.cert_pem)), Info("anon", v1::ROLE_DECODE));
  EXPECT_EQ(no_cert.error_code(), grpc::StatusCode::UNAVAILABLE) << no_cert.error_message();
  // A forged registration: a certificate from another CA, taking over decode-0's id.
  PemKeyPair other = Ca("attacker CA");
  grpc::Status forged =
      Register(FreshChannel(at, ClientCertificate(ca_.cert_pem, Leaf(other, "decode-0"))),
               Info("decode-0", v1::ROLE_DECODE));
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::UNAVAILABLE) << forged.error_message();
  // A kvstore impostor without a certificate.
  grpc::Status impostor = Register(FreshChannel(at, NoClientCertificate(ca_.cert_pem)),
                                   Info("kvstore-x", v1::ROLE_KVSTORE));
  EXPECT_EQ(impostor.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(registry.Knows("plain"));
  EXPECT_FALSE(registry.Knows("anon"));
  EXPECT_FALSE(registry.Knows("kvstore-x"));

  // A certificate naming a role registers only as that role.
  auto kv = Credentials(kvstore_files_);
  grpc::Status as_worker =
      Register(FreshChannel(at, kv->channel()), Info("prefill-9", v1::ROLE_PREFILL));
  EXPECT_EQ(as_worker.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(as_worker.error_message().find("kvstore"), std::string::npos);
  EXPECT_FALSE(registry.Knows("prefill-9"));
  EXPECT_TRUE(Register(FreshChannel(at, kv->channel()), Info("kvstore-0", v1::ROLE_KVSTORE)).ok());
  EXPECT_TRUE(registry.Knows("kvstore-0"));
}

// A worker id is bound to the certificate that registered it: another cluster member cannot
// register it again, heartbeat for it or deregister it until it is gone.
TEST_F(ClusterTlsTest, WorkerIdIsBoundToItsCertificate) {
  Registry registry(Credentials(router_files_)->server());
  ASSERT_TRUE(registry.started());
  const std::string at = registry.address();
  auto a = FreshChannel(at, ClientCertificate(ca_.cert_pem, Leaf(ca_, "pod-a")));
  auto b = FreshChannel(at, ClientCertificate(ca_.cert_pem, Leaf(ca_, "pod-b")));
  ASSERT_TRUE(Register(a, Info("decode-0", v1::ROLE_DECODE)).ok());

  grpc::Status takeover = Register(b, Info("decode-0", v1::ROLE_DECODE));
  EXPECT_EQ(takeover.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(takeover.error_message().find("CN=pod-a"), std::string::npos);

  auto beat = [&](const std::shared_ptr<grpc::Channel>& channel) {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    req.set_protocol_version(proto::kProtocolVersion);
    req.set_worker_id("decode-0");
    v1::HeartbeatResponse resp;
    return v1::Registry::NewStub(channel)->Heartbeat(&ctx, req, &resp);
  };
  auto deregister = [&](const std::shared_ptr<grpc::Channel>& channel) {
    grpc::ClientContext ctx;
    v1::DeregisterRequest req;
    req.set_protocol_version(proto::kProtocolVersion);
    req.set_worker_id("decode-0");
    v1::DeregisterResponse resp;
    return v1::Registry::NewStub(channel)->Deregister(&ctx, req, &resp);
  };
  EXPECT_EQ(beat(b).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(deregister(b).ok());  // answered, but not done
  EXPECT_TRUE(registry.Knows("decode-0"));

  EXPECT_TRUE(deregister(a).ok());
  EXPECT_FALSE(registry.Knows("decode-0"));
  EXPECT_TRUE(Register(b, Info("decode-0", v1::ROLE_DECODE)).ok());
  EXPECT_TRUE(registry.Knows("decode-0"));
}

TEST_F(ClusterTlsTest, RegistryClientUsesTheProcessCredentials) {
  Registry tls_registry(Credentials(router_files_)->server());
  Registry plain_registry(grpc::InsecureServerCredentials());
  ASSERT_TRUE(tls_registry.started() && plain_registry.started());
  auto targets = proto::RouterTargets::Parse(
      absl::StrCat(tls_registry.address(), ",", plain_registry.address()), "");
  ASSERT_TRUE(targets.ok());

  // With the cluster's certificate, the worker registers with the mTLS router and not with the
  // plaintext one; without, the other way round.
  proto::SetClusterCredentials(Credentials(worker_files_));
  {
    proto::RegistryClient client(*targets, Info("decode-1", v1::ROLE_DECODE), {},
                                 absl::Milliseconds(100));
    client.Start();
    EXPECT_TRUE(WaitFor([&] { return tls_registry.Knows("decode-1"); }));
    absl::SleepFor(absl::Milliseconds(500));
    EXPECT_FALSE(plain_registry.Knows("decode-1"));
    EXPECT_EQ(client.registered_routers(), 1);
  }
  proto::SetClusterCredentials(nullptr);
  {
    proto::RegistryClient client(*targets, Info("decode-2", v1::ROLE_DECODE), {},
                                 absl::Milliseconds(100));
    client.Start();
    EXPECT_TRUE(WaitFor([&] { return plain_registry.Knows("decode-2"); }));
    absl::SleepFor(absl::Milliseconds(500));
    EXPECT_FALSE(tls_registry.Knows("decode-2"));
  }
}

// A worker's channel to a KvStore service: an impostor without a cluster certificate (plaintext,
// or a certificate of another CA) is refused in the handshake; the real daemon's passes (its
// KvStore answers; this bare service answers UNIMPLEMENTED for every method).
TEST_F(ClusterTlsTest, WorkerRefusesKvstoreImpostor) {
  auto worker = Credentials(worker_files_);
  auto call = [&](const std::string& address) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::KvStatsRequest req;
    v1::KvStatsResponse resp;
    return v1::KvStore::NewStub(FreshChannel(address, worker->channel()))->Stats(&ctx, req, &resp);
  };
  auto serve = [](std::shared_ptr<grpc::ServerCredentials> creds, v1::KvStore::Service* service,
                  int* port) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", std::move(creds), port);
    b.RegisterService(service);
    return b.BuildAndStart();
  };
  v1::KvStore::Service service;
  int real_port = 0, plain_port = 0, forged_port = 0;
  auto real = serve(Credentials(kvstore_files_)->server(), &service, &real_port);
  auto plain = serve(grpc::InsecureServerCredentials(), &service, &plain_port);
  PemKeyPair other = Ca("attacker CA");
  TlsFiles forged_files = dir_.WriteIdentity("forged-", other.cert_pem, Leaf(other, "kvstore"));
  auto forged = serve(Credentials(forged_files)->server(), &service, &forged_port);
  ASSERT_TRUE(real && plain && forged);
  EXPECT_EQ(call(absl::StrCat("127.0.0.1:", real_port)).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(call(absl::StrCat("127.0.0.1:", plain_port)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(call(absl::StrCat("127.0.0.1:", forged_port)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  for (auto* s : {real.get(), plain.get(), forged.get()}) {
    s->Shutdown(absl::ToChronoTime(absl::Now()));
  }
}

// The subject CN of the server's certificate on a fresh connection ("" when the call fails).
// The call is a heartbeat for an unknown worker: answered, and binding no worker id.
std::string ServerCn(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::HeartbeatRequest req;
  req.set_protocol_version(proto::kProtocolVersion);
  req.set_worker_id("probe");
  v1::HeartbeatResponse resp;
  auto stub = v1::Registry::NewStub(FreshChannel(address, std::move(creds)));
  if (!stub->Heartbeat(&ctx, req, &resp).ok()) return "";
  auto values = ctx.auth_context()->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  return values.empty() ? "" : std::string(values[0].data(), values[0].size());
}

// Files replaced on disk are used for new handshakes within the refresh interval, without a
// restart: a new server certificate, then a new CA (with the old one kept in the bundle while
// peers move over).
TEST_F(ClusterTlsTest, RotatedFilesAreUsedWithoutRestart) {
  Registry registry(Credentials(router_files_, absl::Seconds(1))->server());
  ASSERT_TRUE(registry.started());
  const std::string at = registry.address();
  auto worker = Credentials(worker_files_)->channel();
  EXPECT_EQ(ServerCn(at, worker), "router");

  PemKeyPair next = Leaf(ca_, "router-rotated", {"spiffe://strata/router"});
  dir_.Write("router-tls.key", next.key_pem);
  dir_.Write("router-tls.crt", next.cert_pem);
  EXPECT_TRUE(WaitFor([&] { return ServerCn(at, worker) == "router-rotated"; }));

  // A new CA: until the router trusts it, a worker certified by it is refused.
  PemKeyPair new_ca = Ca("strata cluster CA 2");
  PemKeyPair moved = Leaf(new_ca, "worker-new-ca");
  auto moved_creds = ClientCertificate(ca_.cert_pem, moved);
  EXPECT_EQ(ServerCn(at, moved_creds), "");
  dir_.Write("router-ca.crt", ca_.cert_pem + new_ca.cert_pem);
  EXPECT_TRUE(WaitFor([&] { return ServerCn(at, moved_creds) == "router-rotated"; }));
  EXPECT_EQ(ServerCn(at, worker), "router-rotated");  // the old CA's peers still pass
}

}  // namespace
}  // namespace strata::router
