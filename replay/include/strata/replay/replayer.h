#pragma once
// Open-loop replay of a trace against any OpenAI-compatible server, with per-request latency
// measurement.
//
// Open loop: request i leaves at start + requests[i].arrival_s whatever the server is doing -
// a slow or stalled server never delays later sends (there is no concurrency cap). Each request
// is one HTTP/1.1 connection: POST <base>/completions with
//   {"model", "prompt": [token ids], "max_tokens": output_tokens, "ignore_eos": true,
//    "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}
// and optionally `Authorization: Bearer <api_key>`. Prompts come from a PromptSynthesizer and are
// built at send time (a trace of 12k-token prompts does not fit in memory all at once), or are
// the trace's own prompt text ("prompt": "...") per ReplayOptions::prompt_source.
//
// All sockets are asynchronous (Boost.Asio) and served by a small fixed pool of threads, so many
// thousands of streams can be in flight at once; the open-file limit is raised to its hard
// maximum for the duration of a run.
//
// Measurement (times are seconds on the steady clock, relative to the run's start):
//   send_s        when the connect for the request was started (scheduled_s + dispatch lag);
//   ttft_s        first SSE chunk with a non-empty `choices` array, minus send_s;
//   gaps_s        time between successive such chunks (one entry per chunk after the first);
//   e2e_s         `data: [DONE]` (or the failure) minus send_s;
//   tokens        usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens and
//                 usage.completion_tokens from the final usage chunk (-1 when absent).
// Errors (ErrorKind): connect failure; HTTP status >= 400 (kHttp4xx / kHttp5xx, with the OpenAI
// error `type` and `message` from the body); an SSE `{"error": ...}` event, a malformed event or
// a stream that ends without [DONE] (kStream); the per-request timeout (kTimeout).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/replay/prompt_synthesizer.h"
#include "strata/replay/trace.h"

namespace strata::replay {

enum class ErrorKind { kNone, kConnect, kHttp4xx, kHttp5xx, kStream, kTimeout };

// "none", "connect", "http_4xx", "http_5xx", "stream", "timeout".
const char* ErrorKindName(ErrorKind kind);

struct RequestResult {
  int64_t index = 0;           // Position in the replayed request list.
  int64_t trace_line = 0;      // TraceRequest::line.
  int32_t input_tokens = 0;    // Prompt tokens sent.
  int32_t max_tokens = 0;      // Output tokens requested.
  double scheduled_s = 0.0;    // arrival_s of the request.
  double send_s = -1.0;        // -1 if never sent.
  double ttft_s = -1.0;        // -1 without a token chunk.
  double e2e_s = -1.0;         // -1 if never finished.
  std::vector<double> gaps_s;  // Inter-chunk gaps.
  int32_t token_chunks = 0;    // SSE chunks with non-empty choices.
  int32_t prompt_tokens = -1;
  int32_t cached_tokens = -1;
  int32_t completion_tokens = -1;
  int http_status = 0;  // 0 when no response head arrived.
  // Connection errors retried (ReplayOptions::attempts), and how many of those retries resumed
  // a stream that had events (Last-Event-ID).
  int32_t retries = 0;
  int32_t resumes = 0;
  ErrorKind error = ErrorKind::kNone;
  std::string error_type;     // OpenAI error type, or a short reason for other kinds.
  std::string error_message;  // Human-readable detail.

