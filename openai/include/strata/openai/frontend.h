#pragma once
// The OpenAI-compatible HTTP front end, shared by the router and by a standalone `mixed` worker:
// POST /v1/completions, POST /v1/chat/completions, GET /v1/models (and /v1/models/{id}),
// GET /health, GET /ready, and what the vLLM and SGLang routers probe on a worker:
// GET /health_generate (one token generated), /server_info, /get_server_info, /model_info,
// /get_model_info, /get_load, and POST /tokenize, /detokenize. (/metrics is installed by the
// process.) See docs/openai_api.md for the parameters and errors.
//
// Per request the Frontend authenticates, parses and validates the body, tokenizes (chat
// template included), resolves max_tokens against the context window, then calls
// Backend::Generate once per choice and answers either once (non-streaming) or as
// Server-Sent Events while the backend's events arrive. A client that disconnects cancels every
// choice's GenerationHandle.
//
// Threading: handlers never block; backend events may arrive on any thread. Lifetime: the
// Frontend, its Backend, tokenizer and chat template must outlive every in-flight request
// (shut the http::Server down and drain the backend before destroying them).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "strata/http/server.h"
#include "strata/openai/backend.h"
#include "strata/openai/protocol.h"
#include "strata/openai/rate_limit.h"
#include "strata/openai/tool_calls.h"
#include "strata/text/chat_template.h"
#include "strata/text/tokenizer.h"

namespace strata {
class MemoryWatch;
}  // namespace strata

namespace strata::openai {
namespace internal {
class RequestPool;
struct JobSpec;
}  // namespace internal

struct ServedModel {
  std::string name;                                  // the `model` clients must send
  const Tokenizer* tokenizer = nullptr;              // required; not owned
  const ChatTemplate* chat_template = nullptr;       // null: chat answers 400; not owned
  int64_t max_model_len = 0;                         // context window (prompt + output)
  int vocab_size = 0;                                // the model's; bounds prompt token ids
  // Where the model was loaded from, reported by /server_info and /model_info (SGLang's
  // router loads its tokenizer from there); empty: the name.
  std::string model_path;
  // What computes, as workers report it ("cuda:NVIDIA H100 80GB HBM3"); "" = not said. In
  // /server_info, where `strata profile` reads it.
  std::string device;
};

// What happened to one HTTP request, for metrics. Durations are wall-clock from the moment the
// handler started.
struct RequestRecord {
  std::string endpoint;  // "/v1/completions" or "/v1/chat/completions"
  std::string model;
  std::string slo_class;
  std::string api_key_id;
  int http_status = 200;  // a stream that failed after it started keeps 200; see `failed`
  bool stream = false;
  bool failed = false;     // any error, before or after the stream started
  bool cancelled = false;  // the client disconnected first
  int n = 1;               // choices per prompt
  absl::Duration ttft = absl::InfiniteDuration();  // to the first token; infinite if none
  absl::Duration e2e = absl::ZeroDuration();       // to the end of the response
  // Gaps between successive token-carrying events of each choice (all choices concatenated).
  std::vector<absl::Duration> inter_token_gaps;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  // Request fields served without (CommonRequest::unknown_params).
  std::vector<std::string> unknown_params;
  // Why the request was refused before it was read, for the shed-requests metric: "memory"
  // (the process is over FrontendOptions::max_memory_bytes); "" when it was not shed.
  std::string shed_reason;
  // The output budget (max_tokens of every choice) charged to the API key's tokens-per-minute
  // limit at admission; what the request did not generate of it is given back when it ends.
  int64_t rate_charged_output_tokens = 0;
};

// Receives one record per request (also for rejected ones), from any thread; must be
// thread-safe and quick.
class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  virtual void OnFinished(const RequestRecord& record) = 0;
};

