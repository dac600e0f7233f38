#pragma once
// OpenAI request bodies: parsing and validation of POST /v1/completions and
// POST /v1/chat/completions into plain structs, and the OpenAI error shape.
//
// Parsing is pure (no tokenizer, no served-model list): it checks JSON syntax, types and ranges
// of every known field and ignores unknown fields (clients send extras). Checks that need the
// model (model name, token ids vs vocab, context length) are done by the Frontend.
//
// Conventions (docs/openai_api.md): `null` on an optional field means "default"; a known field
// with a wrong type or an out-of-range value is a 400 whose `param` names the field.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "strata/types/sampling.h"

namespace strata::openai {

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}} sent with http_status.
// Empty param/code serialize as null.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
  int retry_after_s = 0;  // > 0: sent as a Retry-After header (from kRetryAfterPayload)

  static ApiError BadRequest(std::string message, std::string param = "");
  static ApiError ModelNotFound(std::string_view model);  // 404, code "model_not_found"
  static ApiError PromptTooLong(std::string message);     // 413
};

// The HTTP status a backend failure maps to when nothing was sent yet (see backend.h):
// InvalidArgument 400, NotFound 404, OutOfRange 413, ResourceExhausted 429, Unavailable 503,
// Cancelled 499 (the client is gone; nothing is sent), anything else 500.
int HttpStatusForCode(absl::StatusCode code);
// The ApiError for a failed backend event (type by status: 4xx invalid_request_error,
// 429 rate_limit_error/"rate_limit_exceeded", 5xx server_error).
ApiError ApiErrorFromStatus(const absl::Status& status);

// Parameters shared by both endpoints.
struct CommonRequest {
  std::string model;
  // max_tokens is left at -1 when the client did not set it: the Frontend resolves it (16 for
  // completions, the rest of the context window for chat) and clips it to the context window.
  SamplingParams sampling;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// One prompt of /v1/completions: text to tokenize, or token ids as given.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct CompletionRequest {
  CommonRequest common;
  std::vector<PromptInput> prompts;  // a batch: each prompt has its own n choices
  // sampling.logprobs: -1 when `logprobs` is absent/null, else 0..20 (top alternatives).
};

struct ChatRequest {
  CommonRequest common;
  // Normalized messages for the chat template: every content is a string (text parts joined
  // with "\n"); other message keys (name, tool_calls, tool_call_id...) are kept as sent.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool logprobs = false;  // sampling.logprobs = top_logprobs when true, else -1
};

// Both return nullopt on success (and fill *out), else the error to answer with.
std::optional<ApiError> ParseCompletionRequest(std::string_view body, CompletionRequest* out);
std::optional<ApiError> ParseChatRequest(std::string_view body, ChatRequest* out);

}  // namespace strata::openai
