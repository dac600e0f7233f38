#pragma once
// A strata worker process: an engine on its own thread, the Worker gRPC service, the transport
// agent owning its KV pool's registration, registration and heartbeats with the router, and an
// HTTP server for /health, /ready and /metrics — plus the OpenAI API when the role is `mixed`
// (a standalone aggregated server).
//
// Roles: prefill (computes prompts for decode workers), decode (reserves blocks, receives KV,
// decodes), mixed (both phases locally; also accepts KV from prefill workers).
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strata/engine/engine.h"
#include "strata/engine/engine_loop.h"
#include "strata/openai/frontend.h"
#include "strata/proto/protocol.h"

namespace strata::worker {

// Lower KV tiers below the engine's pool (kvstore/, docs/kvstore.md): G2 pinned host memory,
// G3 RocksDB, G4 `strata kvstore` daemons. All off while host_bytes is 0.
struct KvTierOptions {
  int64_t host_bytes = 0;
  std::string host_policy = "lru";    // lru | s3-fifo
  std::string offload = "write-back"; // write-back (on eviction) | write-through (on commit)
  std::string disk_path;              // empty: no G3
  int64_t disk_bytes = 0;
  std::string disk_policy = "lru";
  int disk_admit_uses = 2;            // G2 -> G3 frequency filter
  std::vector<std::string> remote;    // kvstore daemons, host:port; empty: no G4 (unless below)
  // G4 on the kvstore daemons registered with the router (told with every heartbeat) instead of
  // a fixed list; needs a router. A daemon the router stops listing is kept for remote_grace.
  bool remote_from_router = false;
  absl::Duration remote_grace = absl::Seconds(5);
  bool demote_to_remote = true;       // G2 (and G3) evictions go to G4
};

struct WorkerOptions {
  std::string id = "worker-0";
  v1::Role role = v1::ROLE_MIXED;
  std::string host = "127.0.0.1";
  int grpc_port = 0;            // 0: ephemeral
  int http_port = 0;            // 0: ephemeral
  // The routers' registries: host:port, comma-separated, each one router; and host:port names
  // that resolve to every router (a headless Service). Both empty: standalone.
  std::string router_address;
  std::string router_service;
  std::string model_dir;
  std::string model_name;       // served name; default: the model directory's base name
  EngineOptions engine;
  std::vector<std::string> api_keys;  // mixed role's OpenAI API; empty: no auth
  // The mixed role's OpenAI API: unrecognized request fields, and GET /get_load's body
  // (frontend.h).
  openai::UnknownParams unknown_params = openai::UnknownParams::kWarn;
  openai::FrontendOptions::LoadFormat get_load_format =
      openai::FrontendOptions::LoadFormat::kSglang;
  // How chat output is searched for tool calls (kAuto: from the chat template; tool_calls.h).
  openai::ToolCallParser tool_call_parser = openai::ToolCallParser::kAuto;
  // The mixed role's API: default cache salt per API key, parallel to api_keys, and whether
  // usage reports 0 cached tokens (openai::FrontendOptions). The cluster's block hash key is
  // engine.kv_hash_key.
  std::vector<std::string> api_key_cache_salts;
  bool hide_cached_tokens = false;
  // Per-API-key requests and tokens per minute (openai::FrontendOptions; mixed role).
  openai::RateLimit rate_limit;
  std::vector<std::optional<openai::RateLimit>> api_key_rate_limits;
  // Resident bytes above which new API requests get 503 (openai::FrontendOptions); 0: none.
  int64_t max_memory_bytes = 0;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  int http_threads = 2;
  // HTTPS on http_port (the --http-tls-* flags); plaintext unless http_tls.enabled().
  http::TlsOptions http_tls;
  KvTierOptions kv_tiers;
  // A device KV pool's handoffs: kAuto maps peers' pools on this host (ipc) and stages through
  // pinned host memory otherwise; kStaged always stages.
  bool kv_device_staged = false;
  // The mixed role's own admission limit (it has no router in front when standalone): a request
  // that finds this many already waiting in the engine gets 429 with Retry-After; 0 = no limit.
  int max_waiting_requests = 1024;
  // How long the engine may have work without completing a step before the worker counts as
  // stalled (/health and /ready 503, `stalled` in its heartbeats, strata_worker_engine_stalled);
  // zero = never.
  absl::Duration engine_stall_timeout = absl::Seconds(30);
  // How long a request whose router sent a resume key (the client's Idempotency-Key) is kept
  // after its stream to the router breaks or ends, with every response it produced, for another
  // router to Attach to (docs/architecture.md, "Router failure"); unfinished requests keep
  // running meanwhile. Zero: keys are ignored and a broken stream cancels its request.
  absl::Duration detached_request_grace = absl::Seconds(30);
  // Test-only fault injection (EngineLoop::StallForTesting); off by default.
  EngineLoop::StallForTesting engine_stall_for_testing;
};

class Worker {
 public:
  static absl::StatusOr<std::unique_ptr<Worker>> Create(const WorkerOptions& options);
  virtual ~Worker() = default;

  // Starts the servers and registration. Returns once both servers listen.
  virtual absl::Status Start() = 0;
  // Serving and (when a router is configured) registered.
  virtual bool Ready() const = 0;
  // Stops taking requests (/ready turns 503, deregisters), lets running ones finish for up to
  // `drain`, then stops everything. Idempotent.
  virtual void Shutdown(absl::Duration drain) = 0;

  virtual int grpc_port() const = 0;
  virtual int http_port() const = 0;
  // The engine's load as of its last step or posted work (running, waiting, free blocks, ...).
  virtual EngineLoad load() const = 0;
};

}  // namespace strata::worker
