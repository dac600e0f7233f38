// KvStoreServer (kvstore_server.h): the daemon's gRPC server, HTTP metrics and registration.
#include <unistd.h>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/http/server.h"
#include "strata/kvstore/eviction_policy.h"
#include "strata/proto/protocol.h"
#include "strata/proto/registry_client.h"
#include "server_internal.h"

namespace strata::kvstore {
namespace {

// Different on every start, even for the same process id and clock reading.
uint64_t NewInstanceId() {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  const uint64_t id = r ^ static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^
                      (static_cast<uint64_t>(::getpid()) << 48);
  return id == 0 ? 1 : id;  // 0 never names an instance
}

class KvStoreServerImpl final : public KvStoreServer {
 public:
  explicit KvStoreServerImpl(KvStoreServerOptions options)
      : options_(std::move(options)), instance_(NewInstanceId()) {}
  ~KvStoreServerImpl() override { Shutdown(); }

  absl::Status Init() {
    STRATA_ASSIGN_OR_RETURN(agent_, transport::Agent::Create({.name = options_.id}));
    pool_ = std::make_unique<server::Pool>(options_, agent_.get(), &events_);
    rpcs_ = &metrics_.CounterOrDie("strata_kvstore_rpcs_total",
                                   "KvStore RPCs served, by method and status code",
                                   {"method", "code"});
    service_ = server::MakeService(options_, instance_, pool_.get(), rpcs_);
    AddTierMetrics();
    STRATA_RETURN_IF_ERROR(pool_->Reserve());
    if (options_.block_bytes != 0) {
      STRATA_RETURN_IF_ERROR(pool_->Ensure(options_.block_bytes).status());
    }
    return absl::OkStatus();
  }

  absl::Status Start() override {
    grpc::ServerBuilder builder;
    proto::ConfigureServer(builder);
    builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.port),
                             proto::ClusterServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    grpc_ = builder.BuildAndStart();
    if (grpc_ == nullptr || port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen for gRPC on ", options_.host, ":", options_.port));
    }
    if (options_.http_port >= 0) STRATA_RETURN_IF_ERROR(StartHttp());
    if (!options_.router_address.empty() || !options_.router_service.empty()) {
      STRATA_RETURN_IF_ERROR(StartRegistry());
    }
    return absl::OkStatus();
  }

  void Shutdown() override {
    if (stopped_.exchange(true)) return;
    if (registry_) registry_->Stop();
    if (http_) http_->Shutdown(absl::Milliseconds(200));
    if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    callbacks_.clear();
    pool_.reset();  // the pool lives in the agent's memory: free it first
    agent_.reset();
  }

  int port() const override { return port_; }
  int http_port() const override { return http_ ? http_->port() : 0; }
  std::string address() const override { return absl::StrCat(options_.host, ":", port_); }
  bool registered() const override { return registry_ != nullptr && registry_->registered(); }

  absl::Status CorruptBlockForTest(BlockHash hash) override {
    HostTier* tier = pool_ ? pool_->tier() : nullptr;
    if (tier == nullptr) return absl::FailedPreconditionError("no pool yet");
    STRATA_ASSIGN_OR_RETURN(HostTier::Lease lease, tier->Acquire(hash));
    auto* byte = static_cast<unsigned char*>(tier->pool_base()) + lease.offset;
    *byte ^= 0x5a;
    tier->Release(lease.id);
    return absl::OkStatus();
  }

 private:
  absl::Status StartHttp() {
    http::ServerOptions ho;
    ho.host = options_.host;
    ho.port = options_.http_port;
    ho.threads = 1;
    STRATA_ASSIGN_OR_RETURN(http_, http::Server::Create(ho));
    http_->Route("GET", "/metrics", [this](const http::Request&, auto w) {
      w->Respond(200, std::string(metrics::kContentType), metrics_.Serialize());
    });
    http_->Route("GET", "/health", [](const http::Request&, auto w) {
      w->Respond(200, "text/plain", "ok\n");
    });
    return http_->Start();
  }

  absl::Status StartRegistry() {
    STRATA_ASSIGN_OR_RETURN(
        proto::RouterTargets routers,
        proto::RouterTargets::Parse(options_.router_address, options_.router_service));
    v1::WorkerInfo info;
    info.set_id(options_.id);
    info.set_role(v1::ROLE_KVSTORE);
    info.set_grpc_address(address());
    if (http_) info.set_http_address(absl::StrCat(options_.host, ":", http_->port()));
    info.set_model_identity(options_.model_identity);
    proto::RegistryHooks hooks;
    hooks.take_events = [this] { return events_.Take(); };
    hooks.resync = [this] { events_.Resync(); };
    registry_ = std::make_unique<proto::RegistryClient>(std::move(routers), std::move(info),
                                                        std::move(hooks),
                                                        options_.heartbeat_interval);
    registry_->Start();
    return absl::OkStatus();
  }