struct FrontendOptions {
  // Empty: auth off. Otherwise /v1/* need `Authorization: Bearer <key>` (401 otherwise); the
  // request's api_key_id is "key-<index in this list>".
  std::vector<std::string> api_keys;
  // The cache salt of requests that send no `cache_salt`, per API key (parallel to api_keys;
  // "" or missing: none), so that keys (tenants) never share cached prompt blocks. At most as
  // many entries as api_keys, each at most SamplingParams::kMaxCacheSaltBytes.
  std::vector<std::string> api_key_cache_salts;
  // Requests and tokens per minute (rate_limit.h): `rate_limit` for every API key without one of
  // its own in `api_key_rate_limits` (parallel to api_keys), and for all requests together when
  // auth is off. Over a limit: 429 with Retry-After.
  RateLimit rate_limit;
  std::vector<std::optional<RateLimit>> api_key_rate_limits;
  // Threads that parse, render and tokenize /v1/completions, /v1/chat/completions, /tokenize
  // and /detokenize requests, off the HTTP I/O threads (a long prompt's tokenization would stall
  // every connection of its I/O thread); 0: on the I/O thread. Past max_queued_requests
  // requests waiting for them, a request gets 503 with Retry-After at once.
  int request_threads = 2;
  size_t max_queued_requests = 4096;
  // Memory-based shedding (memory_limit.h): while this process's resident set is above
  // max_memory_bytes, sampled every memory_sample_interval, new /v1/completions and
  // /v1/chat/completions requests get 503 with Retry-After; requests already accepted run on.
  // 0: no limit.
  int64_t max_memory_bytes = 0;
  absl::Duration memory_sample_interval = absl::Milliseconds(100);
  // Report usage.prompt_tokens_details.cached_tokens as 0 (metrics keep the real count): the
  // number tells a client whether someone else sent the same prefix before.
  bool hide_cached_tokens = false;
  // Longest prompt accepted (413 beyond); 0: max_model_len - 1 (room for one output token).
  int64_t max_prompt_tokens = 0;
  RequestObserver* observer = nullptr;  // optional; not owned; outlives the Frontend
  // Fields no endpoint here knows: 400 (kReject, OpenAI's behaviour), or served without them
  // and counted, each name logged once (kWarn), or served and counted silently (kIgnore).
  UnknownParams unknown_params = UnknownParams::kWarn;
  // The body of GET /get_load: SGLang's (an array with one entry per data-parallel rank:
  // dp_rank, num_reqs, num_waiting_reqs, num_tokens) or vllm-router's ({"load": N}, the
  // sequences running and waiting). One URL, two incompatible shapes: pick the one the peer
  // router in front of this process reads.
  enum class LoadFormat { kSglang, kVllmRouter };
  LoadFormat get_load_format = LoadFormat::kSglang;
  // How tool calls are found in chat output when a request sends tools (tool_calls.h): kAuto
  // picks the format from the chat template's markers. With kNone (or a template auto finds no
  // format in) a request whose tools are in use (tool_choice not "none") answers 400.
  ToolCallParser tool_call_parser = ToolCallParser::kAuto;
};

// "sglang" or "vllm-router"; InvalidArgument otherwise.
absl::Status ParseLoadFormat(std::string_view name, FrontendOptions::LoadFormat* out);

class Frontend {
 public:
  // InvalidArgument when backend or tokenizer is null, or max_model_len / vocab_size <= 0.
  static absl::StatusOr<std::unique_ptr<Frontend>> Create(Backend* backend, ServedModel model,
                                                          FrontendOptions options);
  // Serves several models: each request's `model` picks its tokenizer, template and limits
  // (404 model_not_found for a name not served); /v1/models lists them all, GET
  // /v1/models/{name} each one. The probes of a single model (/health_generate, /server_info,
  // /model_info) describe the first. InvalidArgument as above for any model, for none, and for
  // a name given twice.
  static absl::StatusOr<std::unique_ptr<Frontend>> Create(Backend* backend,
                                                          std::vector<ServedModel> models,
                                                          FrontendOptions options);
  ~Frontend();

  // Registers the routes. Call before server.Start().
  void Install(http::Server& server);

