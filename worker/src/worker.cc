#include "strata/worker/worker.h"

#include <atomic>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "engine_watchdog.h"
#include "kv_tiering.h"
#include "local_backend.h"
#include "nlohmann/json.hpp"
#include "registry_client.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/decode/decode_driver.h"
#include "strata/decode/decode_service.h"
#include "strata/engine/engine_loop.h"
#include "strata/http/server.h"
#include "strata/openai/frontend.h"
#include "strata/prefill/prefill_driver.h"
#include "strata/text/chat_template.h"
#include "strata/transport/agent.h"
#include "strata/worker/plugin_device_memory.h"
#include "worker_metrics.h"
#include "worker_service.h"

namespace strata::worker {
namespace {

class WorkerImpl final : public Worker {
 public:
  explicit WorkerImpl(WorkerOptions options) : options_(std::move(options)) {}
  ~WorkerImpl() override {
    Shutdown(absl::ZeroDuration());
    // The agent maps peers' device memory through the engine's backend: it goes first. (A
    // host pool is the agent's own memory, used by the engine until the engine is gone.)
    if (device_memory_ != nullptr) {
      metrics_.reset();
      agent_.reset();
      device_memory_.reset();
    }
  }

  absl::Status Init() {
    STRATA_ASSIGN_OR_RETURN(agent_, transport::Agent::Create({.name = options_.id}));
    // A host-memory KV pool comes from the transport, so prefill workers' writes into it are
    // plain copies into shared memory rather than UCX's software RMA emulation.
    EngineOptions eo = options_.engine;
    bool pool_registered = false;
    eo.runner.host_kv_pool = [this, &pool_registered](size_t bytes) -> absl::StatusOr<void*> {
      STRATA_ASSIGN_OR_RETURN(transport::AllocatedRegion r, agent_->AllocateMemory(bytes));
      kv_region_ = r.region;
      pool_registered = true;
      return r.addr;
    };
    auto engine = Engine::Create(options_.model_dir, eo);
    if (!engine.ok()) return engine.status();
    Engine& e = **engine;
    const int64_t max_model_len = e.max_model_len();
    const int vocab = e.config().vocab_size;
    model_identity_ = e.model_identity();
    {
      const strata_backend_info& info = e.runner().backend().info();
      device_ = absl::StrCat(info.name != nullptr ? info.name : "?", ":",
                             info.device_name != nullptr ? info.device_name : "?");
    }
    const size_t block_bytes = e.runner().kv_block_bytes();
    const strata_kv_cache& kv = e.runner().kv_cache();
    kv_layout_.set_dtype(DtypeName(kv.dtype));
    kv_layout_.set_block_size(kv.block_size);
    kv_layout_.set_num_layers(kv.num_layers);
    kv_layout_.set_num_kv_heads(kv.num_kv_heads);
    kv_layout_.set_head_dim(kv.head_dim);
    kv_layout_.set_memory(pool_registered ? "host" : "device");
    num_kv_blocks_ = kv.num_blocks;
    loop_ = std::make_unique<EngineLoop>(std::move(*engine));
    if (options_.engine_stall_for_testing.marker_token >= 0) {
      STRATA_LOG(Warning) << "test fault injection on: the engine sleeps "
                          << absl::FormatDuration(options_.engine_stall_for_testing.sleep)
                          << " in a step of each request whose prompt has token "
                          << options_.engine_stall_for_testing.marker_token;
      loop_->SetStallForTesting(options_.engine_stall_for_testing);
    }
    watchdog_ = std::make_unique<EngineWatchdog>(loop_.get(), options_.engine_stall_timeout);
    const v1::Role role = options_.role;
    if (pool_registered) {
      handoff_path_ = "ucx";
      return FinishInit(role, max_model_len, vocab, true, block_bytes);
    }
    auto region = RegisterDevicePool(e, block_bytes);
    if (!region.ok()) {
      // A mixed worker still serves on its own; the disaggregated roles cannot work without it.
      if (role != v1::ROLE_MIXED) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the KV pool cannot be registered with the transport: ", region.status().message()));
      }
      STRATA_LOG(Warning) << "KV pool not registered with the transport ("
                          << region.status().message() << "); serving without KV handoff";
      handoff_path_ = "none";
      return FinishInit(role, max_model_len, vocab, /*handoff=*/false, block_bytes);
    }
    kv_region_ = *region;
    handoff_path_ = options_.kv_device_staged ? "staged" : "ipc";
    return FinishInit(role, max_model_len, vocab, /*handoff=*/true, block_bytes);
  }