  // strata_kvstore_*{tier="remote"}: read from the pool at scrape time (0 before it exists).
  void AddTierMetrics();
  template <typename Family>
  void AddCallback(Family& family, std::function<double(const HostTier&)> read) {
    callbacks_.push_back(family.AddCallback({"remote"}, [this, read = std::move(read)] {
      HostTier* t = pool_ ? pool_->tier() : nullptr;
      return t == nullptr ? 0.0 : read(*t);
    }));
  }

  KvStoreServerOptions options_;
  const uint64_t instance_;
  metrics::Registry metrics_;
  metrics::CounterFamily* rpcs_ = nullptr;
  std::vector<metrics::CallbackHandle> callbacks_;
  server::EventLog events_;
  std::unique_ptr<transport::Agent> agent_;
  std::unique_ptr<server::Pool> pool_;
  std::unique_ptr<v1::KvStore::Service> service_;
  std::unique_ptr<grpc::Server> grpc_;
  int port_ = 0;
  std::unique_ptr<http::Server> http_;
  std::unique_ptr<proto::RegistryClient> registry_;
  std::atomic<bool> stopped_{false};
};

void KvStoreServerImpl::AddTierMetrics() {
  const std::vector<std::string> tier = {"tier"};
  auto gauge = [&](const char* name, const char* help, int64_t (*read)(const HostTier&)) {
    AddCallback(metrics_.GaugeOrDie(name, help, tier),
                [read](const HostTier& t) { return static_cast<double>(read(t)); });
  };
  auto counter = [&](const char* name, const char* help, int64_t TierStats::*field) {
    AddCallback(metrics_.CounterOrDie(name, help, tier),
                [field](const HostTier& t) { return static_cast<double>(t.stats().*field); });
  };
  gauge("strata_kvstore_usage_blocks", "Blocks held", [](const HostTier& t) { return t.usage().blocks; });
  gauge("strata_kvstore_usage_bytes", "Value bytes held",
        [](const HostTier& t) { return t.usage().bytes; });
  gauge("strata_kvstore_capacity_bytes", "Configured capacity",
        [](const HostTier& t) { return t.usage().capacity_bytes; });
  counter("strata_kvstore_hits_total", "Reads that found a block", &TierStats::hits);
  counter("strata_kvstore_misses_total", "Reads that found nothing", &TierStats::misses);
  counter("strata_kvstore_puts_total", "Blocks stored", &TierStats::puts);
  counter("strata_kvstore_bytes_in_total", "Value bytes written", &TierStats::bytes_in);
  counter("strata_kvstore_bytes_out_total", "Value bytes read", &TierStats::bytes_out);
  counter("strata_kvstore_evictions_total", "Blocks evicted to make room", &TierStats::evictions);
  counter("strata_kvstore_checksum_failures_total", "Stored copies found corrupt",
          &TierStats::checksum_failures);
  counter("strata_kvstore_rejected_total", "Puts refused", &TierStats::rejected);
  AddCallback(metrics_.CounterOrDie("strata_kvstore_expired_leases_total",
                                    "Leases and reservations that timed out", tier),
              [](const HostTier& t) { return static_cast<double>(t.expired_leases()); });
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvStoreServer>> KvStoreServer::Create(
    const KvStoreServerOptions& options) {
  if (options.capacity_bytes <= 0) {
    return absl::InvalidArgumentError("the kvstore needs a capacity (capacity_bytes > 0)");
  }
  if (options.block_bytes != 0 && options.capacity_bytes < int64_t(options.block_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("capacity ", options.capacity_bytes,
                                                   " bytes holds no block of ",
                                                   options.block_bytes, " bytes"));
  }
  // An unknown policy is the caller's fault: say so now, not at the first Hello.
  STRATA_RETURN_IF_ERROR(CreateEvictionPolicy(options.policy, 1).status());
  auto s = std::make_unique<KvStoreServerImpl>(options);
  STRATA_RETURN_IF_ERROR(s->Init());
  return s;
}

}  // namespace strata::kvstore
