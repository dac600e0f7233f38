#pragma once
// One HTTP generation request in flight: its choices' backend generations, the aggregation of
// their events and the (streamed or single) response. Internal to strata::openai.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "strata/http/server.h"
#include "strata/openai/backend.h"
#include "strata/openai/format.h"
#include "strata/openai/frontend.h"
#include "strata/openai/protocol.h"
#include "strata/openai/tool_calls.h"
#include "strata/text/tokenizer.h"
#include "strata/types/sampling.h"

namespace strata::openai::internal {

enum class Endpoint { kCompletions, kChat };

// A validated, tokenized request.
struct JobSpec {
  Endpoint endpoint = Endpoint::kCompletions;
  ResponseMeta meta;
  std::vector<std::vector<int32_t>> prompts;  // choice index = prompt index * n + i
  std::vector<int> max_tokens;                // per prompt, resolved and clipped
  SamplingParams params;                      // shared by all choices (max_tokens/seed set later)
  // Completions' echo: per prompt, the text that starts each of its choices (empty: no echo).
  std::vector<std::string> echo;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  // Chat with tools in use: the format the output's tool calls are parsed from (kNone: none).
  ToolCallParser tool_parser = ToolCallParser::kNone;
  bool parallel_tool_calls = true;  // false: a choice returns its first call only
  std::string slo_class;
  std::string api_key_id;
  bool hide_cached_tokens = false;  // usage tells clients 0 cached tokens
  absl::Time arrival;
  std::vector<std::string> unknown_params;  // served without (UnknownParams kWarn/kIgnore)
  int64_t rate_charged_output_tokens = 0;   // RequestRecord::rate_charged_output_tokens
  // The client's Idempotency-Key ("": none, or the backend cannot resume): stream chunks carry
  // SSE ids (resume.h), and a retry continues the original generation.
  std::string idempotency_key;
  // From Last-Event-ID: per choice, the stream chunks the client has; they are not sent again.
  std::vector<int64_t> resume_after;
};

struct JobContext {
  Backend* backend;
  const Tokenizer* tokenizer;
  RequestObserver* observer;  // may be null
};

// Starts every choice and answers `writer` when they finish, fail or the client leaves.
void StartJob(JobSpec spec, const JobContext& context,
              std::shared_ptr<http::ResponseWriter> writer);

// The record of a request that never reached the backend.
RequestRecord RecordFor(const JobSpec& spec);
const char* EndpointPath(Endpoint endpoint);

// Sends {"error": ...} as application/json with error.http_status.
void RespondApiError(http::ResponseWriter& writer, const ApiError& error);

}  // namespace strata::openai::internal