  // A device KV pool: the agent is made again with the plugin's device memory services, and the
  // pool is registered as device memory that peers on this host map (the ipc path) or write
  // through pinned host memory (the staged path: other hosts, or chosen by configuration).
  absl::StatusOr<uint64_t> RegisterDevicePool(Engine& e, size_t block_bytes) {
    const strata_kv_cache& kv = e.runner().kv_cache();
    STRATA_ASSIGN_OR_RETURN(device_memory_, PluginDeviceMemory::Create(&e.runner().backend()));
    agent_.reset();
    transport::AgentOptions ao;
    ao.name = options_.id;
    ao.device = device_memory_.get();
    if (options_.kv_device_staged) ao.device_path = transport::AgentOptions::DevicePath::kStaged;
    STRATA_ASSIGN_OR_RETURN(agent_, transport::Agent::Create(ao));
    STRATA_ASSIGN_OR_RETURN(
        uint64_t region, agent_->RegisterMemory(kv.data, block_bytes * size_t(kv.num_blocks),
                                                transport::MemoryKind::kDevice));
    STRATA_LOG(Info) << "KV handoff: device pool of " << kv.num_blocks << " blocks, "
                     << agent_->DevicePaths() << " (" << device_memory_->Describe() << ")";
    return region;
  }

  absl::Status FinishInit(v1::Role role, int64_t max_model_len, int vocab, bool handoff,
                          size_t block_bytes) {
    if (handoff && (role == v1::ROLE_PREFILL || role == v1::ROLE_MIXED)) {
      prefill_ = prefill::PrefillDriver::Create(loop_.get(), agent_.get(), kv_region_, block_bytes,
                                                options_.engine.runner.block_size, kv_layout_);
    }
    if (handoff && (role == v1::ROLE_DECODE || role == v1::ROLE_MIXED)) {
      decode::DecodeDriverOptions d;
      d.model_identity = model_identity_;
      d.block_size = options_.engine.runner.block_size;
      STRATA_ASSIGN_OR_RETURN(
          d.self,
          decode::DescribeKvDestination(*agent_, options_.id, kv_region_, block_bytes, kv_layout_));
      d.on_transfer = [this](double seconds, uint64_t bytes) {
        metrics_->ObserveTransfer(seconds, bytes);
      };
      decode_ = decode::DecodeDriver::Create(loop_.get(), std::move(d));
    }
    if (options_.detached_request_grace > absl::ZeroDuration() && role != v1::ROLE_PREFILL) {
      held_ = std::make_unique<HeldRequests>(options_.detached_request_grace);
    }
    service_ = std::make_unique<WorkerService>(role, loop_.get(), prefill_.get(), decode_.get(),
                                               held_.get());
    STRATA_ASSIGN_OR_RETURN(tokenizer_,
                            Tokenizer::FromFile(options_.model_dir + "/tokenizer.json"));
    auto tmpl = ChatTemplate::FromModelDir(options_.model_dir);
    if (tmpl.ok()) chat_template_ = std::make_unique<ChatTemplate>(std::move(*tmpl));
    metrics_ =
        std::make_unique<WorkerMetrics>(options_.id, loop_.get(), watchdog_.get(), agent_.get(),
                                        prefill_.get(), decode_.get(), handoff_path_);
    if (held_ != nullptr) {
      held_gauge_ = metrics_->registry()
                        .GaugeOrDie("strata_worker_held_requests",
                                    "Requests with a resume key held here (running, or finished "
                                    "and kept for a retry through another router)")
                        .AddCallback({}, [h = held_.get()] { return double(h->size()); });
    }
    if (options_.kv_tiers.remote_from_router && !has_router()) {
      return absl::InvalidArgumentError("G4 daemons from the router need a router address");
    }
    if (options_.kv_tiers.host_bytes > 0) {
      STRATA_ASSIGN_OR_RETURN(tiering_, KvTiering::Build(options_.kv_tiers, options_.id,
                                                         loop_.get(), &metrics_->registry()));
    }
    return InitHttp(max_model_len, vocab);
  }

