#pragma once
// What the OpenAI front end generates with: a local engine (a `mixed` worker serving the API
// itself) or the router placing requests on the cluster. The front end parses and validates the
// HTTP request, tokenizes it (chat template included) and calls Backend::Generate once per
// choice (`n`); the backend streams GenerateEvents back.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "strata/types/finish_reason.h"
#include "strata/types/sampling.h"

namespace strata::openai {

struct GenerateRequest {
  std::string request_id;            // unique per choice, e.g. "cmpl-…-0"
  std::string model;                 // the served model name the client asked for
  std::vector<int32_t> prompt;       // token ids (chat template already applied)
  SamplingParams params;             // max_tokens already resolved (never < 0)
  std::string slo_class;             // from X-SLO-Class; "" = default
  std::string api_key_id;            // which key authorized it ("" when auth is off)
  // The client reads events as they come (SSE). A backend may hold a non-streaming request's
  // events until its end, so that a generation cut short by a failure can start over unseen.
  bool stream = false;
  // The client's Idempotency-Key with the choice's index ("" without one; only given to a
  // backend that CanResume): a retry of the request, through any router, is served from the
  // generation that key started, while it is held, instead of starting another.
  std::string idempotency_key;
  // The client has part of this choice's stream already (its Last-Event-ID): the backend
  // continues the held generation, replaying it from its first event, or fails with
  // kNotFound when none is held (starting again would not continue what the client has).
  bool resume_only = false;
};

// One increment of a generation. Events of one request arrive in order, from any thread; the
// last has `finished` (or a non-OK `status`, after which nothing follows).
struct GenerateEvent {
  absl::Status status;                 // non-OK: the request failed (see the code mapping below)
  std::vector<int32_t> tokens;         // new tokens
  std::string text;                    // new text (detokenized, stop strings removed)
  std::vector<SampleResult> logprobs;  // one per new token when requested
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens served from a prefix cache (any tier / worker)
  int32_t completion_tokens = 0;
};
// A backend that sheds load may attach to its kResourceExhausted status (absl::Status::SetPayload)
// the seconds after which a retry is predicted to succeed, as decimal text; the front end then
// answers 429 with `Retry-After` (whole seconds, rounded up). strata::router uses the same URL.
inline constexpr char kRetryAfterPayload[] = "type.strata.dev/retry-after-seconds";

// Status codes a backend reports, and the HTTP status the front end answers with if nothing
// was streamed yet: kInvalidArgument 400, kNotFound 404, kAlreadyExists 409 (an
// Idempotency-Key in use by another request), kOutOfRange 413 (prompt too long),
// kResourceExhausted 429 (overloaded), kUnavailable 503 (no worker), kCancelled 499-ish (client
// gone; nothing is sent), anything else 500.

// Cancels the generation when destroyed or Cancel()ed (a client that disconnected): the
// backend stops work and frees its KV blocks everywhere. Thread-safe; idempotent.
class GenerationHandle {
 public:
  virtual ~GenerationHandle() = default;
  virtual void Cancel() = 0;
};

using EventCallback = std::function<void(GenerateEvent)>;

// A backend's load now, for GET /get_load (what load-aware peer routers poll).
struct BackendLoad {
  int64_t running = 0;  // sequences generating
  int64_t waiting = 0;  // requests waiting to start
  // Context tokens of the running sequences plus prompt tokens not yet computed.
  int64_t tokens = 0;
  int64_t kv_capacity_tokens = 0;  // tokens the KV cache holds in all (0: unknown)
};

// Why a backend that is up cannot serve now (e.g. its engine stopped completing steps): /health
// and /ready answer 503 with {"status": status, "reason": reason, "seconds": seconds}.
struct BackendProblem {
  std::string status;  // a short word, e.g. "stalled"
  std::string reason;  // a sentence for the operator
  double seconds = 0;  // how long it has been so
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Starts the generation and returns at once; `on_event` may run before Generate returns.
  // Destroying the handle does NOT cancel a request that has already finished.
  // After delivering the last event (finished or non-OK), or once cancelled, the backend drops
  // `on_event` and what it captured (the front end's per-request state lives in it).
  virtual std::unique_ptr<GenerationHandle> Generate(GenerateRequest request,
                                                     EventCallback on_event) = 0;
  // True when the backend can take requests now (/ready).
  virtual bool Ready() const = 0;
  // The backend is up but cannot make progress (/health and /ready answer 503); nullopt when
  // healthy. Thread-safe and quick.
  virtual std::optional<BackendProblem> Problem() const { return std::nullopt; }
  // Thread-safe and quick (a snapshot); the default knows nothing (all zero).
  virtual BackendLoad Load() const { return {}; }
  // Whether a keyed generation outlives the process that started it (the router), so that a
  // retry can continue it (GenerateRequest::idempotency_key); false: the front end ignores the
  // Idempotency-Key and Last-Event-ID headers.
  virtual bool CanResume() const { return false; }
};

}  // namespace strata::openai
