#pragma once
// The router process: the OpenAI API over HTTP for clients, the Registry gRPC service for
// workers, the worker pool with the global KV index, and placement of every request on a
// decode worker (and optionally a prefill worker), streaming tokens back over gRPC.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strata/openai/frontend.h"
#include "strata/common/block_hash.h"
#include "strata/router/admission_queue.h"
#include "strata/router/placement.h"

namespace strata::router {

// A model the router serves besides RouterOptions::model_dir: its own workers (those that
// register naming it), KV index and goodput profiles.
struct RouterModel {
  std::string name;       // the `model` clients send and its workers register with
  std::string model_dir;  // tokenizer, chat template and context length (no weights)
  // Goodput profiles (file or directory) of this model's workers; "" = the router's
  // (PlacementOptions::profile_path or the shipped ones).
  std::string profile_path;
};

struct RouterOptions {
  std::string host = "127.0.0.1";
  int http_port = 8000;  // 0: ephemeral
  int grpc_port = 0;     // registry; 0: ephemeral
  std::string model_dir;   // for the tokenizer, chat template and context length (no weights)
  std::string model_name;  // served name; default: the directory's base name
  // Goodput profiles of model_dir's workers when other models are served too; "" = the
  // router's (PlacementOptions::profile_path or the shipped ones).
  std::string model_profile_path;
  // More models behind this router. With any, each worker serves the model it names at
  // registration, and a request is placed only on its model's workers (worker_pool.h); with
  // none, every worker serves model_dir's model whatever name it registers with.
  std::vector<RouterModel> more_models;
  std::vector<std::string> api_keys;
  // The OpenAI API's handling of unrecognized request fields, and GET /get_load's body
  // (frontend.h).
  openai::UnknownParams unknown_params = openai::UnknownParams::kWarn;
  openai::FrontendOptions::LoadFormat get_load_format =
      openai::FrontendOptions::LoadFormat::kSglang;
  // How chat output is searched for tool calls (kAuto: from the chat template; tool_calls.h).
  openai::ToolCallParser tool_call_parser = openai::ToolCallParser::kAuto;
  // Default cache salt per API key, parallel to api_keys (openai::FrontendOptions).
  std::vector<std::string> api_key_cache_salts;
  bool hide_cached_tokens = false;  // usage reports 0 cached tokens to clients
  // Per-API-key requests and tokens per minute, enforced by this router on its own
  // (openai::FrontendOptions).
  openai::RateLimit rate_limit;
  std::vector<std::optional<openai::RateLimit>> api_key_rate_limits;
  // Resident bytes above which new API requests get 503 (openai::FrontendOptions); 0: none.
  int64_t max_memory_bytes = 0;
  // The cluster's block hash key (null: unkeyed). Workers with another key are refused.
  std::shared_ptr<const BlockHashKey> kv_hash_key;
  int64_t max_model_len = 0;  // context window the API enforces; 0: the model's config.json
  // Appends every request to this strata-format trace (replay/trace.h) when non-empty.
  std::string record_trace;
  bool record_prompts = false;  // also write each prompt's text into the recording
  PlacementOptions placement;
  // Requests that could meet their SLO after waiting for a decode slot wait here, least slack
  // first (goodput policy; capacity 0: 429 at once). See admission_queue.h.
  AdmissionOptions admission;
  // How often the admission queue is woken when nothing else woke it (expiring slack).
  absl::Duration admission_tick = absl::Milliseconds(50);
  absl::Duration dead_after = absl::Seconds(3);
  // A request that finds no decode worker registered waits for one up to this long instead of
  // getting 503 at once: within this long of the start (a restarted router's workers register
  // again with their next heartbeat), or of its own worker's failure (a restarted worker comes
  // back). 0: no grace.
  absl::Duration worker_grace = absl::Seconds(5);
  // A stream from a worker on which nothing arrives for this long is cancelled, the worker
  // dropped, and the request placed again or resumed on another worker (a hung worker's
  // requests move on). Zero: no limit.
  absl::Duration worker_stream_idle_timeout = absl::Seconds(60);
  // A request with an Idempotency-Key that arrives within this long of the start asks the
  // workers whether one holds its generation only then: the workers of a restarted router
  // register again with their next heartbeat (every 0.5 s by default, after a reconnect backoff
  // of up to 1 s), and a worker not yet registered would be missed and the request started a
  // second time.
  absl::Duration resume_settle = absl::Seconds(2.5);
  int http_threads = 2;
  // HTTPS on http_port (the --http-tls-* flags); plaintext unless http_tls.enabled().
  http::TlsOptions http_tls;
  double slo_ttft_s = 2.0;  // reported with the metrics (the goodput work uses them)
  double slo_tpot_s = 0.2;
};

class Router {
 public:
  static absl::StatusOr<std::unique_ptr<Router>> Create(const RouterOptions& options);
  virtual ~Router() = default;
  virtual absl::Status Start() = 0;
  // Ready when at least one decode-capable worker is registered.
  virtual bool Ready() const = 0;
  // Stops accepting, lets streams finish for up to `drain`, stops. Idempotent.
  virtual void Shutdown(absl::Duration drain) = 0;
  virtual int http_port() const = 0;
  virtual int grpc_port() const = 0;
};

}  // namespace strata::router