  absl::Status InitHttp(int64_t max_model_len, int vocab) {
    http::ServerOptions ho;
    ho.host = options_.host;
    ho.port = options_.http_port;
    ho.threads = options_.http_threads;
    ho.tls = options_.http_tls;
    STRATA_ASSIGN_OR_RETURN(http_, http::Server::Create(ho));
    http_->Route("GET", "/metrics", [this](const http::Request&, auto w) {
      w->Respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics_->Serialize());
    });
    if (options_.role == v1::ROLE_MIXED) {
      backend_ = std::make_unique<LocalBackend>(
          loop_.get(), [this] { return Ready(); }, options_.engine.runner.block_size,
          options_.max_waiting_requests, [this] { return Problem(); });
      openai::ServedModel m;
      m.name = ModelName();
      m.tokenizer = tokenizer_.get();
      m.chat_template = chat_template_.get();
      m.max_model_len = max_model_len;
      m.vocab_size = vocab;
      m.model_path = options_.model_dir;
      m.device = device_;
      openai::FrontendOptions fo;
      fo.api_keys = options_.api_keys;
      fo.unknown_params = options_.unknown_params;
      fo.get_load_format = options_.get_load_format;
      fo.tool_call_parser = options_.tool_call_parser;
      fo.api_key_cache_salts = options_.api_key_cache_salts;
      fo.hide_cached_tokens = options_.hide_cached_tokens;
      fo.rate_limit = options_.rate_limit;
      fo.api_key_rate_limits = options_.api_key_rate_limits;
      fo.max_memory_bytes = options_.max_memory_bytes;
      fo.observer = metrics_->observer();
      STRATA_ASSIGN_OR_RETURN(frontend_, openai::Frontend::Create(backend_.get(), m, fo));
      frontend_->Install(*http_);
    } else {
      http_->Route("GET", "/health", [this](const http::Request&, auto w) {
        if (auto problem = Problem()) {
          w->Respond(503, "application/json", ProblemJson(*problem));
          return;
        }
        w->Respond(200, "application/json", R"({"status":"ok"})");
      });
      http_->Route("GET", "/ready", [this](const http::Request&, auto w) {
        if (auto problem = Problem()) {
          w->Respond(503, "application/json", ProblemJson(*problem));
        } else if (Ready())
          w->Respond(200, "application/json", R"({"status":"ready"})");
        else
          w->Respond(503, "application/json", R"({"status":"not ready"})");
      });
    }
    return absl::OkStatus();
  }

