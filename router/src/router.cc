#include "strata/router/router.h"

#include <deque>
#include <filesystem>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "cluster_backend.h"
#include "strata/common/logging.h"
#include "strata/common/metrics.h"
#include "strata/common/status_macros.h"
#include "strata/engine/model_config.h"
#include "strata/http/server.h"
#include "strata/openai/api_metrics.h"
#include "strata/openai/frontend.h"
#include "strata/router/registry_service.h"
#include "strata/text/chat_template.h"
#include "strata/text/tokenizer.h"

namespace strata::router {
namespace {

// The admission queue's metrics: time waited, rejections by reason.
class AdmissionMetrics final : public AdmissionObserver {
 public:
  AdmissionMetrics(metrics::HistogramFamily* waited, metrics::CounterFamily* rejections)
      : waited_(waited), rejections_(rejections) {}
  void OnLeft(double waited_s) override { waited_->Default()->Observe(waited_s); }
  void OnRejected(AdmissionReject reason) override {
    rejections_->WithLabels({AdmissionRejectName(reason)})->Increment();
  }

 private:
  metrics::HistogramFamily* waited_;
  metrics::CounterFamily* rejections_;
};

// The served models: model_dir's first, then more_models, each with its name resolved.
std::vector<RouterModel> ServedModels(const RouterOptions& o) {
  std::vector<RouterModel> out;
  out.push_back({o.model_name.empty() ? std::filesystem::path(o.model_dir).filename().string()
                                      : o.model_name,
                 o.model_dir, o.model_profile_path});
  for (const RouterModel& m : o.more_models) {
    out.push_back(m);
    if (out.back().name.empty()) {
      out.back().name = std::filesystem::path(m.model_dir).filename().string();
    }
  }
  return out;
}

// Loads the profiles at `path`, warning about links they price without measurements.
absl::StatusOr<std::vector<WorkerProfile>> LoadProfilesWarning(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::vector<WorkerProfile> profiles, LoadProfiles(path));
  for (const WorkerProfile& profile : profiles) {
    if (const auto missing = profile.UnmeasuredLinks(); !missing.empty()) {
      STRATA_LOG(Warning) << "profile '" << profile.name << "' has no measured "
                          << absl::StrJoin(missing, ", ") << ": priced at 1 GB/s, no latency";
    }
  }
  return profiles;
}

// Fills the placement options the router owns: its SLO targets, --slo-class specs, the
// profiles (--profile FILE or DIR, else the shipped ones; per model where a model has its own)
// and the pending-prefill ledger (heartbeats lag a burst of requests). Under goodput every
// worker must match one of its model's profiles at registration (`pool`); the policy's own
// profile, for a worker without one, is the one for the first model on the CPU, else the
// first.
absl::Status ResolvePlacementOptions(RouterOptions& o, WorkerPool& pool) {
  PlacementOptions& p = o.placement;
  p.slo = {o.slo_ttft_s, o.slo_tpot_s};
  for (const std::string& spec : p.slo_class_specs) {
    STRATA_ASSIGN_OR_RETURN(auto named, ParseSloClass(spec, p.slo));
    p.slo_classes[named.first] = named.second;
  }
  p.track_pending_prefill = true;
  // Only the goodput policy reads the profile; others load it only when asked to.
  if (p.policy != "goodput") {
    if (!p.profile_path.empty()) {
      STRATA_ASSIGN_OR_RETURN(auto profiles, LoadProfiles(p.profile_path));
      p.profile = profiles.front();
    }
    return absl::OkStatus();
  }
  const std::string path = !p.profile_path.empty() ? p.profile_path : DefaultProfileDir();
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "the goodput policy needs a worker profile: pass --profile FILE|DIR (see strata profile)");
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<WorkerProfile> profiles, LoadProfilesWarning(path));
  const std::vector<RouterModel> served = ServedModels(o);
  absl::StatusOr<const WorkerProfile*> own = ChooseProfile(profiles, served.front().name, "cpu");
  p.profile = own.ok() ? **own : profiles.front();
  pool.RequireProfiles(std::move(profiles));
  for (const RouterModel& m : served) {
    if (m.profile_path.empty()) continue;
    STRATA_ASSIGN_OR_RETURN(std::vector<WorkerProfile> its, LoadProfilesWarning(m.profile_path));
    pool.RequireProfiles(std::move(its), m.name);
  }
  return absl::OkStatus();
}