  // The handlers themselves (unit-testable with any ResponseWriter).
  void HandleCompletions(const http::Request& request,
                         std::shared_ptr<http::ResponseWriter> writer);
  void HandleChatCompletions(const http::Request& request,
                             std::shared_ptr<http::ResponseWriter> writer);
  void HandleModels(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);
  void HandleHealth(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);
  void HandleReady(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);
  void HandleHealthGenerate(const http::Request& request,
                            std::shared_ptr<http::ResponseWriter> writer);
  void HandleServerInfo(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);
  void HandleModelInfo(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);
  void HandleGetLoad(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);
  void HandleTokenize(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);
  void HandleDetokenize(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer);

  // The first served model.
  const ServedModel& model() const { return models_.front().served; }
  // The first model's tool-call format (FrontendOptions::tool_call_parser, kAuto resolved).
  ToolCallParser tool_call_parser() const { return models_.front().tool_parser; }

 private:
  // A served model with its tool-call format resolved.
  struct Model {
    ServedModel served;
    ToolCallParser tool_parser = ToolCallParser::kNone;
  };

  Frontend(Backend* backend, std::vector<ServedModel> models, FrontendOptions options);

  // The model named `name`, or null.
  const Model* FindModel(std::string_view name) const;
  // The model a /tokenize or /detokenize request names; an empty name means the only one
  // served (400 when there are several).
  std::optional<ApiError> ModelForTokenize(const std::string& name, const Model** model) const;
  // GET /v1/models/{name} of one model.
  void HandleModel(const Model& model, const http::Request& request,
                   std::shared_ptr<http::ResponseWriter> writer);

  // Each returns the error to answer with, or nullopt.
  // *key_index: the key's position in api_keys (-1 with auth off), when not null.
  std::optional<ApiError> Authorize(const http::Request& request, std::string* key_id,
                                    int* key_index = nullptr) const;
  // Gives a request without its own cache salt the default salt of API key `key_index`.
  void ApplyKeyCacheSalt(int key_index, SamplingParams* params) const;
  std::optional<ApiError> PrepareCompletion(const Model& m, const CompletionRequest& request,
                                            internal::JobSpec* spec) const;
  std::optional<ApiError> PrepareChat(const Model& m, const ChatRequest& request,
                                      internal::JobSpec* spec) const;
  // Checks prompt lengths, resolves each prompt's max_tokens and validates the sampling.
  std::optional<ApiError> ResolveLimits(const Model& m, int default_max_tokens,
                                        internal::JobSpec* spec) const;
  // Sends the error and reports the request to the observer (with RequestRecord::shed_reason).
  void Reject(const ApiError& error, const internal::JobSpec& spec, http::ResponseWriter& writer,
              std::string shed_reason = "") const;
  internal::JobSpec NewSpec(const http::Request& request, bool chat) const;
  // The 503 to answer with while the process is over its memory limit.
  std::optional<ApiError> ShedForMemory() const;
  // Charges the request to its key's rate limits; the 429 to answer with when over one.
  std::optional<ApiError> ChargeRateLimit(int key_index, internal::JobSpec* spec);
  // Names each unknown field in the log the first time it is seen (kWarn).
  void NoteUnknownParams(const std::vector<std::string>& names);
  ParseOptions parse_options() const { return {options_.unknown_params}; }

  Backend* backend_;
  std::vector<Model> models_;  // at least one
  FrontendOptions options_;
  int64_t created_;  // Unix seconds, reported by /v1/models
  RateLimiter rate_limiter_;
  // Forwards every record to options_.observer after returning a request's unused token charge
  // to its key's bucket.
  class RefundingObserver;
  std::unique_ptr<RefundingObserver> observer_;
  std::unique_ptr<MemoryWatch> memory_watch_;  // null: no memory limit
  // Last, so it is destroyed (its threads joined) before anything its tasks use.
  std::unique_ptr<internal::RequestPool> pool_;
  absl::Mutex unknown_mu_;
  // Unknown field names already logged; bounded (kMaxUnknownNamesLogged).
  absl::flat_hash_set<std::string> unknown_logged_ ABSL_GUARDED_BY(unknown_mu_);
};

}  // namespace strata::openai