  absl::Status Start() override {
    grpc::ServerBuilder builder;
    proto::ConfigureServer(builder);
    builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.grpc_port),
                             proto::ClusterServerCredentials(), &grpc_port_);
    builder.RegisterService(service_.get());
    grpc_ = builder.BuildAndStart();
    if (grpc_ == nullptr || grpc_port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen for gRPC on ", options_.host, ":", options_.grpc_port));
    }
    STRATA_RETURN_IF_ERROR(http_->Start());
    if (has_router()) {
      STRATA_ASSIGN_OR_RETURN(
          proto::RouterTargets routers,
          proto::RouterTargets::Parse(options_.router_address, options_.router_service));
      v1::WorkerInfo info;
      info.set_id(options_.id);
      info.set_role(options_.role);
      info.set_grpc_address(absl::StrCat(options_.host, ":", grpc_port_));
      info.set_http_address(absl::StrCat(options_.host, ":", http_->port()));
      info.set_model(ModelName());
      info.set_model_identity(model_identity_);
      info.set_device(device_);
      info.set_kv_hash_key_fingerprint(KeyFingerprint(options_.engine.kv_hash_key.get()));
      info.set_block_size(options_.engine.runner.block_size);
      info.set_num_kv_blocks(num_kv_blocks_);
      info.set_max_model_len(loop_->engine_for_config().max_model_len());
      *info.mutable_kv_layout() = kv_layout_;
      registry_ = MakeRegistryClient(std::move(routers), info, loop_.get(), watchdog_.get(),
                                     tiering_.get(), options_.heartbeat_interval);
      registry_->Start();
    }
    started_ = true;
    return absl::OkStatus();
  }

  bool Ready() const override {
    return started_ && !draining_ && (registry_ == nullptr || registry_->registered());
  }

  void Shutdown(absl::Duration drain) override {
    if (stopped_.exchange(true)) return;
    draining_ = true;
    if (registry_) registry_->Stop();  // the router stops sending new requests
    const absl::Time deadline = absl::Now() + drain;
    while (loop_ && absl::Now() < deadline) {
      const EngineLoad l = loop_->load();
      if (l.running == 0 && l.waiting == 0) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (http_) http_->Shutdown(absl::Seconds(1));
    if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (loop_) loop_->Stop();
    // The tiers' metrics live in metrics_'s registry, which is destroyed before tiering_ would
    // be; and queued demotions are written now, while everything they need still exists.
    tiering_.reset();
    if (grpc_) grpc_->Wait();
    held_gauge_.Reset();
    held_.reset();  // its expiry cancels through the drivers
    prefill_.reset();
    decode_.reset();
  }

  int grpc_port() const override { return grpc_port_; }
  int http_port() const override { return http_ ? http_->port() : 0; }
  EngineLoad load() const override { return loop_->load(); }

 private:
  bool has_router() const {
    return !options_.router_address.empty() || !options_.router_service.empty();
  }
  // The engine's stall as /health, /ready and the mixed role's API report it; nullopt when it
  // progresses (or is idle).
  std::optional<openai::BackendProblem> Problem() const {
    std::optional<std::string> stall = watchdog_->Describe();
    if (!stall.has_value()) return std::nullopt;
    return openai::BackendProblem{"stalled", *stall, absl::ToDoubleSeconds(watchdog_->Age())};
  }
  static std::string ProblemJson(const openai::BackendProblem& p) {
    return nlohmann::json{{"status", p.status}, {"reason", p.reason}, {"seconds", p.seconds}}
        .dump();
  }

  std::string ModelName() const {
    if (!options_.model_name.empty()) return options_.model_name;
    return std::filesystem::path(options_.model_dir).filename().string();
  }

  WorkerOptions options_;
  std::string model_identity_;
  std::string device_;  // "<plugin>:<device name>", reported at registration
  int num_kv_blocks_ = 0;
  // A device KV pool's transport services (the engine's backend); null for a host pool.
  std::unique_ptr<PluginDeviceMemory> device_memory_;
  // Owns a host KV pool's memory: outlives loop_. With a device pool it is destroyed first.
  std::unique_ptr<transport::Agent> agent_;
  std::string handoff_path_ = "none";
  v1::KvLayout kv_layout_;
  uint64_t kv_region_ = 0;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<EngineWatchdog> watchdog_;  // reads loop_; read by metrics_, registry_, HTTP
  // Set before the first request; destroyed before loop_, which Shutdown() has stopped.
  std::unique_ptr<KvTiering> tiering_;
  std::unique_ptr<prefill::PrefillDriver> prefill_;
  std::unique_ptr<decode::DecodeDriver> decode_;
  std::unique_ptr<HeldRequests> held_;  // keyed requests past their stream; null: off
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::unique_ptr<WorkerMetrics> metrics_;
  metrics::CallbackHandle held_gauge_;  // strata_worker_held_requests, while held_ lives
  std::unique_ptr<http::Server> http_;
  std::unique_ptr<LocalBackend> backend_;
  std::unique_ptr<openai::Frontend> frontend_;
  std::unique_ptr<grpc::Server> grpc_;
  int grpc_port_ = 0;
  std::unique_ptr<RegistryClient> registry_;
  std::atomic<bool> started_{false}, draining_{false}, stopped_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(const WorkerOptions& options) {
  auto w = std::make_unique<WorkerImpl>(options);
  STRATA_RETURN_IF_ERROR(w->Init());
  return w;
}

}  // namespace strata::worker