class RouterImpl final : public Router {
 public:
  explicit RouterImpl(RouterOptions options)
      : options_(std::move(options)),
        pool_(options_.dead_after, options_.kv_hash_key),
        service_(&pool_, [this] { WakeQueue(); }) {}
  ~RouterImpl() override { Shutdown(absl::ZeroDuration()); }

  // Loads a served model's tokenizer, chat template and limits.
  absl::StatusOr<openai::ServedModel> LoadModel(const RouterModel& rm) {
    STRATA_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromDirectory(rm.model_dir));
    LoadedModel& loaded = loaded_.emplace_back();
    STRATA_ASSIGN_OR_RETURN(loaded.tokenizer, Tokenizer::FromFile(rm.model_dir + "/tokenizer.json"));
    auto tmpl = ChatTemplate::FromModelDir(rm.model_dir);
    if (tmpl.ok()) loaded.chat_template = std::make_unique<ChatTemplate>(std::move(*tmpl));
    openai::ServedModel m;
    m.name = rm.name;
    m.tokenizer = loaded.tokenizer.get();
    m.chat_template = loaded.chat_template.get();
    m.max_model_len = options_.max_model_len > 0             ? options_.max_model_len
                      : config.max_position_embeddings > 0 ? config.max_position_embeddings
                                                           : 4096;
    m.vocab_size = config.vocab_size;
    m.model_path = rm.model_dir;
    return m;
  }

  absl::Status Init() {
    const std::vector<RouterModel> served = ServedModels(options_);
    if (served.size() > 1) {
      std::vector<std::string> names;
      for (const RouterModel& m : served) names.push_back(m.name);
      STRATA_RETURN_IF_ERROR(pool_.ServeModels(names));
    }
    STRATA_RETURN_IF_ERROR(ResolvePlacementOptions(options_, pool_));
    STRATA_ASSIGN_OR_RETURN(placer_, Placer::Create(options_.placement));
    std::vector<openai::ServedModel> models;
    for (const RouterModel& rm : served) {
      STRATA_ASSIGN_OR_RETURN(openai::ServedModel m, LoadModel(rm));
      models.push_back(std::move(m));
    }
    InitMetrics();
    if (!options_.record_trace.empty()) {
      STRATA_ASSIGN_OR_RETURN(recorder_, TrafficRecorder::Open(options_.record_trace,
                                                               options_.record_prompts,
                                                               loaded_.front().tokenizer.get()));
    }
    if (options_.admission.capacity > 0) {
      queue_ = std::make_unique<AdmissionQueue>(options_.admission, admission_metrics_.get());
    }
    backend_ = std::make_unique<ClusterBackend>(
        &pool_, placer_.get(), backend_metrics_, recorder_.get(), queue_.get(),
        absl::ToDoubleSeconds(options_.worker_grace),
        absl::ToDoubleSeconds(options_.worker_stream_idle_timeout),
        absl::ToDoubleSeconds(options_.resume_settle));
    http::ServerOptions ho;
    ho.host = options_.host;
    ho.port = options_.http_port;
    ho.threads = options_.http_threads;
    ho.tls = options_.http_tls;
    STRATA_ASSIGN_OR_RETURN(http_, http::Server::Create(ho));
    http_->Route("GET", "/metrics", [this](const http::Request&, auto w) {
      w->Respond(200, std::string(metrics::kContentType), registry_.Serialize());
    });
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
    fo.observer = api_metrics_.get();
    STRATA_ASSIGN_OR_RETURN(frontend_,
                            openai::Frontend::Create(backend_.get(), std::move(models), fo));
    frontend_->Install(*http_);
    return absl::OkStatus();
  }

  void InitMetrics() {
    api_metrics_ = std::make_unique<openai::ApiMetrics>(registry_, "strata_router");
    backend_metrics_.placements = &registry_.CounterOrDie(
        "strata_router_placements_total", "Requests placed, by prefill location", {"prefill"});
    backend_metrics_.retries = &registry_.CounterOrDie(
        "strata_router_retries_total", "Requests placed again after a worker failed");
    backend_metrics_.inflight =
        registry_.GaugeOrDie("strata_router_inflight_requests", "Requests placed on workers")
            .Default();
    backend_metrics_.rejections = &registry_.CounterOrDie(
        "strata_router_rejections_total",
        "Requests refused, by reason (slo: no placement predicted to meet the SLO, waiting or "
        "not; queue_full: the admission queue was full; slack_expired: no placement met the "
        "SLO before the request's slack ran out; shutdown: waiting when the router stopped)",
        {"reason"});
    backend_metrics_.ttft_correction = &registry_.GaugeOrDie(
        "strata_router_ttft_correction",
        "Per worker EMA of observed / predicted TTFT (goodput policy's online correction)",
        {"worker"});
    backend_metrics_.ttft_error = &registry_.HistogramOrDie(
        "strata_router_ttft_observed_over_predicted", "Observed / predicted TTFT per request",
        {0.25, 0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2, 4, 8});
    backend_metrics_.resumes =
        registry_
            .CounterOrDie("strata_router_resumed_streams_total",
                          "Streams continued on another worker after theirs failed mid-answer "
                          "(from the tokens the client had)")
            .Default();
    backend_metrics_.idle_timeouts =
        registry_
            .CounterOrDie("strata_router_worker_stream_idle_timeouts_total",
                          "Worker streams cancelled after nothing arrived for the worker stream "
                          "idle timeout (the worker is dropped and the request moves on)")
            .Default();
    backend_metrics_.attaches = &registry_.CounterOrDie(
        "strata_router_idempotent_lookups_total",
        "Requests with an Idempotency-Key, by what the workers held for it (attached: served "
        "from the held generation; not_found: started, or 404 for a stream resume; conflict: "
        "the key belongs to another request)",
        {"result"});
    backend_metrics_.awaiting =
        registry_
            .GaugeOrDie("strata_router_awaiting_worker_requests",
                        "Requests waiting for a first decode worker to register (the router's "
                        "worker grace)")
            .Default();
    admission_metrics_ = std::make_unique<AdmissionMetrics>(
        &registry_.HistogramOrDie(
            "strata_router_admission_queue_seconds",
            "Time a request waited in the admission queue (placed, rejected or cancelled)",
            {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
        backend_metrics_.rejections);
    callbacks_.push_back(
        registry_
            .GaugeOrDie("strata_router_admission_queue_depth",
                        "Requests waiting in the admission queue for a placement that meets "
                        "their SLO")
            .AddCallback({}, [this] { return queue_ ? double(queue_->size()) : 0.0; }));
    auto& workers = registry_.GaugeOrDie("strata_router_workers", "Registered workers by role",
                                         {"role"});
    for (v1::Role role : {v1::ROLE_PREFILL, v1::ROLE_DECODE, v1::ROLE_MIXED}) {
      callbacks_.push_back(workers.AddCallback({RoleName(role)}, [this, role] {
        int n = 0;
        for (const auto& w : pool_.Snapshot()) n += w.role == RoleFromProto(role);
        return double(n);
      }));
    }
    callbacks_.push_back(
        registry_.GaugeOrDie("strata_router_kv_index_blocks", "Distinct blocks in the KV index")
            .AddCallback({}, [this] { return double(pool_.num_index_blocks()); }));
    if (pool_.ServedModels().size() > 1) {
      auto& by_model = registry_.GaugeOrDie(
          "strata_router_model_workers", "Registered workers by served model and role",
          {"model", "role"});
      for (const std::string& model : pool_.ServedModels()) {
        for (v1::Role role : {v1::ROLE_PREFILL, v1::ROLE_DECODE, v1::ROLE_MIXED}) {
          callbacks_.push_back(by_model.AddCallback({model, RoleName(role)}, [this, model, role] {
            int n = 0;
            for (const auto& w : pool_.SnapshotModel(model)) n += w.role == RoleFromProto(role);
            return double(n);
          }));
        }
      }
    }
    callbacks_.push_back(
        registry_.GaugeOrDie("strata_router_slo_ttft_seconds", "Configured TTFT objective")
            .AddCallback({}, [this] { return options_.slo_ttft_s; }));
    callbacks_.push_back(
        registry_.GaugeOrDie("strata_router_slo_tpot_seconds", "Configured TPOT objective")
            .AddCallback({}, [this] { return options_.slo_tpot_s; }));
  }

  static std::string RoleName(v1::Role role) {
    switch (role) {
      case v1::ROLE_PREFILL: return "prefill";
      case v1::ROLE_DECODE: return "decode";
      case v1::ROLE_MIXED: return "mixed";
      default: return "unspecified";
    }
  }

  absl::Status Start() override {
    grpc::ServerBuilder builder;
    proto::ConfigureServer(builder);
    builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.grpc_port),
                             proto::ClusterServerCredentials(), &grpc_port_);
    builder.RegisterService(&service_);
    grpc_ = builder.BuildAndStart();
    if (grpc_ == nullptr || grpc_port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen for gRPC on ", options_.host, ":", options_.grpc_port));
    }
    STRATA_RETURN_IF_ERROR(http_->Start());
    // The periodic safety net: stale workers expire, waiting requests are re-tried and those
    // out of slack answered even when no stream or heartbeat wakes the queue.
    expiry_ = std::thread([this] {
      absl::Time next_expiry = absl::Now();
      while (!stop_.WaitForNotificationWithTimeout(options_.admission_tick)) {
        if (absl::Now() >= next_expiry) {
          pool_.ExpireStale();
          next_expiry = absl::Now() + absl::Milliseconds(250);
        }
        WakeQueue();
      }
    });
    return absl::OkStatus();
  }

  bool Ready() const override { return backend_ && backend_->Ready(); }

  void WakeQueue() {
    if (backend_) backend_->WakeQueue();
  }

  void Shutdown(absl::Duration drain) override {
    if (stopped_.exchange(true)) return;
    if (backend_) backend_->SetDraining();
    if (http_) http_->Shutdown(drain);
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (expiry_.joinable()) expiry_.join();
    if (grpc_) {
      grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      grpc_->Wait();
    }
  }

  int http_port() const override { return http_ ? http_->port() : 0; }
  int grpc_port() const override { return grpc_port_; }

 private:
  RouterOptions options_;
  WorkerPool pool_;
  RegistryService service_;
  std::unique_ptr<Placer> placer_;
  // Each served model's tokenizer and chat template (the front end points at them).
  struct LoadedModel {
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<ChatTemplate> chat_template;
  };
  std::deque<LoadedModel> loaded_;
  metrics::Registry registry_;
  std::unique_ptr<openai::ApiMetrics> api_metrics_;
  ClusterBackendMetrics backend_metrics_;
  std::unique_ptr<AdmissionMetrics> admission_metrics_;
  std::unique_ptr<AdmissionQueue> queue_;
  std::vector<metrics::CallbackHandle> callbacks_;
  std::unique_ptr<TrafficRecorder> recorder_;
  std::unique_ptr<ClusterBackend> backend_;
  std::unique_ptr<http::Server> http_;
  std::unique_ptr<openai::Frontend> frontend_;
  std::unique_ptr<grpc::Server> grpc_;
  int grpc_port_ = 0;
  absl::Notification stop_;
  std::thread expiry_;
  std::atomic<bool> stopped_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> Router::Create(const RouterOptions& options) {
  auto r = std::make_unique<RouterImpl>(options);
  STRATA_RETURN_IF_ERROR(r->Init());
  return r;
}

}  // namespace strata::router