  bool ok() const { return error == ErrorKind::kNone; }
};

// Parsed "http[s]://host:port[/prefix]". The API base is host:port + prefix, defaulting to
// "/v1". Over https the server's certificate must chain to `ca_file` (PEM; "" = the system's CA
// store) and name `host` (a DNS name or an IP address).
struct ServerUrl {
  bool tls = false;
  std::string host;
  std::string port;       // default 80, or 443 with https
  std::string base_path;  // e.g. "/v1", no trailing slash.
  std::string ca_file;    // https: the CA bundle that verifies the server (strata replay --ca)
};
// InvalidArgument for anything but http:// or https:// URLs with a host.
absl::StatusOr<ServerUrl> ParseServerUrl(std::string_view url);

// What GET <base>/models says about the first served model.
struct ModelInfo {
  std::string id;
  int32_t max_model_len = 0;  // 0 when not reported.
  int32_t vocab_size = 0;     // 0 when not reported (strata does not report it today).
};
// Synchronous; Unavailable when the server cannot be reached, InvalidArgument on a bad answer.
absl::StatusOr<ModelInfo> FetchModelInfo(const ServerUrl& url, const std::string& api_key,
                                         double timeout_s = 10.0);
// The "device" a strata worker reports in GET /server_info ("cuda:NVIDIA H100 80GB HBM3");
// "" when the server does not say (or cannot be reached).
std::string FetchServerDevice(const ServerUrl& url, const std::string& api_key,
                              double timeout_s = 10.0);

// Which prompt a request carries.
//   kAuto    the trace's prompt text where it has one (a `strata` recording made with prompt
//            text), else synthesized token ids.
//   kTokens  always synthesized token ids (the trace's text is ignored).
//   kText    always the trace's text; Run fails up front (InvalidArgument naming the request)
//            if any request has none. Clipping an input drops its text (its token count no
//            longer matches), so clipped requests have none.
enum class PromptSource { kAuto, kTokens, kText };

// "auto" | "tokens" | "text"; InvalidArgument otherwise.
absl::StatusOr<PromptSource> ParsePromptSource(std::string_view name);

struct ReplayOptions {
  ServerUrl url;
  std::string model;          // Served model name (required).
  std::string api_key;        // Empty: no Authorization header.
  int io_threads = 2;         // >= 1.
  double timeout_s = 600.0;   // Per request, from its send to its end; > 0.
  PromptSource prompt_source = PromptSource::kAuto;
  // Tries per request: a connection error (refused, reset, a stream cut before [DONE]) is
  // retried up to attempts - 1 times, after 0.25 s, 0.5 s, ... (at most 2 s), with the
  // request's Idempotency-Key and, once the stream had events, Last-Event-ID, so a request
  // whose router died resumes through another (docs/openai_api.md). 1: no retries, no key.
  int attempts = 4;
};

// Counters the progress reporter reads while a run is going. Monotonic.
struct ReplayProgress {
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> errors{0};
};

// Called on Run's calling thread with the progress and the results that became final since
// the previous call (each final result is passed exactly once; the pointers stay valid until
// Run returns).
using ProgressCallback =
    std::function<void(const ReplayProgress&, const std::vector<const RequestResult*>&)>;

class Replayer {
 public:
  // InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<Replayer>> Create(ReplayOptions options);
  ~Replayer();

  // Replays `requests` (arrival_s non-decreasing, already windowed / clipped / sped up) and
  // blocks until every request has finished or failed; result i belongs to requests[i].
  // `on_progress` (may be empty) is called about every progress_interval_s and once at the
  // end. Not reentrant: one Run at a time per Replayer. Errors: InvalidArgument for unsorted
  // arrivals or inconsistent lengths/block ids, Unavailable if the host cannot be resolved.
  absl::StatusOr<std::vector<RequestResult>> Run(const std::vector<TraceRequest>& requests,
                                                 const PromptSynthesizer& prompts,
                                                 const ProgressCallback& on_progress = {},
                                                 double progress_interval_s = 0.5);

  // The JSON body sent for one request (exposed for tests and docs).
  static std::string RequestBody(const std::string& model, const std::vector<int32_t>& prompt,
                                 int32_t max_tokens);
  // The same body with a text prompt (the server tokenizes it).
  static std::string RequestBody(const std::string& model, const std::string& prompt_text,
                                 int32_t max_tokens);

 private:
  explicit Replayer(ReplayOptions options) : options_(std::move(options)) {}
  ReplayOptions options_;
};

}  // namespace strata::replay
